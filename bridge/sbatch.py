"""``tbatch``: sbatch's command line and ``#SBATCH`` lines, turned into a TrainJob.

One option table (:data:`OPTIONS`) serves both the command line and the ``#SBATCH``
lines of a script, as in sbatch. The parser is a small getopt_long work-alike rather
than argparse, because argparse cannot do what sbatch users rely on:

* options stop at the first operand (the script); everything after it, options
  included, is the script's arguments (getopt's ``+`` mode; argparse's REMAINDER is
  unreliable there);
* an option's required argument is the next word *whatever it looks like*
  (``-J -x``, ``--wrap "--help"``, ``-t -1``); argparse refuses values starting with ``-``;
* ``--exclusive`` takes an optional argument only as ``--exclusive=...``, so
  ``tbatch --exclusive job.sh`` does not swallow the script;
* errors must read like sbatch's and carry ``file:line`` for script lines, and must
  never exit the process.

Long options are matched **exactly**; unique prefixes are refused (with a hint), although
sbatch, through getopt_long, accepts them. The table here is a subset of sbatch's, so a
prefix unique here may be a different, complete sbatch option: ``--gpus`` (sbatch's
total-GPU option) would silently become ``--gpus-per-node``. sbatch options that the
bridge does not support are refused by name (``option '--array' is not supported``).

Contract:

* :func:`read_directives` checks the script the way sbatch does (``#!`` first line, no
  NUL, no DOS line breaks, not empty) and returns the ``#SBATCH`` lines of the leading
  comment block as ``[(lineno, argv)]``.
* :func:`parse_tbatch` returns a frozen :class:`BatchRequest`; command-line options win
  over ``#SBATCH`` lines.
* :func:`to_trainjob` builds the TrainJob; :func:`trainjob_from_file` loads ``-f`` files.
* Every user error is a :class:`SbatchError` whose ``str()`` reads like sbatch
  (``tbatch: error: job.sh:3: unrecognized option '--foo'``); nothing else is raised for
  any input. Strings (quotes, ``$(...)``, backticks, unicode) are data, never interpreted.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import pydantic

from bridge.model import (
    ANN_BACKEND,
    ANN_BATCH_SCRIPT,
    ANNOTATION_PREFIX,
    API_VERSION,
    TrainJob,
    ValidationError,
    load_trainjob,
)
from bridge.scheduling import SchedulingOptions, set_scheduling
from bridge.slurmtime import SlurmTimeError, parse_minutes, parse_seconds

__all__ = [
    "ANN_GPU_TYPE",
    "DEFAULT_RUNTIME",
    "MAX_SCRIPT_BYTES",
    "NEVER_EXPORTED",
    "OPTIONS",
    "BatchOptions",
    "BatchRequest",
    "CommandLine",
    "ExportSpec",
    "OptionSpec",
    "SbatchError",
    "check_script",
    "default_job_name",
    "exported_environment",
    "help_text",
    "parse_command_line",
    "parse_tbatch",
    "read_directives",
    "to_trainjob",
    "trainjob_from_file",
    "wrap_script",
]

PROG = "tbatch"
#: Annotation carrying the GPU type of ``--gpus-per-node=TYPE:N`` (SchedulingOptions has
#: no field for it yet).
ANN_GPU_TYPE = ANNOTATION_PREFIX + "gpu-type"
#: Runtime of a job that names none: a plain batch job.
DEFAULT_RUNTIME = "plain"
#: Largest script accepted: Slurm's default ``max_script_size`` (4 MB).
MAX_SCRIPT_BYTES = 4 * 1024 * 1024
#: Variables never copied from the submitting environment by ``--export=ALL`` (secrets of
#: the bridge client itself). Naming one explicitly in ``--export`` still exports it.
NEVER_EXPORTED = frozenset({"HPC_BRIDGE_TOKEN"})
#: What precedes the command of ``--wrap`` (sbatch's text, naming this tool).
WRAP_HEADER = "#!/bin/sh\n# This script was created by tbatch --wrap.\n\n"

_MAX_COUNT = 2**31 - 1
_C_SPACE = " \t\n\v\f\r"  # C isspace() in the "C" locale, as sbatch uses
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DIGITS = re.compile(r"[0-9]+")
# Same rule as bridge.model.EnvVar names.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_OBJECT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]{0,252}")


class SbatchError(Exception):
    """A user error, worded like sbatch's.

    ``message`` is the bare text, ``source``/``lineno`` say where in a script it was
    found; ``str(err)`` is what tbatch prints: one ``tbatch: error: `` line per line of
    the message, the first carrying ``source:lineno: `` when known.
    """

    def __init__(
        self, message: str, *, source: str | None = None, lineno: int | None = None
    ) -> None:
        self.message = message
        self.source = source
        self.lineno = lineno
        where = f"{source}:{lineno}: " if source is not None and lineno is not None else ""
        lines = message.split("\n")
        text = "\n".join(
            f"{PROG}: error: {where if i == 0 else ''}{line}" for i, line in enumerate(lines)
        )
        super().__init__(text)


class _BadValue(ValueError):
    """Raised by converters; the parser adds the option name, value and location."""


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class ExportSpec:
    """A parsed ``--export`` value.

    ``all``: the whole submitting environment is exported (``ALL``, the default of
    sbatch); ``items``: explicitly named variables, ``(name, None)`` to copy the
    submitting value, ``(name, value)`` to set one. ``NONE`` is ``all=False, items=()``.
    """

    all: bool
    items: tuple[tuple[str, str | None], ...] = ()

    @property
    def mode(self) -> Literal["ALL", "NONE"]:
        """``ALL`` when the whole environment goes along, else ``NONE`` (only what is named)."""
        return "ALL" if self.all else "NONE"


@dataclass(frozen=True)
class BatchOptions:
    """Every sbatch option tbatch understands, as typed values (``None``: not given)."""

    nodes_min: int | None = None
    #: ``None`` with ``nodes_min`` set: no maximum (``-N 2`` means exactly 2: min=max=2).
    nodes_max: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    gpus_per_node: int | None = None
    gpu_type: str | None = None
    mem_mb: int | None = None
    #: ``None`` with ``time_unlimited=False``: not given (the partition default applies).
    time_limit_minutes: int | None = None
    #: ``--time=UNLIMITED`` (or ``0``/``INFINITE``/``-1``): no limit was asked for.
    time_unlimited: bool = False
    job_name: str | None = None
    output: str | None = None
    error: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    chdir: str | None = None
    exclusive: bool = False
    switches: int | None = None
    switches_wait_minutes: int | None = None
    export: ExportSpec | None = None
    nodelist: str | None = None
    exclude: str | None = None
    constraint: str | None = None
    runtime: str | None = None
    backend: str | None = None


@dataclass(frozen=True)
class CommandLine:
    """The command line alone: what to read the script from, and the options given."""

    #: The script named on the command line (``None``: stdin, ``--wrap`` or ``-f``).
    script_path: str | None
    script_args: tuple[str, ...]
    wrap: str | None
    trainjob_file: str | None
    help: bool
    version: bool
    #: Option values by destination (internal: converter output, last one wins).
    option_values: Mapping[str, Mapping[str, Any]] = field(repr=False)


@dataclass(frozen=True)
class BatchRequest:
    """Everything ``tbatch`` was asked: options (command line over ``#SBATCH``) and script."""

    options: BatchOptions
    #: Path as given on the command line; ``None`` for stdin, ``--wrap`` and ``-f``.
    script_path: str | None
    #: The script that will run (generated for ``--wrap``); ``None`` with ``-f``.
    script_text: str | None
    script_args: tuple[str, ...] = ()
    wrap: str | None = None
    trainjob_file: str | None = None
    parsable: bool = False
    help: bool = False
    version: bool = False


# ------------------------------------------------------------------- converters

Fields = dict[str, Any]
Converter = Callable[[str | None], Fields]


def _q(value: str) -> str:
    """Quote a value for an error message, escaping what the terminal should not see."""
    return f"'{value}'" if value.isprintable() else repr(value)


def _int(text: str, *, minimum: int) -> int:
    if not _DIGITS.fullmatch(text) or len(text.lstrip("0")) > 10:
        raise _BadValue(f"must be an integer >= {minimum}")
    number = int(text)
    if number < minimum:
        raise _BadValue(f"must be >= {minimum}")
    if number > _MAX_COUNT:
        raise _BadValue(f"must be <= {_MAX_COUNT}")
    return number


def _positive(dest: str) -> Converter:
    def convert(value: str | None) -> Fields:
        assert value is not None
        return {dest: _int(value, minimum=1)}

    return convert


def _text(dest: str, limit: int = 256) -> Converter:
    def convert(value: str | None) -> Fields:
        assert value is not None
        if value == "":
            raise _BadValue("must not be empty")
        if _CONTROL.search(value):
            raise _BadValue("contains control characters (newline, tab, ...)")
        if len(value) > limit:
            raise _BadValue(f"longer than {limit} characters")
        return {dest: value}

    return convert


def _object_name(dest: str) -> Converter:
    def convert(value: str | None) -> Fields:
        assert value is not None
        if not _OBJECT_NAME.fullmatch(value):
            raise _BadValue("must be a name of letters, digits, '.', '_' and '-'")
        return {dest: value}

    return convert


def _node_count(text: str) -> int:
    """One side of ``--nodes``: digits with an optional ``k`` (x1024) suffix, as Slurm."""
    factor = 1
    if text[-1:] in ("k", "K"):
        factor, text = 1024, text[:-1]
    if not _DIGITS.fullmatch(text) or len(text.lstrip("0")) > 10:
        raise _BadValue("expected N or MIN-MAX (node counts)")
    number = int(text) * factor
    if number > _MAX_COUNT:
        raise _BadValue(f"node count must be <= {_MAX_COUNT}")
    return number


def _nodes(value: str | None) -> Fields:
    """``N`` (exactly N), ``MIN-MAX`` or ``MIN-`` (no maximum); ``0-4`` is ``1-4`` (Slurm)."""
    assert value is not None
    low, dash, high = value.partition("-")
    minimum = _node_count(low)
    if not dash:
        if minimum == 0:
            raise _BadValue("the node count must be at least 1")
        return {"nodes_min": minimum, "nodes_max": minimum}
    minimum = max(minimum, 1)
    maximum = _node_count(high) if high else None
    if maximum is not None and maximum < minimum:
        raise _BadValue(f"the maximum {maximum} is less than the minimum {minimum}")
    return {"nodes_min": minimum, "nodes_max": maximum}


_GPUS = re.compile(r"(?:([A-Za-z0-9][A-Za-z0-9._\-]*):)?([0-9]+)")


def _gpus(value: str | None) -> Fields:
    """``N`` or ``TYPE:N``."""
    assert value is not None
    match = _GPUS.fullmatch(value)
    if match is None:
        raise _BadValue("expected N or TYPE:N (one GPU type)")
    return {"gpus_per_node": _int(match.group(2), minimum=0), "gpu_type": match.group(1)}


_MEM = re.compile(r"([0-9]+)(?:([KkMmGgTt])[Bb]?)?")
_MEM_FACTOR = {"k": 1, "m": 1, "g": 1024, "t": 1024 * 1024}


def _mem(value: str | None) -> Fields:
    """Megabytes, with an optional K/M/G/T suffix (and a trailing B), K rounded up (Slurm)."""
    assert value is not None
    match = _MEM.fullmatch(value)
    if match is None or len(match.group(1).lstrip("0")) > 12:
        raise _BadValue("expected a size in megabytes, optionally with a K, M, G or T suffix")
    number, unit = int(match.group(1)), (match.group(2) or "m").lower()
    megabytes = (number + 1023) // 1024 if unit == "k" else number * _MEM_FACTOR[unit]
    if megabytes == 0:
        raise _BadValue("--mem=0 (all of each node's memory) is not supported; give a size")
    if megabytes > 2**53:
        raise _BadValue("too large")
    return {"mem_mb": megabytes}


_TIME_FORMS = (
    "minutes, minutes:seconds, hours:minutes:seconds, days-hours, "
    "days-hours:minutes, days-hours:minutes:seconds or UNLIMITED"
)


def _time(value: str | None) -> Fields:
    assert value is not None
    try:
        minutes = parse_minutes(value)
    except SlurmTimeError as exc:
        raise _BadValue(f"{exc}; expected {_TIME_FORMS}") from None
    return {"time_limit_minutes": minutes, "time_unlimited": minutes is None}


def _switches(value: str | None) -> Fields:
    """``COUNT[@MAX-WAIT]``; the wait is a Slurm time, kept in minutes (rounded up)."""
    assert value is not None
    count_text, at, wait_text = value.partition("@")
    count = _int(count_text, minimum=1)
    wait: int | None = None
    if at:
        try:
            seconds = parse_seconds(wait_text)
        except SlurmTimeError as exc:
            raise _BadValue(f"bad maximum wait: {exc}") from None
        wait = None if seconds is None else (seconds + 59) // 60
    return {"switches": count, "switches_wait_minutes": wait}


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] in "'\"" and text[-1] == text[0]:
        return text[1:-1]
    return text


