"""k8s_adapter.access / identity / podsecurity: who may run where, as whom, with what.

The privilege checker is property-tested: a pod spec made of what Pod Security
``restricted`` allows passes, and the same spec with any one privilege put anywhere a
pod can hold it is refused naming that field; hardened pods always carry the user's
uid and ``restricted``'s security context whatever the patches said.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.backend import (
    AdmissionDenied,
    BackendRejected,
    BackendUnavailable,
    Owner,
    SubmitRequest,
)
from bridge.model import TrainingRuntime, TrainJob, load_document, load_trainjob
from bridge.runtimes import RuntimeCatalog
from bridge.scheduling import SchedulingOptions
from k8s_adapter.access import ANN_ORIGIN, AccessPolicy, access_policy
from k8s_adapter.identity import Identity
from k8s_adapter.jobset import JobSetOptions, render_jobset
from k8s_adapter.kube import KubeRejected, classify
from k8s_adapter.podsecurity import (
    PRIVILEGES,
    Forbidden,
    check_patches,
    check_template,
    harden,
    privileges_in,
)
from tests.unit.builders import ALICE, BOB

ROOT = Owner(uid=0, gid=0, user="root")
UID = "00000000-0000-4000-8000-000000000001"
SECTION = "backends.kubernetes"
OPTIONS = JobSetOptions()
POLICY = access_policy(SECTION, {"users": {"alice": {"namespace": "team-a",
                                                     "service_account": "alice"}}})


def patch_of(pod_spec: dict[str, Any], rjob: str = "node") -> list[dict[str, Any]]:
    return [{"trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": rjob, "template": {"spec": {"template": {"spec": pod_spec}}}}]}}}}]


def job(namespace: str | None = "team-a", patches: list[dict[str, Any]] | None = None,
        runtime: str = "torch-distributed", nodes: int = 2,
        annotations: dict[str, str] | None = None) -> TrainJob:
    meta: dict[str, Any] = {"name": "train", "uid": UID, "annotations": annotations or {}}
    if namespace is not None:
        meta["namespace"] = namespace
    spec: dict[str, Any] = {"runtimeRef": {"name": runtime},
                            "trainer": {"numNodes": nodes, "image": "busybox:1.36",
                                        "command": ["true"]}}
    if patches is not None:
        spec["runtimePatches"] = patches
    return load_trainjob({"metadata": meta, "spec": spec})


def admit(policy: AccessPolicy, tj: TrainJob, owner: Owner = ALICE,
          origin: str = "api") -> TrainJob:
    policy.admit(tj, RuntimeCatalog().resolve(tj), owner, origin)
    return tj


# -- the attack of issue 11 -----------------------------------------------------------

ATTACK = {"hostPID": True, "hostNetwork": True, "hostIPC": True,
          "securityContext": {"runAsUser": 0},
          "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
          "containers": [{"name": "node", "securityContext": {"privileged": True}}]}


def test_the_privileged_kube_system_attack_is_refused_naming_the_setting() -> None:
    for namespace in ("kube-system", "team-a"):
        with pytest.raises(AdmissionDenied) as err:
            admit(POLICY, job(namespace, patch_of(ATTACK)))
        msg = str(err.value)
        assert "spec.runtimePatches[0]" in msg and f"{SECTION}.allow_privileges" in msg


@pytest.mark.parametrize(("pod_spec", "field"), [
    ({"hostPID": True}, "hostPID"),
    ({"hostNetwork": True}, "hostNetwork"),
    ({"hostIPC": True}, "hostIPC"),
    ({"hostUsers": False}, "hostUsers"),
    ({"securityContext": {"runAsUser": 0}}, "securityContext"),
    ({"serviceAccountName": "admin"}, "serviceAccountName"),
    ({"volumes": [{"name": "r", "hostPath": {"path": "/"}}]}, "volumes[0].hostPath"),
    ({"volumes": [{"name": "n", "nfs": {"server": "x", "path": "/"}}]}, "volumes[0].nfs"),
    ({"containers": [{"name": "node", "securityContext": {"privileged": True}}]},
     "containers[0].securityContext"),
    ({"initContainers": [{"name": "i", "securityContext": {
        "capabilities": {"add": ["SYS_ADMIN"]}}}]}, "initContainers[0].securityContext"),
    ({"containers": [{"name": "node", "ports": [{"containerPort": 80, "hostPort": 80}]}]},
     "containers[0].ports[0].hostPort"),
    ({"ephemeralContainers": [{"name": "e"}]}, "ephemeralContainers"),
])
def test_each_privilege_is_refused_naming_its_field(pod_spec: dict[str, Any],
                                                    field: str) -> None:
    with pytest.raises(Forbidden) as err:
        check_patches(patch_of(pod_spec), (), "S")
    assert f"template.spec.{field}: not allowed" in str(err.value)


@pytest.mark.parametrize(("pod_spec", "field", "privilege"), [
    ({"nodeName": "control-plane"}, "nodeName", "nodeName"),
    ({"priorityClassName": "system-node-critical"}, "priorityClassName",
     "priorityClassName"),
    ({"priority": 2000001000}, "priority", "priorityClassName"),
    ({"schedulerName": "default-scheduler"}, "schedulerName", "schedulerName"),
    ({"runtimeClassName": "unconfined"}, "runtimeClassName", "runtimeClassName"),
    ({"tolerations": [{"operator": "Exists"}]}, "tolerations[0]", "tolerations"),
    ({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"},
                      {"key": "node-role.kubernetes.io/control-plane",
                       "operator": "Exists", "effect": "NoSchedule"}]}, "tolerations[1]",
     "tolerations"),
    ({"tolerations": [{"key": "node.kubernetes.io/unschedulable"}]}, "tolerations[0]",
     "tolerations"),
    ({"tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}]},
     "tolerations[0]", "tolerations"),
    ({"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}},
     "nodeSelector[node-role.kubernetes.io/control-plane]", "nodeName"),
    # A Slurm-backed pool's nodes: only pods of a Slurm allocation (k8s-on-slurm).
    ({"tolerations": [{"key": "hpc-bridge.io/slurm-pool", "operator": "Exists"}]},
     "tolerations[0]", "tolerations"),
    ({"tolerations": [{"key": "hpc-bridge.io/slurm-unavailable", "operator": "Exists"}]},
     "tolerations[0]", "tolerations"),
    ({"nodeSelector": {"slurm.hpc-bridge.io/job-42": "true"}},
     "nodeSelector[slurm.hpc-bridge.io/job-42]", "nodeName"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "node-role.kubernetes.io/master", "operator": "Exists"}]}]}}}},
     "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
     "nodeSelectorTerms[0].matchExpressions[0]", "nodeName"),
    ({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {}, "namespaceSelector": {}, "topologyKey": "kubernetes.io/os"}]}}},
     "affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution",
     "podAffinity"),
])
def test_a_patch_may_not_choose_where_or_before_whom_its_pods_run(
        pod_spec: dict[str, Any], field: str, privilege: str) -> None:
    """Skipping the scheduler, preempting other users' pods, another scheduler or
    runtime, and tolerating the control plane's taints are privileges too."""
    with pytest.raises(Forbidden) as err:
        check_patches(patch_of(pod_spec), (), "S")
    assert f"template.spec.{field}: not allowed" in str(err.value)
    assert privilege in PRIVILEGES
    check_patches(patch_of(pod_spec), (privilege,), "S")  # an admin may allow it


