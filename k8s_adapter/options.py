"""What the Kubernetes back end does with each scheduling option
(:mod:`bridge.option_support`).

A pod is not a Slurm allocation: it has no account, QOS, output file or submit
directory on a shared file system, and the Kubernetes scheduler, not the bridge, picks
its node: ``--exclude`` and ``--constraint`` (node labels) become required node
affinity it obeys (k8s_adapter/affinity.py, which also checks them); it has no leaf
switches to count (``--switches`` is refused: a topology label in ``--constraint`` is
the Kubernetes way), except on a TrainJob Kueue queues, whose Topology Aware
Scheduling gets the request (k8s_adapter/kueue_topology.py). Every option is either
honoured or refused at admission (400) with the reason; none is ignored.
Contract: :data:`SUPPORT` covers every field of
:class:`bridge.scheduling.SchedulingOptions`; published as the ``kubernetes`` entry
point of ``hpc_bridge.option_support``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from bridge.gpu_options import gpus_per_node
from bridge.option_support import (
    FIELD_FLAGS,
    ONLY_SLURM,
    AdmitContext,
    Check,
    Support,
    begin_check,
    gpu_check,
    honoured,
    refused,
    translated,
)
from bridge.scheduling import SchedulingOptions
from k8s_adapter.affinity import MAX_EXCLUDED, constraint_expressions, exclude_values
from k8s_adapter.kueue_topology import leaf_level

__all__ = ["SUPPORT"]

def _checked(check: Callable[[SchedulingOptions], object]) -> Check:
    """A check running one of k8s_adapter.affinity's own translations."""
    return translated(check, (ValueError,))