def _split_export(value: str) -> list[str]:
    """Split on commas outside quotes, as sbatch does, then unquote.

    sbatch strips quotes only around a whole item (``'VAR=a,b'``); here quotes around
    the value alone (``VAR='a,b'``) are stripped too, which is what such a value means.
    """
    items: list[str] = []
    start, quote = 0, ""
    for i, ch in enumerate(value + ","):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == ",":
            item = _unquote(value[start:i])
            name, eq, val = item.partition("=")
            items.append(f"{name}={_unquote(val)}" if eq else item)
            start = i + 1
    if quote:
        raise _BadValue(f"unmatched {quote}")
    return items


def _export(value: str | None) -> Fields:
    """``ALL`` | ``NONE`` | ``[ALL,]VAR[=value],...``."""
    assert value is not None
    items = _split_export(value)
    if len(items) == 1 and items[0].upper() in ("ALL", "NONE"):
        return {"export": ExportSpec(all=items[0].upper() == "ALL")}
    export_all = False
    named: list[tuple[str, str | None]] = []
    for item in items:
        if item.upper() == "ALL":
            export_all = True
            continue
        if item.upper() == "NONE":
            raise _BadValue(
                "NONE cannot be combined with variables "
                "(--export=VAR,... exports only the variables named)"
            )
        name, eq, val = item.partition("=")
        if not _ENV_NAME.fullmatch(name):
            raise _BadValue(f"invalid environment variable name {_q(name)}")
        named.append((name, val if eq else None))
    return {"export": ExportSpec(all=export_all, items=tuple(named))}


