"""The bridge runs with only the rights of charts/hpc-bridge/files/rbac.yaml: a service
account's token, not the bed's cluster-admin certificate. RBAC is what breaks first in
production; here a missing verb fails the test."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.bed import REPO, Daemon, cleanup
from tests.integration.k8s_bridge import (
    JOBSETS,
    TRAINJOBS,
    all_trainjobs,
    apply,
    conditions,
    is_true,
    jobsets,
    k8s_daemon,
    trainjob,
)
from tests.integration.k8sbed import K8sBed

pytestmark = pytest.mark.integration
RBAC = REPO / "charts" / "hpc-bridge" / "files" / "rbac.yaml"


def install_rbac(k8s: K8sBed, namespace: str, without: str | None = None) -> None:
    """Install rbac.yaml for the service account ``hpc-bridge`` of ``namespace``
    (``without``: leave that resource out of the ClusterRole's rules)."""
    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    for doc in docs:
        if doc["kind"] == "ServiceAccount":
            doc["metadata"]["namespace"] = namespace
        elif doc["kind"] == "ClusterRole":
            doc["metadata"]["name"] = f"hpc-bridge-{namespace}"
            for rule in doc["rules"]:
                rule["resources"] = [r for r in rule["resources"] if r != without]
            doc["rules"] = [r for r in doc["rules"] if r["resources"]]
        elif doc["kind"] == "ClusterRoleBinding":
            doc["metadata"]["name"] = f"hpc-bridge-{namespace}"
            doc["roleRef"]["name"] = f"hpc-bridge-{namespace}"
            doc["subjects"][0]["namespace"] = namespace
    k8s.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": docs}))


def service_account_kubeconfig(k8s: K8sBed, namespace: str, path: Path,
                               account: str = "hpc-bridge") -> None:
    """Write a kubeconfig with a token of the service account ``account``."""
    token = k8s.kubectl("-n", namespace, "create", "token", account,
                        "--duration=1h").stdout.strip()
    admin = yaml.safe_load(Path(k8s.kubeconfig).read_text())
    cluster = admin["clusters"][0]["cluster"]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "bridge",
        "clusters": [{"name": "bed", "cluster": cluster}],
        "users": [{"name": "hpc-bridge", "user": {"token": token}}],
        "contexts": [{"name": "bridge", "context": {"cluster": "bed", "user": "hpc-bridge"}}],
    }))
    path.chmod(0o600)


@pytest.fixture
def bridge(k8s: K8sBed, k8s_namespace: str, tmp_path: Path,
           request: pytest.FixtureRequest) -> Iterator[Daemon]:
    install_rbac(k8s, k8s_namespace, without=getattr(request, "param", None))
    kubeconfig = tmp_path / "sa.kubeconfig"
    service_account_kubeconfig(k8s, k8s_namespace, kubeconfig)
    daemon = k8s_daemon(k8s, k8s_namespace, kubeconfig=str(kubeconfig))
    daemon.start()
    yield daemon
    k8s.kubectl("-n", k8s_namespace, "delete", TRAINJOBS, "--all", "--wait=false", check=False)
    k8s.wait_for(lambda: not all_trainjobs(k8s, k8s_namespace), 60,
                 "the bridge to release its TrainJobs")
    daemon.stop()
    for kind in ("clusterrolebinding", "clusterrole"):
        k8s.kubectl("delete", kind, f"hpc-bridge-{k8s_namespace}", "--ignore-not-found",
                    check=False)
    cleanup(daemon.workdir)


def test_the_shipped_rbac_is_enough_to_run_delete_and_report(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    ns = k8s_namespace
    # torch (a JobSet), MPI (also a hostfile ConfigMap and an SSH Secret), and one to
    # delete while it waits (a foreground delete, the finalizer removed).
    apply(k8s, ns, trainjob("torch-rbac", nodes=2),
          trainjob("mpi-rbac", runtime="mpi-distributed", nodes=2, command=["mpirun", "a"]),
          trainjob("gone-rbac", nodes=1, node_selector={"hpc-bridge.io/no": "such"}))
    for name in ("torch-rbac", "mpi-rbac"):
        k8s.wait_for(lambda n=name: is_true(conditions(k8s, ns, n), "Complete"), 90,
                     f"{name} Complete under the service account")
    hostfile = k8s.get_json("-n", ns, "configmap", "mpi-rbac-mpi-hostfile")
    keys = k8s.get_json("-n", ns, "secret", "mpi-rbac-mpi-ssh-auth")
    assert hostfile["data"]["hostfile"] and keys["type"] == "kubernetes.io/ssh-auth"
    for obj in (hostfile, keys):  # handed to the JobSet: garbage-collected with it
        assert obj["metadata"]["ownerReferences"][0]["name"] == "mpi-rbac"
    k8s.wait_for(lambda: any(j["metadata"]["name"] == "gone-rbac" for j in jobsets(k8s, ns)),
                 60, "the JobSet of gone-rbac")
    k8s.kubectl("-n", ns, "delete", TRAINJOBS, "gone-rbac", "--timeout=90s")
    assert "gone-rbac" not in {j["metadata"]["name"] for j in jobsets(k8s, ns)}
    refused = [line for line in bridge.log.read_text().splitlines()
               if "(403)" in line or "forbidden" in line.lower()]
    assert not refused, "\n".join(refused[:5])
    # The JobSet is owned by its TrainJob (blockOwnerDeletion needed trainjobs/finalizers).
    owner = k8s.get_json("-n", ns, JOBSETS, "torch-rbac")["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "TrainJob" and owner["blockOwnerDeletion"] is True


@pytest.mark.parametrize("bridge", ["secrets"], indirect=True)
def test_a_missing_permission_makes_jobs_wait_not_fail_until_an_admin_grants_it(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    ns = k8s_namespace
    apply(k8s, ns, trainjob("mpi-waits", runtime="mpi-distributed", nodes=2,
                            command=["mpirun", "a"]))

    def waiting() -> bool:
        created = conditions(k8s, ns, "mpi-waits").get("Created", {})
        return created.get("reason") == "BackendUnavailable" and "RBAC" in created.get(
            "message", "")
    k8s.wait_for(waiting, 60, "the TrainJob to wait, saying the bridge's RBAC refused")
    assert not is_true(conditions(k8s, ns, "mpi-waits"), "Failed")
    assert not jobsets(k8s, ns)  # the Secret comes first: no JobSet without its keys

    install_rbac(k8s, ns)  # the admin grants secrets
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, "mpi-waits"), "Complete"), 120,
                 "the TrainJob to run once the permission is there")