def test_a_gpu_toleration_and_node_selectors_need_no_privilege() -> None:
    check_patches(patch_of({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                             "effect": "NoSchedule"}],
                            "nodeSelector": {"gpu": "a100",
                                             "kubernetes.io/hostname": "node-7"}}), (), "S")
    # The rendered pod carries the back end's own scheduler: not the user's choice.
    check_template({"spec": {"schedulerName": "gang", "tolerations": [{"operator": "Exists"}]}},
                   (), "S")


def test_confinement_annotations_are_a_security_context() -> None:
    patch = [{"trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"metadata": {"annotations": {
            "container.apparmor.security.beta.kubernetes.io/node": "unconfined"}}}}}}]}}}}]
    with pytest.raises(Forbidden, match=r"metadata.annotations\[container.apparmor"):
        check_patches(patch, (), "S")
    check_patches(patch, ("securityContext",), "S")


def test_an_admin_may_allow_a_privilege() -> None:
    policy = access_policy(SECTION, {"users": {"alice": {"namespace": "team-a"}},
                                     "allow_privileges": ["hostNetwork"]})
    admit(policy, job(patches=patch_of({"hostNetwork": True})))
    with pytest.raises(AdmissionDenied, match="hostPID"):
        admit(policy, job(patches=patch_of({"hostNetwork": True, "hostPID": True})))


