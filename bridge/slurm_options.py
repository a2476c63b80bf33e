"""sbatch options the bridge passes to Slurm as they are (mail, signals, requeue, GPUs …).

These options mean something only to Slurm: the bridge does not interpret them, it
checks their values as sbatch would, carries them in the scheduling annotation
(:class:`bridge.scheduling.SchedulingOptions`, one field each) and the Slurm back end
hands them to ``sbatch``. A back end that cannot honour them (Flux, Kubernetes) refuses
a job carrying one at admission, naming the option and the back end
(:func:`bridge.option_support.check_backend_options`), never ignoring it.

Contract: :data:`PASSED` is the table, field -> :class:`Passed` (the long option, how
its value is checked); each check takes the option's text and returns the value to
store, or raises ``ValueError`` worded like sbatch's error for it. :func:`sbatch_flags`
spells stored values back as sbatch arguments (one argv word each, never shell text).
Standard library only: tbatch (client) and the daemon both use it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MAIL_TYPES", "PASSED", "Passed", "megabytes", "sbatch_flags"]

#: ``--mail-type`` values sbatch accepts (comma-separated).
MAIL_TYPES = frozenset(
    {"NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT",
     "TIME_LIMIT", "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS"}
)
_HINTS = frozenset({"compute_bound", "memory_bound", "multithread", "nomultithread"})
#: The user's --comment follows the bridge's key in Slurm's comment field
#: ("hpc-bridge:" + a 36-character uid + " "), which Slurm keeps to 1024 characters.
COMMENT_LIMIT = 1024 - len("hpc-bridge:") - 36 - 1


def _unprintable(value: str, spaces: bool) -> bool:
    """Whether ``value`` has a control, format, surrogate or unassigned character
    (Unicode category C*, C1 controls and terminal escapes included), a line or
    paragraph separator, or (``spaces``) any white space."""
    return any(unicodedata.category(c)[0] == "C" or c in "\u2028\u2029"
               or (spaces and c.isspace()) for c in value)


_SIZE = re.compile(r"([0-9]{1,12})(?:([KkMmGgTt])[Bb]?)?")
_SIZE_FACTOR = {"k": 1, "m": 1, "g": 1024, "t": 1024 * 1024}


def _word(limit: int = 1024) -> Callable[[str], Any]:
    """Any non-empty text without spaces or control characters (Slurm checks the rest)."""

    def check(value: str) -> str:
        if value == "" or _unprintable(value, spaces=True):
            raise ValueError("must be a non-empty word without spaces or control characters")
        if value.startswith("-"):
            raise ValueError("must not start with '-'")
        if len(value) > limit:
            raise ValueError(f"longer than {limit} characters")
        return value

    return check


def _pattern(regex: str, message: str) -> Callable[[str], str]:
    """A check that returns the option's text as it is when ``regex`` matches all of it,
    and otherwise raises ``ValueError(message)``, with ``{value}`` in ``message`` (if
    there) replaced by the text; other braces in ``message`` stay as written."""
    pattern = re.compile(regex)

    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(message.replace("{value}", value))
        return value

    return check


_mail_user = _pattern(r"[A-Za-z0-9._%+=@][A-Za-z0-9._%+=@-]{0,254}",
                      "must be a user name or an email address")
_signal = _pattern(r"(?:[RB]{1,2}:)?(?:[0-9]{1,2}|(?:SIG)?[A-Z][A-Z0-9+-]*)(?:@[0-9]{1,5})?",
                   "Invalid --signal specification; expected [{R|B}:]SIGNAL[@TIME]")
_distribution = _pattern(r"(?:\*|block|cyclic|arbitrary|plane=[0-9]+)"
                         r"(?::(?:\*|block|cyclic|fcyclic)){0,2}(?:,(?:Pack|NoPack))?",
                         "Invalid --distribution specification: {value}")
_gpus = _pattern(r"(?:[A-Za-z0-9][A-Za-z0-9._\-]*:)?[0-9]{1,6}", "expected N or TYPE:N")


def _comment(value: str) -> str:
    if _unprintable(value, spaces=False) or len(value) > COMMENT_LIMIT:
        raise ValueError(f"must be at most {COMMENT_LIMIT} characters, no control characters")
    return value


def _mail_type(value: str) -> str:
    items = value.upper().split(",")
    if not all(item in MAIL_TYPES for item in items):
        raise ValueError(f"--mail-type={value} invalid")
    return ",".join(items)


def _open_mode(value: str) -> str:
    for mode in ("append", "truncate"):
        if value and mode.startswith(value.lower()):
            return mode
    raise ValueError(f"Invalid --open-mode argument: {value}")


def _hint(value: str) -> str:
    if value not in _HINTS:
        raise ValueError(f"invalid --hint value {value!r}; one of {', '.join(sorted(_HINTS))}")
    return value


def _count(value: str) -> int:
    if not re.fullmatch(r"[0-9]{1,10}", value) or not 1 <= int(value) < 2**31:
        raise ValueError("must be an integer >= 1")
    return int(value)


def megabytes(value: str) -> int:
    """A size as sbatch reads ``--mem``: megabytes, optional K/M/G/T (K rounded up)."""
    match = _SIZE.fullmatch(value)
    if match is None:
        raise ValueError("expected a size in megabytes, optionally with a K, M, G or T suffix")
    number, unit = int(match.group(1)), (match.group(2) or "m").lower()
    size = (number + 1023) // 1024 if unit == "k" else number * _SIZE_FACTOR[unit]
    if not 1 <= size <= 2**53:
        raise ValueError("must be at least 1 megabyte")
    return size


def _tmp(value: str) -> int:
    """``--tmp``: a size as ``--mem`` reads it; ``0`` (no minimum) too."""
    return 0 if re.fullmatch(r"0+[KkMmGgTt]?[Bb]?", value) else megabytes(value)


@dataclass(frozen=True)
class Passed:
    """One option passed to Slurm: its long name, its letter, how its text is checked."""

    long: str
    check: Callable[[str], Any]
    short: str | None = None
    metavar: str = "VALUE"
    help: str = ""


PASSED: Mapping[str, Passed] = {
    "mail_type": Passed("mail-type", _mail_type, metavar="TYPE,...",
                        help="mail on these events (BEGIN, END, FAIL, ALL ...)"),
    "mail_user": Passed("mail-user", _mail_user, metavar="USER", help="whom Slurm mails"),
    "signal": Passed("signal", _signal, metavar="[R|B:]SIG[@TIME]",
                     help="signal the job TIME seconds before its time limit"),
    "open_mode": Passed("open-mode", _open_mode, metavar="append|truncate",
                        help="how output files are opened"),
    "comment": Passed("comment", _comment, metavar="TEXT",
                      help="a comment on the job (after the bridge's key)"),
    "wckey": Passed("wckey", _word(), metavar="KEY", help="workload characterisation key"),
    "reservation": Passed("reservation", _word(), metavar="NAME", help="run in a reservation"),
    "licenses": Passed("licenses", _word(), short="L", metavar="LICENSES", help="licenses"),
    "begin": Passed("begin", _word(), short="b", metavar="TIME",
                    help="start no earlier (read by sbatch when the bridge submits)"),
    "deadline": Passed("deadline", _word(), metavar="TIME",
                       help="remove the job if it cannot end by then"),
    "hint": Passed("hint", _hint, metavar="HINT", help="compute_bound, memory_bound, ..."),
    "mem_per_cpu_mb": Passed("mem-per-cpu", megabytes, metavar="SIZE", help="memory per CPU"),
    "gres": Passed("gres", _word(), metavar="LIST", help="generic resources per node"),
    "distribution": Passed("distribution", _distribution, short="m", metavar="DIST",
                           help="task distribution (block, cyclic, plane=N ...)"),
    "tmp_mb": Passed("tmp", _tmp, metavar="SIZE", help="temporary disk per node"),
    "gpus": Passed("gpus", _gpus, short="G", metavar="[TYPE:]N", help="GPUs for the whole job"),
    "gpus_per_task": Passed("gpus-per-task", _gpus, metavar="[TYPE:]N", help="GPUs per task"),
    "cpus_per_gpu": Passed("cpus-per-gpu", _count, metavar="N", help="CPUs per GPU"),
    "mem_per_gpu_mb": Passed("mem-per-gpu", megabytes, metavar="SIZE", help="memory per GPU"),
}


def sbatch_flags(values: Mapping[str, Any]) -> list[str]:
    """sbatch arguments for the passed options set in ``values`` (field -> stored value;
    ``requeue`` True/False gives ``--requeue``/``--no-requeue``). ``comment`` is not
    spelled here: the Slurm back end writes it after its own key."""
    flags = []
    requeue = values.get("requeue")
    if requeue is not None:
        flags.append("--requeue" if requeue else "--no-requeue")
    for name, passed in PASSED.items():
        value = values.get(name)
        if value is None or name == "comment":
            continue
        flags.append(f"--{passed.long}={value}")
    return flags
