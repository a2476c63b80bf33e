"""sbatch's input environment variables (``SBATCH_PARTITION``, ``SBATCH_TIMELIMIT`` ...).

sbatch(1), "INPUT ENVIRONMENT VARIABLES": each variable sets an option, and "the command
line options override any environment variables" while the environment overrides
``#SBATCH`` lines. Contract: :data:`INPUT_VARIABLES` maps each variable tbatch reads to
the long option it sets; :func:`environment_values` reads them from an environment into
option values by destination (as :func:`bridge.sbatch.cmdline.scan` gives them). A bad
value is a :class:`~bridge.sbatch.errors.SbatchError` naming the option and the variable;
a variable for an sbatch option tbatch refuses (``SBATCH_WAIT``) is appended to
``refusals`` as such an option would be. A variable set to the empty string is ignored,
except a flag's (``SBATCH_REQUEUE=``), which is set by being there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge.sbatch.errors import BadValue, SbatchError, quote
from bridge.sbatch.options import BY_LONG
from bridge.sbatch.script import first_surrogate

__all__ = ["INPUT_VARIABLES", "REFUSED_VARIABLES", "environment_values"]

#: Variable -> the long option it sets (sbatch's names).
INPUT_VARIABLES: Mapping[str, str] = {
    "SBATCH_ACCOUNT": "account",
    "SBATCH_ARRAY_INX": "array",
    "SLURM_CLUSTERS": "clusters",
    "SBATCH_CLUSTERS": "clusters",  # after SLURM_CLUSTERS: it wins
    "SBATCH_CONSTRAINT": "constraint",
    "SBATCH_CPUS_PER_GPU": "cpus-per-gpu",
    "SBATCH_DISTRIBUTION": "distribution",
    "SBATCH_EXPORT": "export",
    "SBATCH_GPUS": "gpus",
    "SBATCH_GPUS_PER_NODE": "gpus-per-node",
    "SBATCH_GPUS_PER_TASK": "gpus-per-task",
    "SBATCH_GRES": "gres",
    "SBATCH_HINT": "hint",
    "SBATCH_HOLD": "hold",
    "SBATCH_JOB_NAME": "job-name",
    "SBATCH_MEM_PER_CPU": "mem-per-cpu",
    "SBATCH_MEM_PER_GPU": "mem-per-gpu",
    "SBATCH_MEM_PER_NODE": "mem",
    "SBATCH_NO_REQUEUE": "no-requeue",
    "SBATCH_OPEN_MODE": "open-mode",
    "SBATCH_PARTITION": "partition",
    "SBATCH_QOS": "qos",
    "SBATCH_REQ_SWITCH": "switches",
    "SBATCH_REQUEUE": "requeue",
    "SBATCH_RESERVATION": "reservation",
    "SBATCH_SIGNAL": "signal",
    "SBATCH_TIMELIMIT": "time",
    "SBATCH_WCKEY": "wckey",
}

#: Variables of sbatch options tbatch refuses -> the option (they change what the job is).
REFUSED_VARIABLES: Mapping[str, str] = {
    "SBATCH_WAIT": "wait",
    "SBATCH_OVERCOMMIT": "overcommit",
    "SBATCH_CORE_SPEC": "core-spec",
    "SBATCH_THREAD_SPEC": "thread-spec",
    "SBATCH_THREADS_PER_CORE": "threads-per-core",
    "SBATCH_CONTAINER": "container",
}


def _error(message: str) -> SbatchError:
    """An error found in the environment (the message names the variable)."""
    return SbatchError(message, source="environment")


def environment_values(
    environ: Mapping[str, str], refusals: list[SbatchError]
) -> dict[str, Mapping[str, Any]]:
    """Option values (by destination) from sbatch's input variables in ``environ``."""
    for var, option in REFUSED_VARIABLES.items():
        if environ.get(var):
            refusals.append(_error(f"{var} (--{option}) is not supported by tbatch"))
    values: dict[str, Mapping[str, Any]] = {}
    for var, option in INPUT_VARIABLES.items():
        raw = environ.get(var)
        spec = BY_LONG[option]
        if raw is None or (raw == "" and spec.arg != "none"):
            continue
        if first_surrogate(raw) >= 0:
            raise _error(f"{var}: the value is not valid UTF-8")
        try:
            values[spec.dest] = spec.convert(None if spec.arg == "none" else raw)
        except BadValue as exc:
            raise _error(f"invalid --{spec.long} value {quote(raw)} (from {var}): {exc}") from None
    return values
