"""What ``tbatch`` itself reads of its command line: which file to send, if any.

``tbatch`` does not parse its options (the daemon does, :mod:`bridge.sbatch.submission`,
so that the client starts without the model and pydantic); it only has to find the
batch script (or the ``-f`` file) to read and send, and ``--help``/``--version``. That
needs getopt_long's word boundaries alone: which options take an argument, so that the
scan skips it. This module is that much of :mod:`bridge.sbatch.cmdline`, with the
standard library only.

Contract: :func:`locate` never raises. For any ``argv`` on which
:func:`bridge.sbatch.parse_command_line` succeeds, it finds the same script path,
``--wrap``, ``-f`` file, ``--help`` and ``--version`` (a unit test checks the tables
below against :data:`bridge.sbatch.OPTIONS` and a property test checks the two
scanners agree). Where the parser would refuse the command line at once (an unknown
option), ``complete`` is False: the words after it cannot be read reliably, and the
daemon's answer names the option.
"""

from __future__ import annotations

__all__ = [
    "LONG_NO_ARG",
    "LONG_OPTIONAL_ARG",
    "MAX_SCRIPT_BYTES",
    "SHORT_NO_ARG",
    "SHORT_REQUIRED_ARG",
    "Located",
    "locate",
]

#: Largest script accepted: Slurm's default ``max_script_size`` (4 MB). Here, not in
#: :mod:`bridge.sbatch.script` (which re-exports it), so that ``tbatch`` reads at most
#: that much without importing the script checks.
MAX_SCRIPT_BYTES = 4 * 1024 * 1024
#: Long options (tbatch's and the sbatch options it refuses by name) without an argument.
LONG_NO_ARG = frozenset({
    "contiguous", "help", "hold", "ignore-pbs", "immediate", "no-requeue", "overcommit",
    "oversubscribe", "parsable", "quiet", "reboot", "requeue", "spread-job", "test-only",
    "usage", "use-min-nodes", "verbose", "version", "wait", "consolidate-segments",
    "spread-segments", "stepmgr",
})
#: Long options whose argument is optional (given only as ``--name=value``).
LONG_OPTIONAL_ARG = frozenset({"exclusive", "get-user-env", "nice", "no-kill", "oom-kill-step",
                               "propagate"})
#: Every other known long option takes a required argument (the next word when not
#: given as ``--name=value``): these are all the long names the parser knows.
LONG_REQUIRED_ARG = frozenset({
    "account", "acctg-freq", "array", "backend", "batch", "begin", "bb", "bbf",
    "chdir", "cluster", "cluster-constraint", "clusters", "comment", "constraint",
    "container", "container-id", "core-spec", "cores-per-socket", "cpu-freq",
    "cpus-per-gpu", "cpus-per-task", "deadline", "delay-boot", "dependency", "distribution",
    "error", "exclude", "export", "export-file", "extra", "extra-node-info", "file", "gid",
    "gpu-bind", "gpu-freq", "gpus", "gpus-per-node", "gpus-per-socket",
    "gpus-per-task", "gres", "gres-flags", "hint", "input", "job-name", "kill-on-invalid-dep",
    "licenses", "mail-type", "mail-user", "mcs-label", "mem", "mem-bind", "mem-per-cpu",
    "mem-per-gpu", "mincpus", "network", "nodefile", "nodelist", "nodes", "ntasks",
    "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-node", "ntasks-per-socket", "open-mode",
    "output", "partition", "power", "prefer", "priority", "profile", "qos", "reservation",
    "resv-ports", "runtime", "segment", "signal", "sockets-per-node", "switches", "tasks",
    "tasks-per-node", "thread-spec", "threads-per-core", "time", "time-min", "tmp",
    "tres-bind", "tres-per-task", "uid", "wait-all-nodes", "wckey", "workdir", "wrap",
    "container-type", "mem-update", "resources",
})
#: Short options without an argument; every other known letter takes one.
SHORT_NO_ARG = frozenset("hHIkOQsvVW")
SHORT_REQUIRED_ARG = frozenset("aABbcCdDeFfGiJLmMnNopqStwx")
#: Letters whose long name this module looks at.
_LONG_NAME = {"f": "file", "h": "help", "V": "version"}


class Located:
    """What :func:`locate` found: the script operand (``None``: none given), ``--wrap``'s
    command, the ``-f`` file, ``--help``/``--version``, and whether the scan read the
    whole command line (False: it stopped at an unknown option). A plain class, not a
    namedtuple: :mod:`collections` costs ``tbatch`` ~1.3 ms of its start."""

    __slots__ = ("complete", "help", "script_path", "trainjob_file", "version", "wrap")

    def __init__(self, *, script_path: str | None, wrap: str | None,
                 trainjob_file: str | None, help: bool, version: bool,
                 complete: bool) -> None:
        self.script_path = script_path
        self.wrap = wrap
        self.trainjob_file = trainjob_file
        self.help = help
        self.version = version
        self.complete = complete

    def _values(self) -> tuple[object, ...]:
        return (self.script_path, self.wrap, self.trainjob_file, self.help, self.version,
                self.complete)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Located) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        names = ("script_path", "wrap", "trainjob_file", "help", "version", "complete")
        return "Located(" + ", ".join(
            f"{n}={v!r}" for n, v in zip(names, self._values(), strict=True)) + ")"


def _long(word: str, argv: list[str], i: int, found: dict[str, str | None]) -> int | None:
    """Scan ``--name[=value]`` at ``argv[i]``; the next index, None for an unknown name."""
    name, eq, inline = word[2:].partition("=")
    if name in LONG_NO_ARG or name in LONG_OPTIONAL_ARG:
        found[name] = None
        return i + 1
    if name not in LONG_REQUIRED_ARG:
        return None
    if eq:
        found[name] = inline
        return i + 1
    found[name] = argv[i + 1] if i + 1 < len(argv) else None
    return i + 2


def _short(word: str, argv: list[str], i: int, found: dict[str, str | None]) -> int | None:
    """Scan a cluster of short options (``-N2``, ``-vf job.yaml``); as :func:`_long`."""
    for j in range(1, len(word)):
        letter = word[j]
        if letter in SHORT_NO_ARG:
            found[_LONG_NAME.get(letter, letter)] = None
            continue
        if letter not in SHORT_REQUIRED_ARG:
            return None
        name = _LONG_NAME.get(letter, letter)
        if j + 1 < len(word):
            found[name] = word[j + 1:]
            return i + 1
        found[name] = argv[i + 1] if i + 1 < len(argv) else None
        return i + 2
    return i + 1


def locate(argv: list[str]) -> Located:
    """Find the script, ``--wrap``, ``-f`` and ``--help``/``--version`` in tbatch's
    arguments as getopt_long (``+`` mode) reads them; options end at the first operand."""
    found: dict[str, str | None] = {}
    operand: str | None = None
    complete = True
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            operand = argv[i + 1] if i + 1 < len(argv) else None
            break
        if word.startswith("--"):
            step = _long(word, argv, i, found)
        elif word.startswith("-") and word != "-":
            step = _short(word, argv, i, found)
        else:
            operand = word
            break
        if step is None:
            complete = False
            break
        i = step
    return Located(
        script_path=operand,
        wrap=found.get("wrap"),
        trainjob_file=found.get("file"),
        help="help" in found or "usage" in found,
        version="version" in found,
        complete=complete,
    )