def _ntasks(options: SchedulingOptions, ctx: AdmitContext) -> str | None:
    o, nodes = options, ctx.nodes
    if o.ntasks is None:
        return None
    if o.ntasks_per_node is not None and o.ntasks != o.ntasks_per_node * nodes:
        return (f"--ntasks={o.ntasks} and --ntasks-per-node={o.ntasks_per_node} disagree "
                f"over {nodes} pod(s): every pod of a JobSet runs as many ranks")
    if ctx.framework != "plain" and o.ntasks % nodes:
        return (f"{o.ntasks} tasks do not divide evenly over {nodes} pods, and every pod "
                "of a JobSet runs as many ranks (give --ntasks-per-node)")
    return _one_process(o.ntasks // nodes, ctx)


def _ntasks_per_node(options: SchedulingOptions, ctx: AdmitContext) -> str | None:
    return _one_process(options.ntasks_per_node or 1, ctx)


def _one_process(per_pod: int, ctx: AdmitContext) -> str | None:
    if ctx.framework in ("jax", "xgboost") and per_pod > 1:
        return (f"a {ctx.framework} job runs one process per pod here "
                "(JAX_NUM_PROCESSES / DMLC_NUM_WORKER count pods): ask for more nodes")
    return None


def _switches(options: SchedulingOptions, ctx: AdmitContext) -> str | None:
    if not ctx.queue_places:
        return ("the Kubernetes scheduler has no leaf switches to count; ask for one "
                "topology domain with --constraint (e.g. topology.kubernetes.io/zone=a), "
                "or queue the TrainJob in Kueue")
    if leaf_level(ctx.topology_labels) is None:
        return ("the back end's topology_labels name no level above the host, so Kueue "
                "cannot be asked for leaf switches")
    if ctx.nodes > 1 and not ctx.topology_handed:
        return ("Kueue queues this TrainJob and did not get the request: it is handed to "
                "Kueue when the TrainJob is created, by the TrainJob door's topology "
                "webhook (webhook_listen; docs/kubernetes.md, 'Kueue'), which did not "
                "add it (not registered, no replica leading, or it did not answer; or "
                "the job or its runtime asks Kueue for a topology itself: then drop "
                "--switches)")
    return None


def _gpus_for_memory(options: SchedulingOptions, ctx: AdmitContext) -> str | None:
    """--mem-per-gpu counts the GPUs the options ask for (not resourcesPerNode's)."""
    try:
        gpus = gpus_per_node(options, ctx.nodes, ctx.tasks_per_node)
    except ValueError:
        return None  # refused under the GPU option itself
    if not gpus:
        return ("the options ask for no GPUs per pod to count it by (--gpus-per-node, "
                "--gres=gpu:N, --gpus, --gpus-per-task)")
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
    "time_limit_minutes": ("activeDeadlineSeconds of each Job of the JobSet (it counts "
                           "from the Job's start, Pending pods included)", None),
    "ntasks": ("ranks per pod: --ntasks / --nodes, when it divides evenly (one per pod "
               "for JAX and XGBoost)", _ntasks),
    "ntasks_per_node": ("ranks per pod (PET_NPROC_PER_NODE, the hostfile's slots; one for "
                        "JAX and XGBoost)", _ntasks_per_node),
    "cpus_per_task": ("the pod's cpu request (tasks per node x CPUs per task), and limit "
                      "where the job gives one", None),
    "gpus_per_node": ("the pod's nvidia.com/gpu request and limit", None),
    "mem_per_cpu_mb": ("the pod's memory request: SIZE x the pod's CPUs (x its ranks "
                       "without --cpus-per-task)", None),
    "mem_per_gpu_mb": ("the pod's memory request: SIZE x the pod's GPUs", _gpus_for_memory),
    "tmp_mb": ("the pod's ephemeral-storage request (local disk; 0: none)", None),
    "begin": ("held by the bridge until then, no JobSet before (reason BeginTime, as "
              "squeue shows it); a relative time counts from admission", begin_check),
    "gres": ("--gres=gpu[:N]: N as the pod's nvidia.com/gpu request and limit "
             "(bridge/gpu_options.py)", gpu_check("gres")),
    "gpus": ("--gpus=N: N / nodes as each pod's nvidia.com/gpu request and limit, when it "
             "divides evenly", gpu_check("gpus")),
    "gpus_per_task": ("--gpus-per-task=N: N x ranks per pod as the pod's nvidia.com/gpu "
                      "request and limit", gpu_check("gpus_per_task")),
    "mem_per_node_mb": ("the pod's memory request (a limit only where the job gives one; "
                        "Slurm enforces --mem)", None),
    "submit_dir": ("not used: a pod starts in its image's working directory (WORKDIR), as "
                   "the directory tbatch ran in is not inside the pod", None),
    "submit_path": ("not used: a pod's PATH is its image's (the submitting host's would "
                    "name directories the image does not have)", None),
    "exclude": ("required node affinity: kubernetes.io/hostname NotIn these nodes (at "
                f"most {MAX_EXCLUDED})", _checked(lambda o: exclude_values(o.exclude))),
    "constraint": ("required node affinity: each FEATURE is a node label, key=value (In) "
                   "or key (Exists); not hosts or node roles",
                   _checked(lambda o: constraint_expressions(o.constraint))),
    "export": ("applied by tbatch to the pod's environment", None),
    "array": ("one bridge job (one JobSet) per task, throttled by the bridge "
              "(bridge/arrays.py)", None),
    "dependency": ("held by the bridge until met, across back ends "
                   "(bridge/engine_dependency.py)", None),
    "kill_on_invalid_dep": ("the bridge ends the job when its dependency can never be met",
                            None),
    "hold": ("held by the bridge (spec.suspend; no JobSet yet) until `tcontrol release`",
             None),
    "switches": ("on a TrainJob Kueue queues only: Kueue's topology request at the back "
                 "end's leaf level, required for 1, else preferred "
                 "(k8s_adapter/kueue_topology.py); refused otherwise", _switches),
    "switches_wait_minutes": ("with --switches: the request is Kueue's preferred one "
                              "(Kueue's requirement has no time limit)", _switches),
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