SAFE_VOLUME = st.sampled_from([{"emptyDir": {}}, {"configMap": {"name": "c"}},
                               {"secret": {"secretName": "s"}}, {"downwardAPI": {}},
                               {"persistentVolumeClaim": {"claimName": "p"}}])
SAFE_POD = st.fixed_dictionaries({
    "containers": st.lists(st.fixed_dictionaries({
        "name": st.text("abc", min_size=1, max_size=4),
        "image": st.just("busybox"),
        "ports": st.lists(st.fixed_dictionaries({"containerPort": st.integers(1, 65535)}),
                          max_size=2)}), max_size=3),
    "volumes": st.lists(SAFE_VOLUME.map(lambda v: {"name": "v", **v}), max_size=3),
    "nodeSelector": st.dictionaries(st.text("xyz", min_size=1), st.text("xyz")),
    "hostNetwork": st.just(False),
})
PRIVILEGE = st.sampled_from([
    ("hostNetwork", lambda p: p.update(hostNetwork=True)),
    ("hostPID", lambda p: p.update(hostPID=True)),
    ("hostIPC", lambda p: p.update(hostIPC=True)),
    ("securityContext", lambda p: p.update(securityContext={"runAsUser": 0})),
    ("hostPath", lambda p: p.setdefault("volumes", []).append(
        {"name": "h", "hostPath": {"path": "/"}})),
    ("securityContext", lambda p: p.setdefault("containers", []).append(
        {"name": "z", "securityContext": {"privileged": True}})),
    ("hostPort", lambda p: p.setdefault("containers", []).append(
        {"name": "z", "ports": [{"containerPort": 1, "hostPort": 1}]})),
])


@settings(max_examples=300)
@given(SAFE_POD, PRIVILEGE)
def test_a_restricted_pod_passes_and_any_added_privilege_is_refused(
        pod: dict[str, Any], privilege: tuple[str, Any]) -> None:
    check_template({"spec": pod}, (), "S")
    name, add = privilege
    bad = copy.deepcopy(pod)
    add(bad)
    assert name in {p for _, p in privileges_in(bad)}
    with pytest.raises(Forbidden, match=name):
        check_template({"spec": bad}, set(PRIVILEGES) - {name}, "S")
    check_template({"spec": bad}, {name}, "S")


@settings(max_examples=200)
@given(SAFE_POD, st.integers(1, 2**31 - 1), st.integers(0, 2**31 - 1))
def test_hardened_pods_run_as_the_user_under_restricted(pod: dict[str, Any], uid: int,
                                                        gid: int) -> None:
    pod = copy.deepcopy(pod)
    pod["securityContext"] = {"runAsUser": 0, "runAsNonRoot": False}
    for ctr in pod["containers"]:
        ctr["securityContext"] = {"privileged": True, "capabilities": {"add": ["ALL"]}}
    harden(pod, uid, gid, keep_user_values=False)
    assert pod["securityContext"] == {"runAsUser": uid, "runAsGroup": gid, "runAsNonRoot": True,
                                      "seccompProfile": {"type": "RuntimeDefault"}}
    for ctr in pod["containers"]:
        assert ctr["securityContext"] == {"allowPrivilegeEscalation": False,
                                          "capabilities": {"drop": ["ALL"]},
                                          "runAsNonRoot": True}


# -- namespaces and identities --------------------------------------------------------

def test_an_unmapped_user_is_refused_naming_the_setting() -> None:
    with pytest.raises(AdmissionDenied) as err:
        admit(POLICY, job(), BOB)
    assert f"{SECTION}.users" in str(err.value) and "'bob'" in str(err.value)
    with pytest.raises(AdmissionDenied):
        admit(access_policy(SECTION, {}), job())  # no mapping at all: default deny


