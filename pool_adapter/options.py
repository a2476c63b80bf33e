"""What the shared pool does with each scheduling option: the holder is a Slurm batch
job, so Slurm's table applies (partition, account, QoS, time limit, ``--switches``,
constraints, mail …), except for what concerns a batch script's own process and
output, which the holder does not run: the job runs in pods."""

from __future__ import annotations

from collections.abc import Mapping

from bridge.option_support import Support, refused
from slurm_adapter.options import SUPPORT as SLURM_SUPPORT

_IN_PODS = "the job runs in Kubernetes pods; the Slurm job only holds their nodes"

SUPPORT: Mapping[str, Support] = {
    **SLURM_SUPPORT,
    "output": refused(f"{_IN_PODS} (its output is the pods' log: tlog, kubectl logs)"),
    "error": refused(f"{_IN_PODS} (its output is the pods' log: tlog, kubectl logs)"),
    "open_mode": refused(_IN_PODS),
    "chdir": refused(_IN_PODS),
    "export": refused(f"{_IN_PODS} (their environment is the TrainJob's)"),
    "signal": refused(f"{_IN_PODS}; the holder's signals are the bridge's"),
    "ntasks": refused(f"{_IN_PODS}: one pod per node (numNodes)"),
    "distribution": refused(_IN_PODS),
    "hint": refused(_IN_PODS),
    "gpus_per_task": refused(f"{_IN_PODS}: GPUs per node only"),
}
