"""Local users on the Kubernetes back end (docs/kubernetes.md, "Identity"): an admin's
set-up of a user's namespace, and submissions as a Unix user over the socket, for
tests/integration/test_k8s_identity.py and test_k8s_rbac.py."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import yaml

from tests.integration.bed import BIN, REPO, Daemon
from tests.integration.k8s_bridge import k8s_daemon
from tests.integration.k8sbed import K8sBed

RBAC = REPO / "charts" / "hpc-bridge" / "files" / "rbac.yaml"
SUBMITTER = "hpc-bridge-job-submitter"
#: Post a TrainJob over the socket with the project's client; print status and message.
SUBMIT = """
import json, sys
from bridge.client import BridgeClient, BridgeClientError
client = BridgeClient(socket_path=sys.argv[1])
try:
    result = client.submit(json.loads(sys.stdin.read()))
    print(json.dumps({"status": 201, "id": result.id}))
except BridgeClientError as exc:
    print(json.dumps({"status": exc.status, "error": exc.message}))
"""


def submit_as(daemon: Daemon, user: str, doc: dict[str, Any]) -> dict[str, Any]:
    """Submit ``doc`` as ``user`` (runuser: SO_PEERCRED says who) → {status, id|error}."""
    proc = subprocess.run(
        ["runuser", "-u", user, "--", "env", "-i", f"PYTHONPATH={REPO}",
         str(BIN / "python"), "-c", SUBMIT, str(daemon.socket)],
        input=json.dumps(doc), capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    answer: dict[str, Any] = json.loads(proc.stdout)
    return answer


def torch_job(name: str, namespace: str | None, nodes: int = 1,
              pod_spec: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "annotations": {"hpc-bridge.io/backend": "kubernetes"}}
    if namespace is not None:
        meta["namespace"] = namespace
    spec: dict[str, Any] = {"runtimeRef": {"name": "torch-distributed"},
                            "trainer": {"numNodes": nodes, "image": "busybox:1.36",
                                        "command": ["torchrun", "t.py"],
                                        "resourcesPerNode": {"requests": {"cpu": "100m"}}}}
    if pod_spec is not None:
        spec["runtimePatches"] = [{"manager": "alice", "trainingRuntimeSpec": {"template": {
            "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
                "template": {"spec": pod_spec}}}}]}}}}]
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": meta, "spec": spec}


def users_namespace(k8s: K8sBed, ns: str) -> None:
    """What an admin sets up for alice: Pod Security restricted enforced on her
    namespace, her service account, the submitter role bound to it, and (for a bridge
    that is not cluster-admin) the right to impersonate accounts of this namespace."""
    k8s.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted",
                "pod-security.kubernetes.io/enforce-version=latest", "--overwrite")
    docs = [d for d in yaml.safe_load_all(RBAC.read_text())
            if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == SUBMITTER]
    k8s.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                     "items": docs}))
    k8s.kubectl("-n", ns, "create", "serviceaccount", "alice")
    k8s.kubectl("-n", ns, "create", "rolebinding", "alice-submits",
                f"--clusterrole={SUBMITTER}", f"--serviceaccount={ns}:alice")


def start_bridge(k8s: K8sBed, ns: str, kubeconfig: str | None = None,
                 **backend: Any) -> Daemon:
    """A started daemon for ``ns`` with these back-end settings (TOML dotted keys)."""
    daemon = k8s_daemon(k8s, ns, kubeconfig=kubeconfig)
    daemon.backend_settings.update(backend)
    daemon.start()
    return daemon


def mapped_bridge(k8s: K8sBed, ns: str) -> Daemon:
    """A started daemon mapping the Unix user alice to ``ns`` as its service account
    ``alice`` (the namespace set up by :func:`users_namespace`)."""
    users_namespace(k8s, ns)
    return start_bridge(k8s, ns, **{"users.alice.namespace": ns,
                                    "users.alice.service_account": "alice"})