def _exclusive(value: str | None) -> Fields:
    if value is not None:
        raise _BadValue("only a plain --exclusive is supported (not =user, =mcs or =topo)")
    return {"exclusive": True}


def _flag(dest: str) -> Converter:
    def convert(value: str | None) -> Fields:
        return {dest: True}

    return convert


def _string(dest: str) -> Converter:
    def convert(value: str | None) -> Fields:
        assert value is not None
        return {dest: value}

    return convert


# ----------------------------------------------------------------- option table

ArgKind = Literal["none", "required", "optional"]


@dataclass(frozen=True)
class OptionSpec:
    """One option of the table: names, whether it takes an argument, what it sets."""

    long: str
    dest: str
    convert: Converter
    arg: ArgKind = "required"
    short: str | None = None
    aliases: tuple[str, ...] = ()
    #: Only on the command line, never in ``#SBATCH`` lines.
    cli_only: bool = False
    metavar: str = ""
    help: str = ""


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "nodes",
        "nodes",
        _nodes,
        short="N",
        metavar="N[-M]",
        help="number of nodes (N-M: at least N, at most M)",
    ),
    OptionSpec(
        "ntasks",
        "ntasks",
        _positive("ntasks"),
        short="n",
        metavar="N",
        help="number of tasks (processes) in all",
    ),
    OptionSpec(
        "ntasks-per-node",
        "ntasks_per_node",
        _positive("ntasks_per_node"),
        aliases=("tasks-per-node",),
        metavar="N",
        help="tasks per node",
    ),
    OptionSpec(
        "cpus-per-task",
        "cpus_per_task",
        _positive("cpus_per_task"),
        short="c",
        metavar="N",
        help="CPUs per task",
    ),
    OptionSpec("gpus-per-node", "gpus_per_node", _gpus, metavar="[TYPE:]N", help="GPUs per node"),
    OptionSpec(
        "mem", "mem", _mem, metavar="SIZE[K|M|G|T]", help="memory per node (megabytes by default)"
    ),
    OptionSpec(
        "time",
        "time",
        _time,
        short="t",
        metavar="TIME",
        help="time limit (minutes, [D-]H:M:S, ..., UNLIMITED)",
    ),
    OptionSpec(
        "job-name",
        "job_name",
        _text("job_name"),
        short="J",
        metavar="NAME",
        help="job name (default: the script's file name)",
    ),
    OptionSpec(
        "output",
        "output",
        _text("output", 4096),
        short="o",
        metavar="PATTERN",
        help="file for standard output (%j: job id ...)",
    ),
    OptionSpec(
        "error",
        "error",
        _text("error", 4096),
        short="e",
        metavar="PATTERN",
        help="file for standard error",
    ),
    OptionSpec(
        "partition",
        "partition",
        _text("partition"),
        short="p",
        metavar="NAME",
        help="partition (queue)",
    ),
    OptionSpec(
        "account", "account", _text("account"), short="A", metavar="NAME", help="account to charge"
    ),
    OptionSpec("qos", "qos", _text("qos"), short="q", metavar="QOS", help="quality of service"),
    OptionSpec(
        "chdir",
        "chdir",
        _text("chdir", 4096),
        short="D",
        aliases=("workdir",),
        metavar="DIR",
        help="working directory of the job (default: here)",
    ),
    OptionSpec(
        "exclusive",
        "exclusive",
        _exclusive,
        arg="optional",
        help="do not share nodes with other jobs",
    ),
    OptionSpec(
        "switches",
        "switches",
        _switches,
        metavar="N[@TIME]",
        help="at most N leaf switches (wait at most TIME for them)",
    ),
    OptionSpec(
        "export",
        "export",
        _export,
        metavar="ALL|NONE|[ALL,]VAR[=VAL],...",
        help="environment variables the job gets (default: ALL)",
    ),
    OptionSpec(
        "nodelist",
        "nodelist",
        _text("nodelist", 4096),
        short="w",
        metavar="HOSTS",
        help="run on these nodes",
    ),
    OptionSpec(
        "exclude",
        "exclude",
        _text("exclude", 4096),
        short="x",
        metavar="HOSTS",
        help="do not run on these nodes",
    ),
    OptionSpec(
        "constraint",
        "constraint",
        _text("constraint", 4096),
        short="C",
        metavar="FEATURES",
        help="node features required",
    ),
    OptionSpec("parsable", "parsable", _flag("parsable"), arg="none", help="print only the job id"),
    OptionSpec(
        "wrap",
        "wrap",
        _string("wrap"),
        cli_only=True,
        metavar="COMMAND",
        help="run COMMAND in a generated /bin/sh script",
    ),
    OptionSpec(
        "runtime",
        "runtime",
        _object_name("runtime"),
        metavar="NAME",
        help=f"training runtime (default: {DEFAULT_RUNTIME})",
    ),
    OptionSpec(
        "backend",
        "backend",
        _object_name("backend"),
        metavar="NAME",
        help="back end to run on (slurm, flux, kubernetes)",
    ),
    OptionSpec(
        "clusters",
        "backend",
        _object_name("backend"),
        short="M",
        aliases=("cluster",),
        metavar="NAME",
        help="as sbatch -M: the cluster (a configured back end) to run on; one name",
    ),
    OptionSpec(
        "file",
        "file",
        _string("file"),
        short="f",
        cli_only=True,
        metavar="TRAINJOB.yaml",
        help="submit a TrainJob document instead of a script",
    ),
    OptionSpec(
        "help", "help", _flag("help"), short="h", arg="none", cli_only=True, help="show this help"
    ),
    OptionSpec("usage", "help", _flag("help"), arg="none", cli_only=True, help="show this help"),
    OptionSpec(
        "version",
        "version",
        _flag("version"),
        short="V",
        arg="none",
        cli_only=True,
        help="show the version",
    ),
)

