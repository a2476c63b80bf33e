"""The option table: every option tbatch takes, on the command line and ``#SBATCH`` lines.

One table (:data:`OPTIONS`) serves both, as in sbatch. Contract: :data:`BY_LONG` and
:data:`BY_SHORT` find an option by its exact long name (aliases included) or letter;
:func:`unknown_long` and :func:`unknown_short` word the error for any other option,
naming sbatch options that tbatch knows but does not support (``option '--wait' is not
supported``) and hinting at the full name for a prefix, which is refused: sbatch, through
getopt_long, accepts unique prefixes, but this table is a subset of sbatch's, so a prefix
unique here may be a different, complete sbatch option (``--gpus``, sbatch's total-GPU
option, would silently become ``--gpus-per-node``). :func:`help_text` is ``--help``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bridge.sbatch import values
from bridge.sbatch.errors import PROG, quote
from bridge.sbatch.request import DEFAULT_RUNTIME
from bridge.slurm_options import PASSED

__all__ = [
    "BY_LONG",
    "BY_SHORT",
    "OPTIONS",
    "PASSED_OPTIONS",
    "ArgKind",
    "OptionSpec",
    "help_text",
    "refused_long",
    "refused_names",
    "refused_short",
    "unknown_long",
    "unknown_short",
]


ArgKind = Literal["none", "required", "optional"]


@dataclass(frozen=True)
class OptionSpec:
    """One option of the table: names, whether it takes an argument, what it sets."""

    long: str
    dest: str
    convert: values.Converter
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
        values.nodes,
        short="N",
        metavar="N[-M]",
        help="number of nodes (N-M: at least N, at most M)",
    ),
    OptionSpec(
        "ntasks",
        "ntasks",
        values.positive("ntasks"),
        short="n",
        metavar="N",
        help="number of tasks (processes) in all",
    ),
    OptionSpec(
        "ntasks-per-node",
        "ntasks_per_node",
        values.positive("ntasks_per_node"),
        aliases=("tasks-per-node",),
        metavar="N",
        help="tasks per node",
    ),
    OptionSpec(
        "cpus-per-task",
        "cpus_per_task",
        values.positive("cpus_per_task"),
        short="c",
        metavar="N",
        help="CPUs per task",
    ),
    OptionSpec(
        "gpus-per-node", "gpus_per_node", values.gpus, metavar="[TYPE:]N", help="GPUs per node"
    ),
    OptionSpec(
        "mem",
        "mem",
        values.mem,
        metavar="SIZE[K|M|G|T]",
        help="memory per node (megabytes by default)",
    ),
    OptionSpec(
        "time",
        "time",
        values.time,
        short="t",
        metavar="TIME",
        help="time limit (minutes, [D-]H:M:S, ..., UNLIMITED)",
    ),
    OptionSpec(
        "job-name",
        "job_name",
        values.text("job_name"),
        short="J",
        metavar="NAME",
        help="job name (default: the script's file name)",
    ),
    OptionSpec(
        "output",
        "output",
        values.text("output", 4096),
        short="o",
        metavar="PATTERN",
        help="file for standard output (%j: job id ...)",
    ),
    OptionSpec(
        "error",
        "error",
        values.text("error", 4096),
        short="e",
        metavar="PATTERN",
        help="file for standard error",
    ),
    OptionSpec(
        "partition",
        "partition",
        values.text("partition"),
        short="p",
        metavar="NAME",
        help="partition (queue)",
    ),
    OptionSpec(
        "account",
        "account",
        values.text("account"),
        short="A",
        metavar="NAME",
        help="account to charge",
    ),
    OptionSpec(
        "qos", "qos", values.text("qos"), short="q", metavar="QOS", help="quality of service"
    ),
    OptionSpec(
        "chdir",
        "chdir",
        values.text("chdir", 4096),
        short="D",
        aliases=("workdir",),
        metavar="DIR",
        help="working directory of the job (default: here)",
    ),
    OptionSpec(
        "exclusive",
        "exclusive",
        values.exclusive,
        arg="optional",
        help="do not share nodes with other jobs",
    ),
    OptionSpec(
        "switches",
        "switches",
        values.switches,
        metavar="N[@TIME]",
        help="at most N leaf switches (wait at most TIME for them)",
    ),
    OptionSpec(
        "export",
        "export",
        values.export,
        metavar="ALL|NONE|[ALL,]VAR[=VAL],...",
        help="environment variables the job gets (default: ALL)",
    ),
    OptionSpec(
        "nodelist",
        "nodelist",
        values.text("nodelist", 4096),
        short="w",
        metavar="HOSTS",
        help="run on these nodes",
    ),
    OptionSpec(
        "exclude",
        "exclude",
        values.text("exclude", 4096),
        short="x",
        metavar="HOSTS",
        help="do not run on these nodes",
    ),
    OptionSpec(
        "constraint",
        "constraint",
        values.text("constraint", 4096),
        short="C",
        metavar="FEATURES",
        help="node features required",
    ),
    OptionSpec(
        "array",
        "array",
        values.array,
        short="a",
        metavar="INDEXES[%N]",
        help="a job array: one job per index (0-31, 1,3,5, 0-15:4), at most N at once; "
             "%A/%a and SLURM_ARRAY_* name each task",
    ),
    OptionSpec(
        "dependency",
        "dependency",
        values.dependency,
        short="d",
        metavar="TYPE:ID[:ID][,TYPE:ID...]",
        help="start after other bridge jobs: after, afterany, afterok, afternotok, "
             "aftercorr, singleton (',' all, '?' any)",
    ),
    OptionSpec(
        "kill-on-invalid-dep",
        "kill_on_invalid_dep",
        values.yes_no("kill_on_invalid_dep"),
        metavar="yes|no",
        help="end the job if its dependency can never be met",
    ),
    OptionSpec(
        "hold",
        "hold",
        values.flag("hold"),
        short="H",
        arg="none",
        help="submit the job held: it waits until 'tcontrol release JOBID'",
    ),
    OptionSpec(
        "test-only",
        "test_only",
        values.flag("test_only"),
        arg="none",
        help="check the job and say when and where it would start; submit nothing",
    ),
    OptionSpec(
        "parsable", "parsable", values.flag("parsable"), arg="none", help="print only the job id"
    ),
    OptionSpec(
        "wrap",
        "wrap",
        values.string("wrap"),
        cli_only=True,
        metavar="COMMAND",
        help="run COMMAND in a generated /bin/sh script",
    ),
    OptionSpec(
        "runtime",
        "runtime",
        values.object_name("runtime"),
        metavar="NAME",
        help=f"training runtime (default: {DEFAULT_RUNTIME})",
    ),
    OptionSpec(
        "backend",
        "backend",
        values.object_name("backend"),
        metavar="NAME",
        help="back end to run on (slurm, flux, kubernetes)",
    ),
    OptionSpec(
        "clusters",
        "backend",
        values.object_name("backend"),
        short="M",
        aliases=("cluster",),
        metavar="NAME",
        help="as sbatch -M: the cluster (a configured back end) to run on; one name",
    ),
    OptionSpec(
        "file",
        "file",
        values.string("file"),
        short="f",
        cli_only=True,
        metavar="TRAINJOB.yaml",
        help="submit a TrainJob document instead of a script",
    ),
    OptionSpec(
        "help",
        "help",
        values.flag("help"),
        short="h",
        arg="none",
        cli_only=True,
        help="show this help",
    ),
    OptionSpec(
        "usage", "help", values.flag("help"), arg="none", cli_only=True, help="show this help"
    ),
    OptionSpec(
        "version",
        "version",
        values.flag("version"),
        short="V",
        arg="none",
        cli_only=True,
        help="show the version",
    ),
)

#: Options passed to Slurm as they are (bridge/slurm_options.py; other back ends refuse them).
PASSED_OPTIONS: tuple[OptionSpec, ...] = (
    *(
        OptionSpec(p.long, name, values.passed(name), short=p.short, metavar=p.metavar,
                   help=p.help + " (Slurm only)")
        for name, p in PASSED.items()
    ),
    OptionSpec("requeue", "requeue", values.requeue(True), arg="none",
               help="requeue the job if a node fails (Slurm only)"),
    OptionSpec("no-requeue", "requeue", values.requeue(False), arg="none",
               help="never requeue the job (Slurm only)"),
)
OPTIONS += PASSED_OPTIONS

BY_LONG: dict[str, OptionSpec] = {
    name: spec for spec in OPTIONS for name in (spec.long, *spec.aliases)
}
BY_SHORT: dict[str, OptionSpec] = {spec.short: spec for spec in OPTIONS if spec.short}

#: sbatch options that tbatch knows and refuses with a reason.
_REFUSED: dict[str, str] = {}
#: sbatch options that exist but that the bridge does not support.
_SBATCH_ONLY_LONG = frozenset(
    {
        "batch",
        "bb",
        "bbf",
        "cluster-constraint",
        "container",
        "container-id",
        "contiguous",
        "core-spec",
        "cores-per-socket",
        "cpu-freq",
        "delay-boot",
        "export-file",
        "extra",
        "extra-node-info",
        "get-user-env",
        "gid",
        "gpu-bind",
        "gpu-freq",
        "gpus-per-socket",
        "gres-flags",
        "ignore-pbs",
        "immediate",
        "input",
        "mcs-label",
        "mem-bind",
        "mincpus",
        "network",
        "nice",
        "no-kill",
        "nodefile",
        "ntasks-per-core",
        "ntasks-per-gpu",
        "ntasks-per-socket",
        "overcommit",
        "oversubscribe",
        "power",
        "prefer",
        "priority",
        "profile",
        "propagate",
        "quiet",
        "reboot",
        "resv-ports",
        "segment",
        "sockets-per-node",
        "spread-job",
        "thread-spec",
        "threads-per-core",
        "time-min",
        "tres-bind",
        "tres-per-task",
        "uid",
        "use-min-nodes",
        "verbose",
        "wait",
        "wait-all-nodes",
        "tasks",
        # Later releases (24.11, 26.05; bridge/sbatch/manual.py) and --acctg-freq.
        "acctg-freq",
        "consolidate-segments",
        "container-type",
        "mem-update",
        "oom-kill-step",
        "resources",
        "spread-segments",
        "stepmgr",
    }
)
_SBATCH_ONLY_SHORT: dict[str, str] = {
    "B": "extra-node-info",
    "F": "nodefile",
    "i": "input",
    "I": "immediate",
    "k": "no-kill",
    "O": "overcommit",
    "Q": "quiet",
    "s": "oversubscribe",
    "S": "core-spec",
    "v": "verbose",
    "W": "wait",
}


#: Unsupported sbatch options that take no argument, or only as ``--name=value``: a
#: refusal skips exactly what the option would have taken, so that scanning goes on
#: and every refusal is reported at once.
_SBATCH_NO_ARG = frozenset(
    {"contiguous", "ignore-pbs", "immediate", "no-requeue", "overcommit",
     "oversubscribe", "quiet", "reboot", "requeue", "spread-job",
     "use-min-nodes", "verbose", "wait", "consolidate-segments", "spread-segments",
     "stepmgr"}
)
_SBATCH_OPTIONAL_ARG = frozenset({"get-user-env", "no-kill", "propagate", "nice",
                                  "oom-kill-step"})
_SBATCH_NO_ARG_SHORT = frozenset("IkOQsvW")


def refused_long(name: str) -> ArgKind | None:
    """How an sbatch option that tbatch refuses takes its argument; ``None`` when
    ``--name`` is not such an option (unknown: a typo, a prefix)."""
    if name in _REFUSED or name in _SBATCH_ONLY_LONG:
        if name in _SBATCH_NO_ARG:
            return "none"
        return "optional" if name in _SBATCH_OPTIONAL_ARG else "required"
    return None


def refused_names() -> dict[str, str | None]:
    """Every sbatch option tbatch knows and refuses: long name -> its letter, if any."""
    letters = {long: letter for letter, long in _SBATCH_ONLY_SHORT.items()}
    return {name: letters.get(name) for name in sorted({*_REFUSED, *_SBATCH_ONLY_LONG})}


def refused_short(letter: str) -> ArgKind | None:
    """As :func:`refused_long`, for ``-letter``."""
    if letter not in _SBATCH_ONLY_SHORT:
        return None
    return "none" if letter in _SBATCH_NO_ARG_SHORT else "required"


def unknown_long(name: str, word: str) -> str:
    """The error for ``--name`` (the word ``word``) that is not in :data:`OPTIONS`."""
    if name in _REFUSED:
        return f"option '--{name}' is not available: {_REFUSED[name]}"
    if name in _SBATCH_ONLY_LONG:
        return f"option '--{name}' is not supported by {PROG}"
    matches = sorted({s.long for n, s in BY_LONG.items() if name and n.startswith(name)})
    hint = (
        f" (abbreviations are not accepted; did you mean '--{matches[0]}'?)"
        if len(matches) == 1
        else ""
    )
    return f"unrecognized option {quote(word)}{hint}"


def unknown_short(letter: str) -> str:
    """The error for ``-letter`` that is not in :data:`OPTIONS`."""
    if letter in _SBATCH_ONLY_SHORT:
        return f"option '-{letter}' (--{_SBATCH_ONLY_SHORT[letter]}) is not supported by {PROG}"
    return f"invalid option -- {quote(letter)}"


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
