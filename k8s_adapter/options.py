"""What the Kubernetes back end does with each scheduling option
(:mod:`bridge.option_support`).

A pod is not a Slurm allocation: it has no account, QOS, output file or submit
directory on a shared file system, and the Kubernetes scheduler, not the bridge, picks
its node: ``--exclude`` and ``--constraint`` (node labels) become required node
affinity it obeys; ``--switches`` needs the bridge's own placement (mode ``nodelist``,
whose hosts are pinned the same way). Every option is either honoured or refused at
admission (400) with the reason; none is ignored.
Contract: :data:`SUPPORT` covers every field of
:class:`bridge.scheduling.SchedulingOptions`; published as the ``kubernetes`` entry
point of ``hpc_bridge.option_support``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from bridge.option_support import FIELD_FLAGS, AdmitContext, Check, Support, honoured, refused
from bridge.placement_request import features_of
from bridge.scheduling import SchedulingOptions

__all__ = ["SUPPORT"]

ONLY_SLURM = "only Slurm honours it"
_PINNED = ('the Kubernetes scheduler chooses the nodes; with placement = "nodelist" for '
           "the back end the bridge places the pods and pins them (docs/placement.md)")


def _needs_nodelist(options: SchedulingOptions, ctx: AdmitContext) -> str | None:
    return None if ctx.placement == "nodelist" else _PINNED


_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}")
_LABEL_VALUE = re.compile(rf"({_LABEL_NAME})?")


def _constraint(options: SchedulingOptions, ctx: AdmitContext) -> str | None:
    features = features_of(options.constraint)
    if features is None:
        return ("only FEATURE or FEATURE&FEATURE... (node labels: key=value or key) "
                "translate to Kubernetes; '|', counts and brackets do not")
    for feature in sorted(features):
        key, _, value = feature.partition("=")
        if not _LABEL_KEY.fullmatch(key) or not _LABEL_VALUE.fullmatch(value):
            return f"{feature!r} is not a Kubernetes node label (key=value or key)"
    return None


def _ntasks(options: SchedulingOptions, ctx: AdmitContext) -> str | None:
    if options.ntasks_per_node is None and options.ntasks and options.ntasks % ctx.nodes:
        return (f"{options.ntasks} tasks do not divide evenly over {ctx.nodes} pods, and "
                "every pod of a JobSet runs as many ranks (give --ntasks-per-node)")
    return None


def _partition(options: SchedulingOptions, ctx: AdmitContext) -> str | None:
    if options.partition in ctx.routed_partitions:
        return None
    routed = ", ".join(sorted(ctx.routed_partitions)) or "none"
    return ("Kubernetes nodes are in no Slurm partition; a partition names this back end "
            f"only through its route_partitions (here: {routed})")


_HONOURED: Mapping[str, tuple[str, Check | None]] = {
    "job_name": ("the job's name (tqueue, tshow); the JobSet is named after the TrainJob",
                 None),
    "partition": ("routes the job here when it is one of the back end's route_partitions",
                  _partition),
    "time_limit_minutes": ("activeDeadlineSeconds of each Job of the JobSet", None),
    "ntasks": ("ranks per pod: --ntasks / --nodes, when it divides evenly", _ntasks),
    "ntasks_per_node": ("ranks per pod (PET_NPROC_PER_NODE, the hostfile's slots)", None),
    "cpus_per_task": ("the pod's cpu request and limit (tasks per node x CPUs per task)",
                      None),
    "gpus_per_node": ("the pod's nvidia.com/gpu request and limit", None),
    "mem_per_node_mb": ("the pod's memory request (and limit, where the job gives one)",
                        None),
    "submit_dir": ("not used: a pod starts in its image's working directory (WORKDIR), as "
                   "the directory tbatch ran in is not inside the pod", None),
    "exclude": ("required node affinity: kubernetes.io/hostname NotIn these nodes", None),
    "constraint": ("required node affinity: each FEATURE is a node label, key=value (In) "
                   "or key (Exists)", _constraint),
    "switches": ("the pods span at most N topology domains of the lowest level "
                 "(placement = \"nodelist\")", _needs_nodelist),
    "switches_wait_minutes": ("waits up to TIME for a placement within N domains",
                              _needs_nodelist),
    "export": ("applied by tbatch to the pod's environment", None),
    "dependency": ("held by the bridge until met, across back ends "
                   "(bridge/engine_dependency.py)", None),
    "kill_on_invalid_dep": ("the bridge ends the job when its dependency can never be met",
                            None),
    "hold": ("held by the bridge (spec.suspend; no JobSet yet) until `tcontrol release`",
             None),
}

_REFUSED: Mapping[str, str] = {
    "account": "Kubernetes has no Slurm account: the namespace and its ResourceQuota "
               "decide (backends.kubernetes.users)",
    "qos": "Kubernetes has no Slurm QOS: the namespace's ResourceQuota and "
           "PriorityClasses decide",
    "output": "a pod's standard output is its container log (tlog shows it); Kubernetes "
              "writes no file of it",
    "error": "a pod's standard error is its container log (tlog shows it); Kubernetes "
             "writes no file of it",
    "chdir": "the directories of the host tbatch ran on are not inside the pod; it starts "
             "in its image's working directory (WORKDIR)",
    "exclusive": "Kubernetes cannot keep other pods off a node",
    "nodelist": "the bridge does not pin pods to hosts the user names; use --exclude or "
                "--constraint",
}

#: Field -> how Kubernetes honours it, or why it cannot.
SUPPORT: Mapping[str, Support] = {
    **{name: refused(ONLY_SLURM) for name in FIELD_FLAGS},
    **{name: refused(why) for name, why in _REFUSED.items()},
    **{name: honoured(how, check) for name, (how, check) in _HONOURED.items()},
}
