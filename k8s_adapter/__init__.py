"""Kubernetes: the JobSet back end and the TrainJob CR front door (docs/kubernetes.md).

Modules: :mod:`k8s_adapter.kube` (the kubernetes_asyncio client, error classes, the
resumable list-then-watch), :mod:`k8s_adapter.jobset` (TrainJob → JobSet in Kubeflow
Trainer's layout, JobSet → engine state; pure), :mod:`k8s_adapter.inventory` (nodes
and pods → inventory with label topology; pure), :mod:`k8s_adapter.sshauth` (the MPI
SSH Secret), :mod:`k8s_adapter.access` (who may run where, as whom, with what: with
:mod:`k8s_adapter.identity` and :mod:`k8s_adapter.podsecurity`; pure),
:mod:`k8s_adapter.backend` (entry point ``hpc_bridge.backends: kubernetes``),
:mod:`k8s_adapter.status` (stored job → TrainJob status; pure),
:mod:`k8s_adapter.frontdoor` (entry point ``hpc_bridge.frontdoors: kubernetes``),
:mod:`k8s_adapter.settings` (their settings models).
kubernetes_asyncio is imported only when a connection is made.
"""

from k8s_adapter.settings import KubernetesSettings, TrainJobDoorSettings

__all__ = ["KubernetesSettings", "TrainJobDoorSettings"]