def test_another_namespace_is_refused_and_an_empty_one_is_the_mapped_one() -> None:
    with pytest.raises(AdmissionDenied) as err:
        admit(POLICY, job("kube-system"))
    assert "metadata.namespace" in str(err.value) and f"{SECTION}.users.alice" in str(err.value)
    assert admit(POLICY, job(None)).metadata.namespace == "team-a"
    identity = POLICY.identity_of(job(), ALICE)
    assert identity == Identity("team-a", "alice")
    assert identity.username == "system:serviceaccount:team-a:alice"


def test_groups_map_too() -> None:
    policy = access_policy(SECTION, {"groups": {"root": {"namespace": "ops"}}})
    assert policy.identities.for_user("nobody-here", 4242, 0) == (
        Identity("ops", "default"), f"{SECTION}.groups.root")


def test_root_unmapped_keeps_the_bridges_identity() -> None:
    admit(POLICY, job("kube-system"), ROOT)
    assert POLICY.identity_of(job("kube-system"), ROOT) is None


def test_the_origin_annotation_is_the_cr_doors_alone() -> None:
    forged = job(annotations={ANN_ORIGIN: "kubernetes"})
    with pytest.raises(AdmissionDenied, match=r"hpc-bridge.io/origin"):
        admit(POLICY, forged)
    # The CR door's own jobs: their namespace, no user mapping; privileges still checked.
    admit(POLICY, job("team-b", annotations={ANN_ORIGIN: "kubernetes"}), BOB, "kubernetes")
    with pytest.raises(AdmissionDenied, match="hostPID"):
        admit(POLICY, job("team-b", patch_of({"hostPID": True})), BOB, "kubernetes")


def test_cr_door_jobs_impersonate_their_namespace_account_when_configured() -> None:
    policy = access_policy(SECTION, {"namespace_accounts": {"team-b": "trainjobs"}})
    cr = job("team-b", annotations={ANN_ORIGIN: "kubernetes"})
    assert policy.identity_of(cr, BOB) == Identity("team-b", "trainjobs")
    other = job("team-c", annotations={ANN_ORIGIN: "kubernetes"})
    assert policy.identity_of(other, BOB) is None


def test_multi_node_mpi_of_a_local_user_is_refused_saying_why() -> None:
    with pytest.raises(AdmissionDenied, match="sshd as root"):
        admit(POLICY, job(runtime="mpi-distributed", nodes=2))
    admit(POLICY, job(runtime="mpi-distributed", nodes=1))


def test_a_mapping_removed_after_admission_refuses_the_submit() -> None:
    with pytest.raises(BackendRejected, match=f"{SECTION}.users"):
        access_policy(SECTION, {}).identity_of(job(), ALICE)


@pytest.mark.parametrize("settings_", [
    {"users": {"alice": {"namespace": "Team A"}}},
    {"users": {"alice": {"namespace": "a", "service_account": "x/y"}}},
    {"users": {"alice": "team-a"}},
    {"users": {"alice": {"namespace": "a", "role": "admin"}}},
    {"groups": ["x"]},
    {"namespace_accounts": {"team-a": "Bad_Name"}},
    {"allow_privileges": ["root"]},
    {"allow_privileges": "hostPID"},
])
def test_bad_settings_are_refused_naming_the_key(settings_: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=SECTION):
        access_policy(SECTION, settings_)


# -- the rendered JobSet --------------------------------------------------------------

def render_secured(tj: TrainJob, owner: Owner, policy: AccessPolicy = POLICY,
                   options: JobSetOptions = OPTIONS) -> dict[str, Any]:
    request = SubmitRequest(job_uid=UID, job_id=7, job=tj, plan=RuntimeCatalog().resolve(tj),
                            options=SchedulingOptions(), owner=owner)
    body = render_jobset(request, options)
    policy.secure(body, tj, owner, options.service_account)
    return body


