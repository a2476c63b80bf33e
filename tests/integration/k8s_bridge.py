"""A bridge daemon wired to the Kubernetes test bed (and the Slurm one): the hybrid set-up.

Back ends ``kubernetes`` (JobSets, placement ``nodelist``: pods pinned to the chosen
hosts) and ``slurm`` (slurmrestd); the TrainJob front door watches one test namespace
only (so test daemons never claim each other's TrainJobs), sends TrainJobs to
``kubernetes`` unless the ``hpc-bridge.io/backend`` annotation picks ``slurm``, and
runs Slurm jobs as alice.
"""

from __future__ import annotations

import json
from typing import Any

from tests.integration.bed import REPO, Daemon, fresh_daemon_dir
from tests.integration.k8sbed import MANAGED_BY, K8sBed

TRAINJOBS = "trainjobs.trainer.kubeflow.org"
JOBSETS = "jobsets.jobset.x-k8s.io"
KWOK_FAIL = "pod-container-running-failed.stage.kwok.x-k8s.io"
#: An admin's runtime with no trainer container (no image): ``mpich-distributed``.
IMAGELESS_RUNTIME = REPO / "examples" / "runtimes" / "mpich-distributed.yaml"
#: An admin's runtime whose first failure is final (restartPolicy Never, backoffLimit 0).
ONCE_RUNTIME = REPO / "examples" / "runtimes" / "plain-once.yaml"
#: kwok never completes a pod with this label (testbed/k8s/k8s.sh, kwok_config).
KWOK_STAY_RUNNING = "stay-running.test.hpc-bridge.io"


def k8s_daemon(k8s: K8sBed, namespace: str, slurm: dict[str, str] | None = None,
               parallel_submits: int = 16, kubeconfig: str | None = None,
               extra: str = "", **door: Any) -> Daemon:
    """A daemon (not started) for ``namespace``; ``door`` overrides front-door settings;
    ``kubeconfig`` replaces the bed's admin one (e.g. a service account's); ``extra``
    is appended to its configuration (more back ends)."""
    kubeconfig = kubeconfig or k8s.kubeconfig
    labels = k8s.env.get("K8S_TOPOLOGY_LABELS", "kubernetes.io/hostname").split(",")
    settings: dict[str, Any] = {"kind": "kubernetes", "kubeconfig": kubeconfig,
                                "namespaces": [namespace], "backend": "kubernetes",
                                "allowed_backends": ["slurm"] if slurm else [],
                                "run_as": "alice", "status_interval": 0.3, **door}
    lines = ["[frontdoors.kubernetes]", *(f"{k} = {json.dumps(v)}" for k, v in settings.items())]
    if slurm is not None:
        lines += ["", "[backends.slurm]", 'kind = "slurm"',
                  f"rest_socket = {json.dumps(slurm['SLURMRESTD_SOCKET'])}",
                  f"rest_version = {json.dumps(slurm.get('SLURM_REST_VERSION', 'v0.0.38'))}",
                  f"jwt_key = {json.dumps(slurm['SLURM_JWT_KEY'])}"]
    return Daemon(fresh_daemon_dir("k8s"),
                  {"kubeconfig": kubeconfig, "placement": "nodelist",
                   "topology_labels": labels},
                  backend_name="kubernetes", backend_kind="kubernetes",
                  runtime_paths=[str(IMAGELESS_RUNTIME), str(ONCE_RUNTIME)],
                  engine_settings={"max_parallel_submits": parallel_submits},
                  extra_toml="\n".join(lines) + "\n" + extra)


