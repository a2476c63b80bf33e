"""Every sbatch option of the Slurm releases the bridge is tried on (names only).

Facts read from the OPTIONS section of each release's ``sbatch(1)`` manual page
(``--help`` lists fewer). The compatibility table (:mod:`bridge.compat_table`) has one
row per name here; ``tests/integration/test_sbatch_manual.py`` reads the manual pages
of the testbed's releases (22.05 on the host, 24.11 and 26.05 in
``testbed/slurm-versions.sh``) and fails when this list differs from them.

Contract: :data:`RELEASES` maps a release to the long names (without ``--``) its manual
documents; :func:`all_names` is their union, sorted. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["RELEASES", "all_names"]

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


def all_names() -> list[str]:
    """Every long option name of any release, sorted."""
    return sorted(frozenset().union(*RELEASES.values()))