def test_a_local_users_pods_run_as_the_user() -> None:
    body = render_secured(job(patches=patch_of({"nodeSelector": {"a": "b"}})), ALICE)
    pod = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 1001
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_the_admins_service_account_is_not_a_privilege_but_a_users_is() -> None:
    options = JobSetOptions(service_account="runner")
    render_secured(job(), ALICE, options=options)
    with pytest.raises(BackendRejected, match="serviceAccountName"):
        render_secured(job(patches=patch_of({"serviceAccountName": "admin"})), ALICE,
                       options=options)


def test_cr_door_pods_keep_the_images_user() -> None:
    body = render_secured(job("team-b", annotations={ANN_ORIGIN: "kubernetes"}), BOB)
    pod = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert "securityContext" not in pod


# -- the apiserver's refusals ---------------------------------------------------------

class ApiError(Exception):
    """What kubernetes_asyncio raises: an HTTP status and a Status body."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.body = json.dumps({"kind": "Status", "message": message})


def test_a_pod_security_refusal_fails_the_job_other_403s_make_it_wait() -> None:
    psa = classify(ApiError(403, 'pods "x" is forbidden: violates PodSecurity '
                                 '"restricted:latest": host namespaces (hostNetwork=true)'),
                   "create pods (dry run)", "system:serviceaccount:a:alice")
    assert isinstance(psa, KubeRejected) and "hostNetwork=true" in str(psa)
    rbac = classify(ApiError(403, 'jobsets is forbidden: User "system:serviceaccount:a:alice" '
                                  'cannot create resource "jobsets"'),
                    "create JobSet", "system:serviceaccount:a:alice")
    assert isinstance(rbac, BackendUnavailable)
    assert "the RBAC of system:serviceaccount:a:alice" in str(rbac)
    bridge = classify(ApiError(403, 'serviceaccounts "alice" is forbidden: User "x" cannot '
                                    'impersonate resource "serviceaccounts"'),
                      "create JobSet", "system:serviceaccount:a:alice")
    assert isinstance(bridge, BackendUnavailable) and "rbac.yaml" in str(bridge)


def test_cr_door_pods_created_as_the_namespaces_account_get_the_restricted_context() -> None:
    tj = job("team-b", annotations={ANN_ORIGIN: "kubernetes"})
    request = SubmitRequest(job_uid=UID, job_id=7, job=tj, plan=RuntimeCatalog().resolve(tj),
                            options=SchedulingOptions(), owner=BOB)
    body = render_jobset(request, OPTIONS)
    POLICY.secure(body, tj, BOB, impersonated=True)
    pod = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsNonRoot": True,
                                      "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False


@pytest.mark.parametrize(("pod_spec", "privilege"), [
    ({"hostNetwork": True}, "hostNetwork"),
    ({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "hostPath"),
    ({"containers": [{"name": "node", "securityContext": {"privileged": True}}]},
     "securityContext"),
])
@pytest.mark.parametrize("rjob", ["node", "dataset-initializer"])
def test_a_runtime_template_asking_for_a_privilege_is_refused(
        pod_spec: dict[str, Any], privilege: str, rjob: str) -> None:
    """A namespace's TrainingRuntime is written by that namespace's users: what its
    template lays under the bridge's pods (or runs as an initializer step) is checked
    as a patch is, for the trainer's replicated job and for a step alike."""
    step = {"name": "dataset-initializer", "template": {
        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step":
                                "dataset-initializer"}},
        "spec": {"template": {"spec": {"containers": [{"name": "dataset-initializer",
                                                        "image": "busybox"}]}}}}}
    node = {"name": "node", "template": {
        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
        "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "x"}]}}}}}
    pod = (node if rjob == "node" else step)["template"]["spec"]["template"]["spec"]
    for key, value in copy.deepcopy(pod_spec).items():
        if key == "containers":  # the container's own, beside its name and image
            pod["containers"][0].update({k: v for k, v in value[0].items() if k != "name"})
        else:
            pod[key] = value
    runtime = load_document({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        "metadata": {"name": "team-runtime", "namespace": "team-b"},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
                 "template": {"spec": {"replicatedJobs": [step, node]}}}})
    assert isinstance(runtime, TrainingRuntime)
    tj = load_trainjob({"metadata": {"name": "t", "namespace": "team-b", "uid": UID,
                                     "annotations": {ANN_ORIGIN: "kubernetes"}},
                        "spec": {"runtimeRef": {"name": "team-runtime",
                                                "kind": "TrainingRuntime"},
                                 "trainer": {"command": ["true"]}}})
    plan = RuntimeCatalog([runtime]).resolve(tj, "kubernetes")
    request = SubmitRequest(job_uid=UID, job_id=7, job=tj, plan=plan,
                            options=SchedulingOptions(), owner=BOB)
    body = render_jobset(request, OPTIONS)
    with pytest.raises(BackendRejected, match=f"{privilege}.*{SECTION}.allow_privileges") as err:
        POLICY.secure(body, tj, BOB)
    assert f"replicatedJob {rjob!r} (the runtime's template" in str(err.value)


def team_runtime(kind: str, pod_spec: dict[str, Any]) -> Any:
    node = {"name": "node", "template": {
        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
        "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "x"}],
                                       **pod_spec}}}}}
    meta: dict[str, Any] = {"name": "team-runtime"}
    if kind == "TrainingRuntime":
        meta["namespace"] = "team-b"
    return load_document({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind,
                          "metadata": meta,
                          "spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
                                   "template": {"spec": {"replicatedJobs": [node]}}}})


