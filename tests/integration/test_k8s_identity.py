"""Kubernetes identity (issue 11, part 1), against the real apiserver and a real daemon,
submitted as the Unix user alice over the socket.

The attack: a local user picked the back end, ``metadata.namespace`` and
``spec.runtimePatches``, and the bridge created a privileged, hostPID, hostNetwork,
hostPath ``/``, uid 0 pod in kube-system with its own credentials. Now alice's jobs
go only to the namespace an admin mapped her to, are created impersonating her
service account (so that account's RBAC and the namespace's Pod Security
``restricted`` decide), and her pods run as her uid.
"""

from __future__ import annotations

import json
import pwd
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.bed import BIN, Daemon, cleanup
from tests.integration.k8s_bridge import (
    JOBSETS,
    apply,
    conditions,
    is_true,
    jobsets,
    trainjob,
)
from tests.integration.k8s_users import (
    SUBMITTER,
    mapped_bridge,
    start_bridge,
    submit_as,
    torch_job,
    users_namespace,
)
from tests.integration.k8sbed import K8sBed
from tests.integration.test_k8s_trainjobs import release

pytestmark = pytest.mark.integration
#: The exact attack of issue 11.
ATTACK = {"hostPID": True, "hostNetwork": True,
          "securityContext": {"runAsUser": 0},
          "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
          "containers": [{"name": "node", "securityContext": {"privileged": True},
                          "volumeMounts": [{"name": "host", "mountPath": "/host"}]}]}


@pytest.fixture
def mapped(k8s: K8sBed, k8s_namespace: str) -> Iterator[Daemon]:
    """A daemon mapping alice to ``k8s_namespace`` as its service account ``alice``."""
    daemon = mapped_bridge(k8s, k8s_namespace)
    yield daemon
    daemon.stop()
    cleanup(daemon.workdir)


def test_the_privileged_kube_system_attack_is_refused_and_creates_nothing(
        k8s: K8sBed, mapped: Daemon) -> None:
    before = {j["metadata"]["name"] for j in jobsets(k8s, "kube-system")}
    answer = submit_as(mapped, "alice", torch_job("pwn", "kube-system", pod_spec=ATTACK))
    assert answer["status"] == 403, answer
    assert "backends.kubernetes.allow_privileges" in answer["error"]
    assert "spec.runtimePatches[0]" in answer["error"]
    # Without the patches, kube-system is still not hers.
    answer = submit_as(mapped, "alice", torch_job("pwn2", "kube-system"))
    assert answer["status"] == 403, answer
    assert "metadata.namespace" in answer["error"]
    assert "backends.kubernetes.users.alice" in answer["error"]
    # In her own namespace, each privilege alone is refused, naming its field.
    for field, pod_spec in [("hostPID", {"hostPID": True}),
                            ("hostNetwork", {"hostNetwork": True}),
                            ("volumes[0].hostPath", {"volumes": ATTACK["volumes"]}),
                            ("securityContext", {"securityContext": {"runAsUser": 0}}),
                            ("containers[0].securityContext",
                             {"containers": ATTACK["containers"]}),
                            ("nodeName", {"nodeName": "control-plane"}),
                            ("priorityClassName", {"priorityClassName":
                                                   "system-node-critical"}),
                            ("tolerations[0]", {"tolerations": [{"operator": "Exists"}]})]:
        answer = submit_as(mapped, "alice", torch_job("pwn3", None, pod_spec=pod_spec))
        assert answer["status"] == 403 and f"spec.{field}: not allowed" in answer["error"], (
            field, answer)
    assert mapped.api("GET", "/v1/jobs").json()["items"] == []
    assert {j["metadata"]["name"] for j in jobsets(k8s, "kube-system")} == before


def test_a_user_without_a_mapping_is_refused_naming_the_setting(
        k8s: K8sBed, k8s_namespace: str) -> None:
    daemon = start_bridge(k8s, k8s_namespace)  # no users table: default deny
    try:
        answer = submit_as(daemon, "alice", torch_job("nomap", k8s_namespace))
        assert answer["status"] == 403, answer
        assert "backends.kubernetes.users" in answer["error"] and "'alice'" in answer["error"]
        # tbatch says the same, and fails.
        doc = daemon.workdir / "nomap.yaml"
        doc.write_text(json.dumps(torch_job("nomap", None)))
        res = daemon.cli("alice", "tbatch", "-f", str(doc), cwd=daemon.workdir)
        assert res.returncode != 0 and "backends.kubernetes.users" in res.stderr, res
        assert not jobsets(k8s, k8s_namespace)
    finally:
        daemon.stop()
        cleanup(daemon.workdir)


