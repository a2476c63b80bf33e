"""sbatch's input environment variables (``SBATCH_PARTITION``, ``SBATCH_TIMELIMIT`` ...).

sbatch(1), "INPUT ENVIRONMENT VARIABLES": each variable sets an option, and "the command
line options override any environment variables" while the environment overrides
``#SBATCH`` lines. Contract: every variable of that section in any release of
:data:`bridge.sbatch.manual.VARIABLES` is in exactly one of three tables, so none is
ignored without a word (a unit test keeps it so):

* :data:`INPUT_VARIABLES`: read, each into the long option it sets;
  :func:`environment_values` reads them from an environment into option values by
  destination (as :func:`bridge.sbatch.cmdline.scan` gives them). ``SBATCH_WAIT4SWITCH``
  is the wait of ``SBATCH_REQ_SWITCH`` (``--switches=COUNT@WAIT``); alone it asks for
  nothing, as in sbatch.
* :data:`REFUSED_VARIABLES`: those of sbatch options tbatch refuses (``SBATCH_WAIT``):
  each one set is appended to ``refusals`` as such an option would be.
* :data:`CLIENT_VARIABLES`: what sbatch itself reads and that is the client's, with what
  tbatch does with it (``SLURM_EXIT_ERROR``: its exit status on an error; ``SLURM_UMASK``:
  handed to the job, which Slurm creates its output files under).

A bad value is a :class:`~bridge.sbatch.errors.SbatchError` naming the option and the
variable. A variable set to the empty string is ignored, except a flag's
(``SBATCH_REQUEUE=``, ``SBATCH_EXCLUSIVE=``), which is set by being there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge.sbatch.errors import BadValue, SbatchError, quote
from bridge.sbatch.options import BY_LONG, refused_long
from bridge.sbatch.script import first_surrogate

__all__ = ["CLIENT_VARIABLES", "INPUT_VARIABLES", "REFUSED_VARIABLES", "environment_values"]

#: Variable -> the long option it sets (sbatch's names).
INPUT_VARIABLES: Mapping[str, str] = {
    "SBATCH_ACCOUNT": "account",
    "SBATCH_ARRAY_INX": "array",
    "SLURM_CLUSTERS": "clusters",
    "SBATCH_CLUSTERS": "clusters",  # after SLURM_CLUSTERS: it wins
    "SBATCH_CONSTRAINT": "constraint",
    "SBATCH_CPUS_PER_GPU": "cpus-per-gpu",
    "SBATCH_DISTRIBUTION": "distribution",
    "SBATCH_ERROR": "error",
    "SBATCH_EXCLUSIVE": "exclusive",
    "SBATCH_EXPORT": "export",
    "SBATCH_GPUS": "gpus",
    "SBATCH_GPUS_PER_NODE": "gpus-per-node",
    "SBATCH_GPUS_PER_TASK": "gpus-per-task",
    "SBATCH_GRES": "gres",
    "SLURM_HINT": "hint",
    "SBATCH_HINT": "hint",  # after SLURM_HINT: it wins
    "SBATCH_JOB_NAME": "job-name",
    "SBATCH_MEM_PER_CPU": "mem-per-cpu",
    "SBATCH_MEM_PER_GPU": "mem-per-gpu",
    "SBATCH_MEM_PER_NODE": "mem",
    "SBATCH_NO_REQUEUE": "no-requeue",
    "SBATCH_OPEN_MODE": "open-mode",
    "SBATCH_OUTPUT": "output",
    "SBATCH_PARTITION": "partition",
    "SBATCH_QOS": "qos",
    "SBATCH_REQ_SWITCH": "switches",
    "SBATCH_REQUEUE": "requeue",
    "SBATCH_RESERVATION": "reservation",
    "SBATCH_SIGNAL": "signal",
    "SBATCH_TIMELIMIT": "time",
    "SBATCH_WAIT4SWITCH": "switches",  # the wait of SBATCH_REQ_SWITCH (module docstring)
    "SBATCH_WCKEY": "wckey",
}

#: Variables of sbatch options tbatch refuses -> the option (they change what the job is).
REFUSED_VARIABLES: Mapping[str, str] = {
    "SBATCH_ACCTG_FREQ": "acctg-freq",
    "SBATCH_BATCH": "batch",
    "SBATCH_CONTAINER": "container",
    "SBATCH_CONTAINER_ID": "container-id",
    "SBATCH_CONTAINER_TYPE": "container-type",
    "SBATCH_CORE_SPEC": "core-spec",
    "SBATCH_DEBUG": "verbose",
    "SBATCH_DELAY_BOOT": "delay-boot",
    "SBATCH_GET_USER_ENV": "get-user-env",
    "SBATCH_GPU_BIND": "gpu-bind",
    "SBATCH_GPU_FREQ": "gpu-freq",
    "SBATCH_GRES_FLAGS": "gres-flags",
    "SBATCH_IGNORE_PBS": "ignore-pbs",
    "SBATCH_INPUT": "input",
    "SBATCH_MEM_BIND": "mem-bind",
    "SBATCH_NETWORK": "network",
    "SBATCH_NO_KILL": "no-kill",
    "SBATCH_OVERCOMMIT": "overcommit",
    "SBATCH_POWER": "power",
    "SBATCH_PROFILE": "profile",
    "SBATCH_SEGMENT_SIZE": "segment",
    "SBATCH_SPREAD_JOB": "spread-job",
    "SBATCH_THREAD_SPEC": "thread-spec",
    "SBATCH_THREADS_PER_CORE": "threads-per-core",
    "SBATCH_TRES_BIND": "tres-bind",
    "SBATCH_TRES_PER_TASK": "tres-per-task",
    "SBATCH_USE_MIN_NODES": "use-min-nodes",
    "SBATCH_WAIT": "wait",
    "SBATCH_WAIT_ALL_NODES": "wait-all-nodes",
}

#: What sbatch reads for itself, not for the job's options -> what tbatch does with it
#: (docs/slurm.md).
CLIENT_VARIABLES: Mapping[str, str] = {
    "SLURM_CONF": "not read: tbatch asks the daemon, which submits to the Slurm of its own "
                  "configuration",
    "SLURM_DEBUG_FLAGS": "not read: sbatch's own logging",
    "SLURM_EXIT_ERROR": "tbatch's exit status on an error, as sbatch's (1 when unset or 0)",
    "SLURM_STEP_KILLED_MSG_NODE_ID": "handed to the job with the other SLURM_* variables, "
                                     "for the steps that read it",
    "SLURM_UMASK": "handed to the job, which Slurm creates its output files under; tbatch "
                   "sets it to its own umask when unset, as sbatch does",
}


def _error(message: str) -> SbatchError:
    """An error found in the environment (the message names the variable)."""
    return SbatchError(message, source="environment")


def environment_values(
    environ: Mapping[str, str], refusals: list[SbatchError],
    origins: dict[str, str] | None = None,
) -> dict[str, Mapping[str, Any]]:
    """Option values (by destination) from sbatch's input variables in ``environ``;
    ``origins``, when given, gets the variable each destination came from."""
    for var, option in REFUSED_VARIABLES.items():
        if environ.get(var) or (var in environ and refused_long(option) == "none"):
            refusals.append(_error(f"{var} (--{option}) is not supported by tbatch"))
    values: dict[str, Mapping[str, Any]] = {}
    for var, option in INPUT_VARIABLES.items():
        raw = environ.get(var)
        spec = BY_LONG[option]
        if var == "SBATCH_WAIT4SWITCH":
            continue  # read with SBATCH_REQ_SWITCH
        if raw is None or (raw == "" and spec.arg == "required"):
            continue
        if var == "SBATCH_REQ_SWITCH" and environ.get("SBATCH_WAIT4SWITCH"):
            var, raw = "SBATCH_REQ_SWITCH and SBATCH_WAIT4SWITCH", (
                f"{raw.partition('@')[0]}@{environ['SBATCH_WAIT4SWITCH']}")
        if first_surrogate(raw) >= 0:
            raise _error(f"{var}: the value is not valid UTF-8")
        try:
            values[spec.dest] = spec.convert(None if spec.arg == "none" or raw == "" else raw)
            if origins is not None:
                origins[spec.dest] = var
        except BadValue as exc:
            raise _error(f"invalid --{spec.long} value {quote(raw)} (from {var}): {exc}") from None
    return values
