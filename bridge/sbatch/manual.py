"""Every sbatch option of the Slurm releases the bridge is tried on (names only).

Facts read from the OPTIONS section of each release's ``sbatch(1)`` manual page
(``--help`` lists fewer). The compatibility table (:mod:`bridge.compat_table`) has one
row per name here; ``tests/integration/test_sbatch_manual.py`` reads the manual pages
of the testbed's releases (22.05 on the host, 24.11 and 26.05 in
``testbed/slurm-versions.sh``) and fails when this list differs from them.

Contract: :data:`RELEASES` maps a release to the long names (without ``--``) its manual
documents; :func:`all_names` is their union, sorted. :data:`VARIABLES` maps a release to
the variables of its INPUT ENVIRONMENT VARIABLES section (each of which
:mod:`bridge.sbatch.inputenv` reads, refuses or documents). Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["RELEASES", "VARIABLES", "all_names"]

_V22_05 = frozenset({
    "account", "acctg-freq", "array", "batch", "bb", "bbf", "begin", "chdir",
    "cluster-constraint", "clusters", "comment", "constraint", "container", "contiguous",
    "core-spec", "cores-per-socket", "cpu-freq", "cpus-per-gpu", "cpus-per-task",
    "deadline", "delay-boot", "dependency", "distribution", "error", "exclude", "exclusive",
    "export", "export-file", "extra-node-info", "get-user-env", "gid", "gpu-bind",
    "gpu-freq", "gpus", "gpus-per-node", "gpus-per-socket", "gpus-per-task", "gres",
    "gres-flags", "help", "hint", "hold", "ignore-pbs", "input", "job-name",
    "kill-on-invalid-dep", "licenses", "mail-type", "mail-user", "mcs-label", "mem",
    "mem-bind", "mem-per-cpu", "mem-per-gpu", "mincpus", "network", "nice", "no-kill",
    "no-requeue", "nodefile", "nodelist", "nodes", "ntasks", "ntasks-per-core",
    "ntasks-per-gpu", "ntasks-per-node", "ntasks-per-socket", "open-mode", "output",
    "overcommit", "oversubscribe", "parsable", "partition", "power", "prefer", "priority",
    "profile", "propagate", "qos", "quiet", "reboot", "requeue", "reservation", "signal",
    "sockets-per-node", "spread-job", "switches", "test-only", "thread-spec",
    "threads-per-core", "time", "time-min", "tmp", "uid", "usage", "use-min-nodes",
    "verbose", "version", "wait", "wait-all-nodes", "wckey", "wrap",
})

_V24_11 = (_V22_05 - {"power"}) | {
    "container-id", "extra", "oom-kill-step", "resv-ports", "segment", "stepmgr",
    "tres-bind", "tres-per-task",
}

_V26_05 = _V24_11 | {
    "consolidate-segments", "container-type", "mem-update", "resources", "spread-segments",
}

#: Release -> the long option names its sbatch manual documents.
RELEASES: Mapping[str, frozenset[str]] = {"22.05": _V22_05, "24.11": _V24_11, "26.05": _V26_05}


_VARS_22_05 = frozenset({
    *(f"SBATCH_{name}" for name in (
        "ACCOUNT", "ACCTG_FREQ", "ARRAY_INX", "BATCH", "CLUSTERS", "CONSTRAINT", "CONTAINER",
        "CORE_SPEC", "CPUS_PER_GPU", "DEBUG", "DELAY_BOOT", "DISTRIBUTION", "ERROR",
        "EXCLUSIVE", "EXPORT", "GET_USER_ENV", "GPU_BIND", "GPU_FREQ", "GPUS",
        "GPUS_PER_NODE", "GPUS_PER_TASK", "GRES", "GRES_FLAGS", "HINT", "IGNORE_PBS",
        "INPUT", "JOB_NAME", "MEM_BIND", "MEM_PER_CPU", "MEM_PER_GPU", "MEM_PER_NODE",
        "NETWORK", "NO_KILL", "NO_REQUEUE", "OPEN_MODE", "OUTPUT", "OVERCOMMIT",
        "PARTITION", "POWER", "PROFILE", "QOS", "REQ_SWITCH", "REQUEUE", "RESERVATION",
        "SIGNAL", "SPREAD_JOB", "THREAD_SPEC", "THREADS_PER_CORE", "TIMELIMIT",
        "USE_MIN_NODES", "WAIT", "WAIT_ALL_NODES", "WAIT4SWITCH", "WCKEY")),
    "SLURM_CLUSTERS", "SLURM_CONF", "SLURM_HINT", "SLURM_DEBUG_FLAGS", "SLURM_EXIT_ERROR",
    "SLURM_STEP_KILLED_MSG_NODE_ID", "SLURM_UMASK",
})
_VARS_24_11 = _VARS_22_05 | {"SBATCH_CONTAINER_ID", "SBATCH_TRES_BIND",
                             "SBATCH_TRES_PER_TASK"}
_VARS_26_05 = _VARS_24_11 | {"SBATCH_CONTAINER_TYPE", "SBATCH_SEGMENT_SIZE"}

#: Release -> the input environment variables its sbatch manual documents.
VARIABLES: Mapping[str, frozenset[str]] = {
    "22.05": _VARS_22_05, "24.11": _VARS_24_11, "26.05": _VARS_26_05}


def all_names() -> list[str]:
    """Every long option name of any release, sorted."""
    return sorted(frozenset().union(*RELEASES.values()))