_BY_LONG: dict[str, OptionSpec] = {
    name: spec for spec in OPTIONS for name in (spec.long, *spec.aliases)
}
_BY_SHORT: dict[str, OptionSpec] = {spec.short: spec for spec in OPTIONS if spec.short}

#: sbatch options that tbatch knows and refuses with a reason.
_REFUSED: dict[str, str] = {
    "comment": "hpc-bridge keeps its own tracking data in the job comment",
}
#: sbatch options that exist but that the bridge does not support.
_SBATCH_ONLY_LONG = frozenset(
    {
        "array",
        "batch",
        "bb",
        "bbf",
        "begin",
        "cluster-constraint",
        "container",
        "container-id",
        "contiguous",
        "core-spec",
        "cores-per-socket",
        "cpu-freq",
        "cpus-per-gpu",
        "deadline",
        "delay-boot",
        "dependency",
        "distribution",
        "export-file",
        "extra",
        "extra-node-info",
        "get-user-env",
        "gid",
        "gpu-bind",
        "gpu-freq",
        "gpus",
        "gpus-per-socket",
        "gpus-per-task",
        "gres",
        "gres-flags",
        "hint",
        "hold",
        "ignore-pbs",
        "immediate",
        "input",
        "kill-on-invalid-dep",
        "licenses",
        "mail-type",
        "mail-user",
        "mcs-label",
        "mem-bind",
        "mem-per-cpu",
        "mem-per-gpu",
        "mincpus",
        "network",
        "nice",
        "no-kill",
        "no-requeue",
        "nodefile",
        "ntasks-per-core",
        "ntasks-per-gpu",
        "ntasks-per-socket",
        "open-mode",
        "overcommit",
        "oversubscribe",
        "power",
        "prefer",
        "priority",
        "profile",
        "propagate",
        "quiet",
        "reboot",
        "requeue",
        "reservation",
        "resv-ports",
        "segment",
        "signal",
        "sockets-per-node",
        "spread-job",
        "test-only",
        "thread-spec",
        "threads-per-core",
        "time-min",
        "tmp",
        "tres-bind",
        "tres-per-task",
        "uid",
        "use-min-nodes",
        "verbose",
        "wait",
        "wait-all-nodes",
        "wckey",
        "tasks",
    }
)
_SBATCH_ONLY_SHORT: dict[str, str] = {
    "a": "array",
    "b": "begin",
    "B": "extra-node-info",
    "d": "dependency",
    "F": "nodefile",
    "G": "gpus",
    "H": "hold",
    "i": "input",
    "I": "immediate",
    "k": "no-kill",
    "L": "licenses",
    "m": "distribution",
    "O": "overcommit",
    "Q": "quiet",
    "s": "oversubscribe",
    "S": "core-spec",
    "v": "verbose",
    "W": "wait",
}