def test_a_mapped_user_runs_as_her_uid_created_by_her_service_account(
        k8s: K8sBed, k8s_namespace: str, mapped: Daemon) -> None:
    ns = k8s_namespace
    answer = submit_as(mapped, "alice", torch_job("mine", None, nodes=2,
                                                  pod_spec={"nodeSelector": {}}))
    assert answer["status"] == 201, answer
    done = mapped.wait_state(answer["id"], ["Succeeded", "Failed"], timeout=120)
    assert done["state"] == "Succeeded", done
    alice = pwd.getpwnam("alice")
    js = k8s.get_json("-n", ns, JOBSETS, "mine")
    assert js["metadata"]["annotations"]["hpc-bridge.io/identity"] == f"{ns}/alice"
    pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsUser": alice.pw_uid, "runAsGroup": alice.pw_gid,
                                      "runAsNonRoot": True,
                                      "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True}
    # Pod Security restricted admitted the pods (the namespace enforces it).
    labels = k8s.get_json("namespace", ns)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_service_accounts_rbac_decides_not_the_bridges(
        k8s: K8sBed, k8s_namespace: str, mapped: Daemon) -> None:
    ns = k8s_namespace
    k8s.kubectl("-n", ns, "delete", "rolebinding", "alice-submits")
    k8s.wait_for(lambda: k8s.kubectl(
        "-n", ns, "auth", "can-i", "create", JOBSETS, f"--as=system:serviceaccount:{ns}:alice",
        check=False).stdout.strip() == "no", 30, "the apiserver to see the revoked binding")
    answer = submit_as(mapped, "alice", torch_job("norights", None))
    assert answer["status"] == 201, answer

    def refused() -> dict[str, Any] | None:
        job = mapped.job(answer["id"])
        text = json.dumps(job)
        return job if f"system:serviceaccount:{ns}:alice" in text and "forbidden" in text \
            else None
    k8s.wait_for(refused, 60, "the job to wait with the apiserver's 403 for alice's account")
    assert not jobsets(k8s, ns)  # the bridge itself could create it: it did not
    k8s.kubectl("-n", ns, "create", "rolebinding", "alice-submits",
                f"--clusterrole={SUBMITTER}", f"--serviceaccount={ns}:alice")
    done = mapped.wait_state(answer["id"], ["Succeeded", "Failed"], timeout=120)
    assert done["state"] == "Succeeded", done


def test_an_admin_allowed_privilege_is_still_refused_by_pod_security(
        k8s: K8sBed, k8s_namespace: str) -> None:
    ns = k8s_namespace
    users_namespace(k8s, ns)
    daemon = start_bridge(k8s, ns, **{"users.alice.namespace": ns,
                                      "users.alice.service_account": "alice",
                                      "allow_privileges": ["hostNetwork"]})
    try:
        answer = submit_as(daemon, "alice", torch_job("hostnet", None,
                                                      pod_spec={"hostNetwork": True}))
        assert answer["status"] == 201, answer  # the bridge let it through …
        done = daemon.wait_state(answer["id"], ["Failed", "Succeeded"], timeout=60)
        assert done["state"] == "Failed", done  # … the apiserver did not
        text = json.dumps(done)
        assert "violates PodSecurity" in text and "hostNetwork" in text, text
        assert not jobsets(k8s, ns)
    finally:
        daemon.stop()
        cleanup(daemon.workdir)