def trainjob(name: str, *, runtime: str = "torch-distributed", nodes: int = 2,
             command: list[str] | None = None, image: str | None = "busybox:1.36",
             cpu: str = "1", backend: str | None = None, managed_by: str = MANAGED_BY,
             pod_labels: dict[str, str] | None = None,
             pod_annotations: dict[str, str] | None = None,
             node_selector: dict[str, str] | None = None,
             suspend: bool | None = None) -> dict[str, Any]:
    """A TrainJob manifest as a user writes it (Trainer v2.3 ``runtimePatches`` for the
    pod labels / node selector: all that Trainer's CRD lets a patch set there)."""
    trainer: dict[str, Any] = {"numNodes": nodes, "command": command or ["torchrun", "t.py"],
                               "resourcesPerNode": {"requests": {"cpu": cpu}}}
    if image is not None:
        trainer["image"] = image
    doc: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"managedBy": managed_by, "runtimeRef": {"name": runtime},
                 "trainer": trainer},
    }
    if backend is not None:
        doc["metadata"]["annotations"] = {"hpc-bridge.io/backend": backend}
    if suspend is not None:
        doc["spec"]["suspend"] = suspend
    pod: dict[str, Any] = {}
    if pod_labels or pod_annotations:
        pod["metadata"] = {"labels": pod_labels or {}, "annotations": pod_annotations or {}}
    if node_selector:
        pod["spec"] = {"nodeSelector": node_selector}
    if pod:
        doc["spec"]["runtimePatches"] = [{"manager": "tests.hpc-bridge.io", "trainingRuntimeSpec": {
            "template": {"spec": {"replicatedJobs": [
                {"name": "node", "template": {"spec": {"template": pod}}}]}}}}]
    return doc


def apply(k8s: K8sBed, namespace: str, *docs: dict[str, Any]) -> None:
    k8s.kubectl("-n", namespace, "apply", "-f", "-",
                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(docs)}),
                timeout=120)


def conditions(k8s: K8sBed, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    obj = k8s.get_json("-n", namespace, TRAINJOBS, name)
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def is_true(conds: dict[str, dict[str, Any]], ctype: str) -> bool:
    return conds.get(ctype, {}).get("status") == "True"


def wait_condition(k8s: K8sBed, namespace: str, name: str, ctype: str, timeout: float,
                   what: str) -> dict[str, Any]:
    """Wait until TrainJob ``name``'s condition ``ctype`` is True and return it, as read
    in that same read (a second read may already see the next status)."""
    seen: dict[str, Any] = {}

    def true() -> bool:
        seen.clear()
        seen.update(conditions(k8s, namespace, name).get(ctype) or {})
        return seen.get("status") == "True"

    k8s.wait_for(true, timeout, what)
    return seen


def events(k8s: K8sBed, namespace: str, name: str) -> list[dict[str, Any]]:
    """The Events on TrainJob ``name``, oldest first (as ``kubectl events`` lists them)."""
    items: list[dict[str, Any]] = k8s.get_json(
        "-n", namespace, "events", "--field-selector",
        f"involvedObject.kind=TrainJob,involvedObject.name={name}").get("items") or []
    return sorted(items, key=lambda e: (e.get("firstTimestamp") or "",
                                        e["metadata"].get("creationTimestamp") or ""))


def event_reasons(k8s: K8sBed, namespace: str, name: str) -> list[str]:
    return [e.get("reason") or "" for e in events(k8s, namespace, name)]


def node_ready(k8s: K8sBed, namespace: str, name: str) -> bool:
    """Whether the TrainJob's jobsStatus shows its job ready (running), as Trainer's
    readers see a running batch job."""
    status = k8s.get_json("-n", namespace, TRAINJOBS, name).get("status") or {}
    return any(j.get("ready") for j in status.get("jobsStatus") or [])


def all_trainjobs(k8s: K8sBed, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = k8s.get_json("-n", namespace, TRAINJOBS).get("items") or []
    return items


def jobsets(k8s: K8sBed, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = k8s.get_json("-n", namespace, JOBSETS).get("items") or []
    return items


def pods(k8s: K8sBed, namespace: str, selector: str = "") -> list[dict[str, Any]]:
    args = ["-n", namespace, "pods"] + (["-l", selector] if selector else [])
    items: list[dict[str, Any]] = k8s.get_json(*args).get("items") or []
    return items