# ------------------------------------------------------------------------ parser


@dataclass(frozen=True)
class _Where:
    """Where words come from, for error messages."""

    source: str | None = None
    lineno: int | None = None
    in_script: bool = False

    def error(self, message: str) -> SbatchError:
        return SbatchError(message, source=self.source, lineno=self.lineno)


def _unknown_long(name: str, word: str) -> str:
    if name in _REFUSED:
        return f"option '--{name}' is not available: {_REFUSED[name]}"
    if name in _SBATCH_ONLY_LONG:
        return f"option '--{name}' is not supported by {PROG}"
    matches = sorted({s.long for n, s in _BY_LONG.items() if name and n.startswith(name)})
    hint = (
        f" (abbreviations are not accepted; did you mean '--{matches[0]}'?)"
        if len(matches) == 1
        else ""
    )
    return f"unrecognized option {_q(word)}{hint}"


def _unknown_short(letter: str) -> str:
    if letter in _SBATCH_ONLY_SHORT:
        return f"option '-{letter}' (--{_SBATCH_ONLY_SHORT[letter]}) is not supported by {PROG}"
    return f"invalid option -- {_q(letter)}"


def _apply(
    spec: OptionSpec, raw: str | None, where: _Where, out: dict[str, Mapping[str, Any]]
) -> None:
    if where.in_script and spec.cli_only:
        raise where.error(f"option '--{spec.long}' is only allowed on the command line")
    try:
        out[spec.dest] = spec.convert(raw)
    except _BadValue as exc:
        shown = "" if raw is None else f" {_q(raw)}"
        raise where.error(f"invalid --{spec.long} value{shown}: {exc}") from None


def _scan(argv: Sequence[str], where: _Where) -> tuple[dict[str, Mapping[str, Any]], int]:
    """getopt_long in ``+`` mode over ``argv``.

    Returns the option values (by destination; a later option replaces an earlier one)
    and the index of the first operand (``len(argv)`` if none).
    """
    values: dict[str, Mapping[str, Any]] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return values, i + 1
        if word.startswith("--"):
            name, eq, inline = word[2:].partition("=")
            spec = _BY_LONG.get(name)
            if spec is None:
                raise where.error(_unknown_long(name, word))
            raw: str | None
            if spec.arg == "none":
                if eq:
                    raise where.error(f"option '--{name}' doesn't allow an argument")
                raw = None
            elif spec.arg == "optional":
                raw = inline if eq else None
            elif eq:
                raw = inline
            elif i + 1 < len(argv):
                i += 1
                raw = argv[i]
            else:
                raise where.error(f"option '--{name}' requires an argument")
            _apply(spec, raw, where, values)
            i += 1
            continue
        if word.startswith("-") and word != "-":
            j = 1
            while j < len(word):
                letter = word[j]
                spec = _BY_SHORT.get(letter)
                if spec is None:
                    raise where.error(_unknown_short(letter))
                if spec.arg == "none":
                    _apply(spec, None, where, values)
                    j += 1
                    continue
                if j + 1 < len(word):
                    raw = word[j + 1 :]
                elif i + 1 < len(argv):
                    i += 1
                    raw = argv[i]
                else:
                    raise where.error(f"option requires an argument -- {_q(letter)}")
                _apply(spec, raw, where, values)
                break
            i += 1
            continue
        return values, i
    return values, i


def _check_utf8(texts: Iterable[str], what: str) -> None:
    for text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise SbatchError(f"{what} is not valid UTF-8: {text!r}") from None


def parse_command_line(argv: Sequence[str]) -> CommandLine:
    """Parse tbatch's own arguments (not the script's ``#SBATCH`` lines)."""
    argv = list(argv)
    _check_utf8(argv, "argument")
    values, first = _scan(argv, _Where())
    operands = tuple(argv[first:])
    wrap = values.get("wrap", {}).get("wrap")
    trainjob_file = values.get("file", {}).get("file")
    if wrap is not None and trainjob_file is not None:
        raise SbatchError("--wrap and -f/--file cannot be used together")
    if wrap is not None and operands:
        raise SbatchError("Script arguments are not permitted with the --wrap option.")
    if trainjob_file is not None:
        if operands:
            raise SbatchError("a batch script cannot be given with -f/--file")
        allowed = {"file", "backend", "parsable", "help", "version"}
        extra = sorted(set(values) - allowed)
        if extra:
            spec = next(s for s in OPTIONS if s.dest == extra[0])
            raise SbatchError(
                f"option '--{spec.long}' cannot be used with -f/--file: write it into the TrainJob"
            )
    return CommandLine(
        script_path=operands[0] if operands else None,
        script_args=operands[1:],
        wrap=wrap,
        trainjob_file=trainjob_file,
        help="help" in values,
        version="version" in values,
        option_values=values,
    )