def test_the_daemon_refuses_a_bad_mapping_at_start(tmp_path: Path) -> None:
    """A malformed table is a configuration error naming the key, not a silent deny."""
    cfg = tmp_path / "bridge.toml"
    cfg.write_text('[backends.kubernetes]\nkind = "kubernetes"\n'
                   '[backends.kubernetes.users]\nalice = "team-a"\n')
    proc = subprocess.run([str(BIN / "hpc-bridge"), "check-config", "--config", str(cfg)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode != 0
    assert "backends.kubernetes.users.alice" in proc.stdout + proc.stderr


def test_trainjob_crs_run_as_their_namespaces_account_when_one_is_configured(
        k8s: K8sBed, k8s_namespace: str) -> None:
    """The CR door: ``namespace_accounts`` makes the bridge impersonate the namespace's
    account for its TrainJobs, so the namespace's rights (RBAC, Pod Security) apply;
    runtimePatches privileges are refused there too."""
    ns = k8s_namespace
    users_namespace(k8s, ns)  # restricted, and the account "alice" may submit
    daemon = start_bridge(k8s, ns, **{f"namespace_accounts.{ns}": "alice"})
    try:
        pwn = trainjob("cr-pwn", nodes=1)
        pwn["spec"]["runtimePatches"] = torch_job("x", None, pod_spec={"volumes": [
            {"name": "host", "hostPath": {"path": "/"}}]})[
            "spec"]["runtimePatches"]
        apply(k8s, ns, trainjob("cr-job", nodes=1), pwn)
        k8s.wait_for(lambda: is_true(conditions(k8s, ns, "cr-job"), "Complete"), 90,
                     "the TrainJob to complete as the namespace's account")
        js = k8s.get_json("-n", ns, JOBSETS, "cr-job")
        assert js["metadata"]["annotations"]["hpc-bridge.io/identity"] == f"{ns}/alice"
        k8s.wait_for(lambda: is_true(conditions(k8s, ns, "cr-pwn"), "Failed"), 60,
                     "the privileged TrainJob to be refused")
        assert "hostPath" in conditions(k8s, ns, "cr-pwn")["Failed"]["message"]
        assert "cr-pwn" not in {j["metadata"]["name"] for j in jobsets(k8s, ns)}
    finally:
        release(k8s, ns, daemon)


def test_pod_spec_overrides_reach_alices_pods_and_cannot_add_privileges(
        k8s: K8sBed, k8s_namespace: str, mapped: Daemon) -> None:
    """Trainer's ``podSpecOverrides`` (v2.0 documents; the bed's upstream v2.3 CRD has
    only ``runtimePatches``, so through the API as alice) land in her pods, checked as
    runtime patches are."""
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    good = torch_job("overridden", None)
    good["spec"]["podSpecOverrides"] = [{
        "targetJobs": [{"name": "node"}], "tolerations": [gpu],
        "volumes": [{"name": "scratch", "emptyDir": {}}],
        "containers": [{"name": "node", "env": [{"name": "FROM_OVERRIDE", "value": "1"}],
                        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}]}]
    answer = submit_as(mapped, "alice", good)
    assert answer["status"] == 201, answer
    k8s.wait_for(lambda: any(j["metadata"]["name"] == "overridden"
                             for j in jobsets(k8s, k8s_namespace)), 60, "the JobSet")
    pod = k8s.get_json("-n", k8s_namespace, JOBSETS, "overridden")["spec"][
        "replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert gpu in pod["tolerations"], pod
    assert {"name": "scratch", "emptyDir": {}} in pod["volumes"]
    (container,) = pod["containers"]
    assert {"name": "FROM_OVERRIDE", "value": "1"} in container["env"]
    assert {"name": "scratch", "mountPath": "/scratch"} in container["volumeMounts"]
    bad = torch_job("everywhere", None)
    bad["spec"]["podSpecOverrides"] = [{"targetJobs": [{"name": "node"}],
                                        "tolerations": [{"operator": "Exists"}]}]
    answer = submit_as(mapped, "alice", bad)
    assert answer["status"] == 403, answer
    assert "spec.podSpecOverrides[0]" in answer["error"] and "tolerations[0]" in answer[
        "error"], answer
    unknown = torch_job("unknown", None)
    unknown["spec"]["podSpecOverrides"] = [{"targetJobs": [{"name": "node"}],
                                            "hostNetwork": True}]
    answer = submit_as(mapped, "alice", unknown)
    assert answer["status"] == 400 and "hostNetwork: not a field" in answer["error"], answer
