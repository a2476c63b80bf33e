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
    events,
    is_true,
    jobsets,
    k8s_daemon,
    trainjob,
)
from tests.integration.k8s_users import start_bridge, submit_as, torch_job, users_namespace
from tests.integration.k8sbed import K8sBed

pytestmark = pytest.mark.integration
RBAC = REPO / "charts" / "hpc-bridge" / "files" / "rbac.yaml"
ROLES = ("hpc-bridge", "hpc-bridge-impersonate", "hpc-bridge-job-submitter")


def install_rbac(k8s: K8sBed, namespace: str, without: str | None = None) -> None:
    """Install rbac.yaml for the service account ``hpc-bridge`` of ``namespace``
    (``without``: leave that resource out of the ClusterRole's rules)."""
    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    for doc in docs:
        if doc["kind"] == "ServiceAccount":
            doc["metadata"]["namespace"] = namespace
        elif doc["kind"] == "ClusterRole":
            doc["metadata"]["name"] = f"{doc['metadata']['name']}-{namespace}"
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
    k8s.kubectl("delete", "clusterrolebinding", f"hpc-bridge-{k8s_namespace}",
                "--ignore-not-found", check=False)
    for role in ROLES:
        k8s.kubectl("delete", "clusterrole", f"{role}-{k8s_namespace}", "--ignore-not-found",
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
    # Deleted in the foreground: the garbage collector may still be removing its Jobs.
    k8s.wait_for(lambda: "gone-rbac" not in {j["metadata"]["name"] for j in jobsets(k8s, ns)},
                 60, "the JobSet of gone-rbac to be gone")
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
        return any(e.get("reason") == "BackendUnavailable" and e.get("type") == "Warning"
                   and "RBAC" in (e.get("message") or "")
                   for e in events(k8s, ns, "mpi-waits"))
    k8s.wait_for(waiting, 60, "the TrainJob to wait, saying the bridge's RBAC refused")
    assert not is_true(conditions(k8s, ns, "mpi-waits"), "Failed")
    assert not jobsets(k8s, ns)  # the Secret comes first: no JobSet without its keys

    install_rbac(k8s, ns)  # the admin grants secrets
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, "mpi-waits"), "Complete"), 120,
                 "the TrainJob to run once the permission is there")


def test_the_bridge_impersonates_only_where_an_admin_bound_it(
        k8s: K8sBed, k8s_namespace: str, tmp_path: Path) -> None:
    """With rbac.yaml's rights only, alice's job waits (the apiserver's 403 for the
    impersonation) until the admin binds hpc-bridge-impersonate in her namespace."""
    ns = k8s_namespace
    install_rbac(k8s, ns)
    users_namespace(k8s, ns)
    kubeconfig = tmp_path / "sa.kubeconfig"
    service_account_kubeconfig(k8s, ns, kubeconfig)
    daemon = start_bridge(k8s, ns, kubeconfig=str(kubeconfig), **{
        "users.alice.namespace": ns, "users.alice.service_account": "alice"})
    try:
        answer = submit_as(daemon, "alice", torch_job("as-alice", None))
        assert answer["status"] == 201, answer
        k8s.wait_for(lambda: "cannot impersonate" in json.dumps(daemon.job(answer["id"])), 60,
                     "the job to wait: the bridge may not impersonate alice's account yet")
        assert not jobsets(k8s, ns)
        k8s.kubectl("-n", ns, "create", "rolebinding", "bridge-impersonates",
                    f"--clusterrole=hpc-bridge-impersonate-{ns}",
                    f"--serviceaccount={ns}:hpc-bridge")
        done = daemon.wait_state(answer["id"], ["Succeeded", "Failed"], timeout=120)
        assert done["state"] == "Succeeded", done
    finally:
        daemon.stop()
        for role in ROLES:
            k8s.kubectl("delete", "clusterrole", f"{role}-{ns}", "--ignore-not-found",
                        check=False)
        k8s.kubectl("delete", "clusterrolebinding", f"hpc-bridge-{ns}", "--ignore-not-found",
                    check=False)
        cleanup(daemon.workdir)