# ------------------------------------------------------------------------ script


def wrap_script(command: str) -> str:
    """The script ``--wrap COMMAND`` runs: sbatch's ``#!/bin/sh`` wrapper around it."""
    return f"{WRAP_HEADER}{command}\n"


def check_script(text: str) -> None:
    """Refuse what sbatch refuses: empty, blank, no ``#!``, NUL bytes, DOS line breaks.

    Also refuses text that is not valid UTF-8 and scripts over :data:`MAX_SCRIPT_BYTES`.
    """
    bad = _first_surrogate(text)
    if bad >= 0:
        raise SbatchError(f"the batch script is not valid UTF-8 text (line {_line_of(text, bad)})")
    size = len(text.encode("utf-8"))
    if size > MAX_SCRIPT_BYTES:
        raise SbatchError(f"Batch script is too large ({size} bytes; at most {MAX_SCRIPT_BYTES})")
    if text == "":
        raise SbatchError("Batch script is empty!")
    if text.strip(_C_SPACE) == "":
        raise SbatchError("Batch script contains only whitespace!")
    if not text.startswith("#!"):
        raise SbatchError(
            "This does not look like a batch script.  The first\n"
            "line must start with #! followed by the path to an interpreter.\n"
            "For instance: #!/bin/sh"
        )
    if "\x00" in text:
        raise SbatchError("hpc-bridge does not allow scripts that\ncontain a NULL character '\\0' "
                          f"(line {_line_of(text, text.index(chr(0)))}).")
    if "\r\n" in text:
        raise SbatchError(
            "Batch script contains DOS line breaks (\\r\\n)\n"
            "instead of expected UNIX line breaks (\\n)."
        )


def _first_surrogate(text: str) -> int:
    """The index of the first character UTF-8 cannot encode (a lone surrogate), or -1."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return -1


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _directive_words(rest: str, source: str, lineno: int) -> list[str]:
    """Split what follows ``#SBATCH`` the way sbatch's ``_get_argument`` does.

    Words are separated by whitespace; ``'...'`` and ``"..."`` group (quotes removed);
    a backslash takes the next character literally, inside quotes too, but (as in
    sbatch) cannot join words: ``a\\ b`` is two words. An unquoted, unescaped ``#``
    ends the line (a comment). ``""`` is an empty word (sbatch would stop reading the
    line there).
    """
    words: list[str] = []
    i, n = 0, len(rest)
    while i < n:
        while i < n and rest[i] in _C_SPACE:
            i += 1
        if i >= n:
            break
        chars: list[str] = []
        quote = ""
        escaped = grouped = comment = False
        while i < n and (quote or rest[i] not in _C_SPACE):
            ch = rest[i]
            i += 1
            if escaped:
                escaped = False
                chars.append(ch)
            elif ch == "\\":
                escaped = True
            elif quote:
                if ch == quote:
                    quote = ""
                else:
                    chars.append(ch)
            elif ch in "'\"":
                quote, grouped = ch, True
            elif ch == "#":
                comment = True
                break
            else:
                chars.append(ch)
        if quote:
            raise SbatchError(f"unmatched {quote} in #SBATCH line", source=source, lineno=lineno)
        if chars or grouped:
            words.append("".join(chars))
        if comment:
            break
    return words


def read_directives(text: str, source: str = "<stdin>") -> list[tuple[int, list[str]]]:
    """The ``#SBATCH`` lines of a batch script, as ``[(lineno, argv)]``.

    The script is first checked with :func:`check_script`. Like sbatch, directives are
    lines starting with exactly ``#SBATCH`` (column 1, that case), read until the first
    line that is neither blank nor a comment; later ``#SBATCH`` lines are ignored.
    Lines with no words are left out.
    """
    check_script(text)
    found: list[tuple[int, list[str]]] = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if line.startswith("#SBATCH"):
            words = _directive_words(line[len("#SBATCH") :], source, lineno)
            if words:
                found.append((lineno, words))
            continue
        stripped = line.lstrip(_C_SPACE)
        if stripped and not stripped.startswith("#"):
            break
    return found


def _script_values(text: str, source: str) -> dict[str, Mapping[str, Any]]:
    values: dict[str, Mapping[str, Any]] = {}
    for lineno, words in read_directives(text, source):
        where = _Where(source=source, lineno=lineno, in_script=True)
        line_values, first = _scan(words, where)
        if first < len(words):
            word = words[first]
            if word.lower() in ("hetjob", "packjob"):
                raise where.error("heterogeneous jobs (#SBATCH hetjob) are not supported")
            raise where.error(f"invalid directive {_q(word)}: #SBATCH lines hold only options")
        values.update(line_values)
    return values


def _options(values: Mapping[str, Mapping[str, Any]]) -> BatchOptions:
    known = {f.name for f in fields(BatchOptions)}
    merged: dict[str, Any] = {}
    for dest_values in values.values():
        merged.update({k: v for k, v in dest_values.items() if k in known})
    return BatchOptions(**merged)


def parse_tbatch(
    argv: Sequence[str], script_text: str | None = None, *, script_source: str | None = None
) -> BatchRequest:
    """Parse ``tbatch`` arguments and the script's ``#SBATCH`` lines.

    ``script_text`` is the script named in ``argv`` (or read from stdin when ``argv``
    names none); it must be ``None`` with ``--wrap`` (the script is generated) and with
    ``-f`` (no script). ``script_source`` names it in errors (default: the path given,
    or ``<stdin>``). Options on the command line win over ``#SBATCH`` lines.
    """
    cmd = parse_command_line(argv)
    cli = cmd.option_values
    parsable = "parsable" in cli
    if cmd.help or cmd.version:
        return BatchRequest(
            options=BatchOptions(),
            script_path=None,
            script_text=None,
            help=cmd.help,
            version=cmd.version,
            parsable=parsable,
        )
    if cmd.trainjob_file is not None:
        if script_text is not None:
            raise SbatchError("a batch script cannot be given with -f/--file")
        return BatchRequest(
            options=_options(cli),
            script_path=None,
            script_text=None,
            trainjob_file=cmd.trainjob_file,
            parsable=parsable,
        )
    if cmd.wrap is not None:
        if script_text is not None:
            raise SbatchError("--wrap generates the batch script; no other script may be given")
        text = wrap_script(cmd.wrap)
        source = script_source or "--wrap"
    elif script_text is None:
        raise SbatchError("no batch script: give a script file, --wrap COMMAND or -f FILE")
    else:
        text = script_text
        source = script_source or cmd.script_path or "<stdin>"
    values = {**_script_values(text, source), **cli}
    return BatchRequest(
        options=_options(values),
        script_path=cmd.script_path,
        script_text=text,
        script_args=cmd.script_args,
        wrap=cmd.wrap,
        parsable="parsable" in values,
    )


# ---------------------------------------------------------------------- TrainJob


def default_job_name(request: BatchRequest) -> str:
    """sbatch's default job name: ``wrap``, the script's file name, or the tool's name."""
    if request.wrap is not None:
        return "wrap"
    if request.script_path and request.script_path != "-":
        base = posixpath.basename(request.script_path.rstrip("/"))
        if base:
            return base
    return PROG