@pytest.mark.parametrize(("pod_spec", "says"), [
    ({"nodeName": "control-plane-1"}, "nodeName"),
    ({"tolerations": [{"operator": "Exists"}]}, "tolerations"),
    ({"priorityClassName": "system-cluster-critical"}, "priorityClassName"),
    ({"volumes": [{"name": "k", "secret": {"secretName": "victim-mpi-ssh-auth"}}]},
     "Secret the bridge makes"),
    ({"containers": [{"name": "node", "image": "x", "env": [{"name": "T", "valueFrom": {
        "secretKeyRef": {"name": "victim-trainer-status", "key": "token"}}}]}]},
     "Secret the bridge makes"),
    ({"containers": [{"name": "node", "image": "x", "envFrom": [
        {"secretRef": {"name": "victim-data-cache-token"}}]}]}, "Secret the bridge makes"),
])
def test_a_namespaced_runtime_template_is_checked_as_a_patch_is(
        pod_spec: dict[str, Any], says: str) -> None:
    """A namespace's users may write its TrainingRuntimes: what a patch may not ask for
    (placement, another job's Secrets), its template may not either. An admin's
    ClusterTrainingRuntime is the admin's word."""
    tj = load_trainjob({"metadata": {"name": "t", "namespace": "team-b", "uid": UID,
                                     "annotations": {ANN_ORIGIN: "kubernetes"}},
                        "spec": {"runtimeRef": {"name": "team-runtime",
                                                "kind": "TrainingRuntime"},
                                 "trainer": {"command": ["true"]}}})
    runtime = team_runtime("TrainingRuntime", pod_spec)
    plan = RuntimeCatalog([runtime]).resolve(tj, "kubernetes")
    with pytest.raises(AdmissionDenied, match=says) as err:
        POLICY.admit(tj, plan, BOB, "kubernetes")
    assert "TrainingRuntime team-b/team-runtime" in str(err.value)
    cluster = team_runtime("ClusterTrainingRuntime", pod_spec)
    tj.spec.runtime_ref.kind = "ClusterTrainingRuntime"
    POLICY.admit(tj, RuntimeCatalog([cluster]).resolve(tj, "kubernetes"), BOB, "kubernetes")


def test_an_initializer_secret_ref_may_not_name_a_bridge_secret() -> None:
    tj = job()
    tj.spec.initializer = {"model": {"storageUri": "hf://a/b",
                                     "secretRef": {"name": "victim-trainer-status"}}}
    plan = RuntimeCatalog().resolve(load_trainjob({
        "metadata": {"name": "t"}, "spec": {"runtimeRef": {"name": "torch-distributed"},
                                            "trainer": {"command": ["x"]}}}))
    with pytest.raises(AdmissionDenied, match=r"spec\.initializer\.model\.secretRef"):
        POLICY.admit(tj, plan, ALICE, "api")