def _exportable(name: str, value: str) -> bool:
    return (bool(_ENV_NAME.fullmatch(name)) and _first_surrogate(value) < 0
            and _first_surrogate(name) < 0)


def exported_environment(export: ExportSpec | None, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a job gets from ``--export``, as sbatch documents it.

    * ``ALL`` (the default): every submitting variable, except :data:`NEVER_EXPORTED`
      and those that cannot be a TrainJob env entry (names like bash's
      ``BASH_FUNC_x%%``, values that are not UTF-8). Explicit ``VAR=value`` items only
      add variables the environment lacks: "if ALL is specified, then all user
      environment variables will be loaded and will take precedence over any
      explicitly given environment variables" (sbatch(1)).
    * ``NONE``: only the ``SLURM_*`` variables of the submitting environment.
    * ``VAR,VAR=value,...``: those variables (a named variable that is not set is
      skipped) plus the submitting ``SLURM_*`` variables, which win on a clash.

    Raises :class:`SbatchError` for an explicitly named variable whose value cannot be
    exported.
    """
    spec = export or ExportSpec(all=True)
    env: dict[str, str] = {}
    if spec.all:
        env.update(
            {k: v for k, v in environ.items() if k not in NEVER_EXPORTED and _exportable(k, v)}
        )
    for name, value in spec.items:
        if value is None:
            if name in environ:
                if _first_surrogate(environ[name]) >= 0:
                    raise SbatchError(f"--export: the value of {name} is not valid UTF-8")
                env[name] = environ[name]
        elif not (spec.all and name in env):
            env[name] = value
    if not spec.all:
        env.update(
            {k: v for k, v in environ.items() if k.startswith("SLURM_") and _exportable(k, v)}
        )
    return dict(sorted(env.items()))


_HINTS = {
    "spec.trainer.numNodes": "--nodes",
    "spec.trainer.numProcPerNode": "--ntasks-per-node",
    "spec.trainer.env": "--export",
    "spec.trainer.args": "the script's arguments",
    "spec.runtimeRef": "--runtime",
}


def _job_error(exc: ValidationError) -> SbatchError:
    lines = []
    for loc, msg in exc.errors:
        hint = next((h for prefix, h in _HINTS.items() if loc.startswith(prefix)), None)
        lines.append(f"{loc}: {msg}" + (f" (from {hint})" if hint else ""))
    return SbatchError("the job is not valid:\n" + "\n".join(lines))


_SCHEDULING_OPTION = {
    "job_name": "--job-name",
    "partition": "--partition",
    "account": "--account",
    "qos": "--qos",
    "output": "--output",
    "error": "--error",
    "chdir": "--chdir",
    "nodelist": "--nodelist",
    "exclude": "--exclude",
    "constraint": "--constraint",
}


def _scheduling(request: BatchRequest, cwd: str) -> SchedulingOptions:
    o = request.options
    chdir = posixpath.join(cwd, o.chdir) if o.chdir else cwd
    data: dict[str, Any] = {
        "job_name": o.job_name or default_job_name(request),
        "partition": o.partition,
        "account": o.account,
        "qos": o.qos,
        "time_limit_minutes": o.time_limit_minutes,
        "ntasks": o.ntasks,
        "ntasks_per_node": o.ntasks_per_node,
        "cpus_per_task": o.cpus_per_task,
        "gpus_per_node": o.gpus_per_node,
        "mem_per_node_mb": o.mem_mb,
        "output": o.output,
        "error": o.error,
        "chdir": chdir,
        "exclusive": o.exclusive,
        "switches": o.switches,
        "switches_wait_minutes": o.switches_wait_minutes,
        "export": o.export.mode if o.export else None,
        "nodelist": o.nodelist,
        "exclude": o.exclude,
        "constraint": o.constraint,
    }
    try:
        return SchedulingOptions.model_validate(data)
    except pydantic.ValidationError as exc:
        lines = []
        for err in exc.errors(include_url=False):
            key = str(err["loc"][0]) if err["loc"] else ""
            what = _SCHEDULING_OPTION.get(key, key)
            if key == "chdir" and not o.chdir:
                what = "the current directory"
            msg = str(err["msg"]).removeprefix("Value error, ")
            lines.append(f"invalid {what}: {msg}")
        raise SbatchError("\n".join(lines)) from None


def to_trainjob(request: BatchRequest, *, cwd: str, environ: Mapping[str, str]) -> TrainJob:
    """The TrainJob for a script (or ``--wrap``) request.

    ``cwd`` and ``environ`` are the submitter's (``os.getcwd()``, ``os.environ``): the
    default working directory and the environment ``--export`` picks from.

    * ``spec.runtimeRef``: ``--runtime`` or ``plain`` (a ClusterTrainingRuntime);
    * ``spec.trainer.numNodes``: the minimum of ``--nodes`` (1 when not given);
    * ``numProcPerNode``: ``--ntasks-per-node``, else ``--ntasks`` / nodes when that
      divides evenly, else unset (``ntasks`` stays in the scheduling options);
    * ``resourcesPerNode`` (requests = limits): ``cpu`` = cpus per task x tasks per node
      when either is given, ``nvidia.com/gpu`` = ``--gpus-per-node``, ``memory`` =
      ``<mem>Mi``;
    * ``activeDeadlineSeconds`` = time limit x 60; ``env`` from :func:`exported_environment`;
      ``args`` = the script's arguments;
    * annotations: the script text, ``--backend``, the GPU type, and every scheduling
      option (job name defaulting like sbatch, ``chdir`` defaulting to ``cwd``).

    ``metadata.name`` is left empty: the daemon names the job.
    """
    if request.script_text is None:
        raise SbatchError("no batch script to run (use trainjob_from_file for -f)")
    o = request.options
    nodes = o.nodes_min or 1
    if o.ntasks is not None and o.ntasks < nodes:
        raise SbatchError(
            f"--ntasks={o.ntasks} is less than --nodes={nodes}: every node needs at least one task"
        )
    if o.ntasks_per_node is not None:
        procs: int | None = o.ntasks_per_node
        tasks_per_node = o.ntasks_per_node
    elif o.ntasks is not None:
        procs = o.ntasks // nodes if o.ntasks % nodes == 0 else None
        tasks_per_node = math.ceil(o.ntasks / nodes)
    else:
        procs, tasks_per_node = None, 1
    resources: dict[str, str | int] = {}
    if o.cpus_per_task is not None or o.ntasks is not None or o.ntasks_per_node is not None:
        resources["cpu"] = (o.cpus_per_task or 1) * tasks_per_node
    if o.gpus_per_node:
        resources["nvidia.com/gpu"] = o.gpus_per_node
    if o.mem_mb is not None:
        resources["memory"] = f"{o.mem_mb}Mi"
    env = exported_environment(o.export, environ)
    trainer: dict[str, Any] = {"numNodes": nodes}
    if procs is not None:
        trainer["numProcPerNode"] = procs
    if resources:
        trainer["resourcesPerNode"] = {"requests": dict(resources), "limits": dict(resources)}
    if env:
        trainer["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if request.script_args:
        trainer["args"] = list(request.script_args)
    annotations = {ANN_BATCH_SCRIPT: request.script_text}
    if o.backend:
        annotations[ANN_BACKEND] = o.backend
    if o.gpu_type:
        annotations[ANN_GPU_TYPE] = o.gpu_type
    spec: dict[str, Any] = {
        "runtimeRef": {"name": o.runtime or DEFAULT_RUNTIME, "kind": "ClusterTrainingRuntime"},
        "trainer": trainer,
    }
    if o.time_limit_minutes is not None:
        spec["activeDeadlineSeconds"] = o.time_limit_minutes * 60
    document = {
        "apiVersion": API_VERSION,
        "kind": "TrainJob",
        "metadata": {"name": "", "annotations": annotations},
        "spec": spec,
    }
    scheduling = _scheduling(request, cwd)
    try:
        job = load_trainjob(document, "tbatch")
    except ValidationError as exc:
        raise _job_error(exc) from None
    set_scheduling(job, scheduling)
    return job


def trainjob_from_file(request: BatchRequest, text: str) -> TrainJob:
    """The TrainJob of ``tbatch -f FILE`` (``text`` is the file), with ``--backend`` applied."""
    source = request.trainjob_file or "<input>"
    try:
        job = load_trainjob(text, source)
    except ValidationError as exc:
        lines = [
            line if line.startswith(source) else f"{source}: {line}"
            for line in str(exc).split("\n")
        ]
        raise SbatchError("\n".join(lines)) from None
    if request.options.backend:
        job.metadata.annotations[ANN_BACKEND] = request.options.backend
    return job


def help_text() -> str:
    """tbatch's ``--help``."""
    lines = [
        f"Usage: {PROG} [OPTIONS...] [script.sh [args...]]",
        f"       {PROG} [OPTIONS...] --wrap COMMAND",
        f"       {PROG} -f TRAINJOB.yaml [--backend NAME] [--parsable]",
        "",
        "Submit a batch script (read from standard input when none is given) to",
        "hpc-bridge. Options may also be given on '#SBATCH' lines at the top of the",
        "script; options on the command line win.",
        "",
        "Options:",
    ]
    for spec in OPTIONS:
        if spec.long == "usage":
            continue
        names = (f"-{spec.short}, " if spec.short else "    ") + f"--{spec.long}"
        if spec.arg == "required":
            names += f"={spec.metavar}"
        lines.append(f"  {names:<34} {spec.help}")
    lines += ["", "Long options must be spelled out in full (no abbreviations)."]
    return "\n".join(lines) + "\n"
