"""k8s_adapter.kueue and kueue_workloads: Kueue's admission carried into the JobSet, and
why Kueue holds a TrainJob shown on its Suspended condition.

The resume operations are applied with a small RFC 6902 applier below (add, remove,
test: all that :func:`k8s_adapter.kueue.resume_ops` makes) and compared with a JobSet
laid out from scratch with the new decision: what Trainer's controller would write.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.backend import BackendRejected
from bridge.model import TrainJob
from bridge.states import JobState
from bridge.store import Store
from k8s_adapter import kueue
from k8s_adapter.access import access_policy
from k8s_adapter.jobset import (
    JOB_ID_LABEL,
    MANAGED_BY_LABEL,
    TRAINJOB_NAME_LABEL,
    UID_LABEL,
    JobSetOptions,
    render_jobset,
)
from k8s_adapter.kube import KubeRejected
from k8s_adapter.kueue_admission import IDENTITY_LABELS, admitted_body, resume_operations
from k8s_adapter.kueue_workloads import KueueWorkloads, hold_of
from k8s_adapter.status import desired_conditions
from tests.unit import builders
from tests.unit.builders import ALICE, IMAGE
from tests.unit.builders import submit_request as request

OPTS = JobSetOptions()
USER_PATCH = {"manager": "tests.hpc-bridge.io", "trainingRuntimeSpec": {"template": {"spec": {
    "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {
        "metadata": {"labels": {"team": "a"}},
        "spec": {"nodeSelector": {"disk": "ssd"}}}}}}]}}}}


def decision(node_selector: dict[str, str] | None = None,
             tolerations: list[dict[str, Any]] | None = None,
             gates: list[dict[str, Any]] | None = None,
             annotations: dict[str, str] | None = None,
             labels: dict[str, str] | None = None, rjob: str = "node") -> dict[str, Any]:
    """Kueue's runtimePatches entry as its TrainJob integration writes it on admission
    (pkg/controller/jobs/trainjob RunWithPodSetsInfo)."""
    pod: dict[str, Any] = {"metadata": {}, "spec": {}}
    if labels is not None:
        pod["metadata"]["labels"] = labels
    if annotations is not None:
        pod["metadata"]["annotations"] = annotations
    if node_selector is not None:
        pod["spec"]["nodeSelector"] = node_selector
    if tolerations is not None:
        pod["spec"]["tolerations"] = tolerations
    if gates is not None:
        pod["spec"]["schedulingGates"] = gates
    return {"manager": kueue.PATCH_MANAGER, "trainingRuntimeSpec": {"template": {
        "metadata": {"labels": {kueue.QUEUE_LABEL: "q"}},
        "spec": {"replicatedJobs": [{"name": rjob, "template": {"spec": {"template": pod}}}]}}}}


def empty_decision() -> dict[str, Any]:
    """Kueue's entry before admission (its webhook) and after a stop (restored)."""
    return {"manager": kueue.PATCH_MANAGER, "trainingRuntimeSpec": {"template": {
        "metadata": {"labels": {kueue.QUEUE_LABEL: "q"}}, "spec": {}}}}


def job(patches: list[dict[str, Any]], runtime: str = "torch-distributed") -> TrainJob:
    doc = builders.trainjob_doc(runtime, nodes=2, image=IMAGE,
                                command=["torchrun", "train.py"], patches=patches)
    doc["metadata"]["labels"] = {kueue.QUEUE_LABEL: "q"}
    return TrainJob.model_validate(doc)


def laid_out(patches: list[dict[str, Any]], runtime: str = "torch-distributed"
             ) -> dict[str, Any]:
    """The JobSet as the back end lays it out for Kueue: admitted, with its base."""
    body = render_jobset(request(job(patches, runtime)), OPTS)
    kueue.record_base(body, render_jobset(request(job(kueue.without_kueue(patches),
                                                      runtime)), OPTS))
    return body


def apply(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for op in ops:
        *parents, last = op["path"].lstrip("/").split("/")
        target: Any = out
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        key: Any = int(last) if isinstance(target, list) else last
        if op["op"] == "test":
            assert target[key] == op["value"], op
        elif op["op"] == "add":
            target[key] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del target[key]
        else:
            raise AssertionError(op)
    return out


def scheduling(body: dict[str, Any]) -> dict[str, Any]:
    """Each replicated job's pod fields that Kueue's admission sets."""
    out = {}
    for rj in body["spec"]["replicatedJobs"]:
        pod = rj["template"]["spec"]["template"]
        out[rj["name"]] = ({k: (pod.get("metadata") or {}).get(k) for k in kueue.META_FIELDS},
                           {k: pod["spec"].get(k) for k in kueue.SPEC_FIELDS})
    return out


def test_with_admission_puts_the_current_kueue_entry_in_place_of_the_stored_one() -> None:
    old, new = empty_decision(), decision({"rack": "r1"})
    assert kueue.with_admission([USER_PATCH, old], [old, USER_PATCH, new]) == [USER_PATCH, old,
                                                                              new]
    assert kueue.with_admission([old, USER_PATCH], None) == [USER_PATCH]
    assert kueue.without_kueue([old, USER_PATCH, new]) == [USER_PATCH]


def test_managed_means_a_queue_name_label() -> None:
    assert kueue.managed(job([]))
    plain = builders.trainjob("torch-distributed", nodes=2, image=IMAGE,
                              command=["torchrun", "t.py"])
    assert not kueue.managed(plain)


def test_the_first_layout_carries_the_decision_and_records_the_base() -> None:
    gate = {"name": "kueue.x-k8s.io/topology"}
    body = laid_out([USER_PATCH, decision({"rack": "r1"}, gates=[gate],
                                          annotations={"kueue.x-k8s.io/workload": "w"})])
    pod = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert pod["spec"]["nodeSelector"] == {"disk": "ssd", "rack": "r1"}
    assert pod["spec"]["schedulingGates"] == [gate]
    assert pod["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == "w"
    base = json.loads(body["metadata"]["annotations"][kueue.ANN_BASE])
    assert base["node"]["spec.nodeSelector"] == {"disk": "ssd"}
    assert "spec.schedulingGates" not in base["node"]
    assert base["node"]["metadata.labels"]["team"] == "a"


_selectors = st.dictionaries(st.sampled_from(["rack", "block", "zone", "disk"]),
                             st.sampled_from(["a", "b", "c"]), max_size=3)
_tolerations = st.lists(st.fixed_dictionaries({"key": st.sampled_from(["gpu", "spot"]),
                                               "operator": st.just("Exists")}), max_size=2)
_gates = st.lists(st.fixed_dictionaries({"name": st.sampled_from(
    ["kueue.x-k8s.io/topology", "example.com/gate"])}), max_size=1, unique_by=str)
_decisions = st.builds(decision, st.none() | _selectors, st.none() | _tolerations,
                       st.none() | _gates,
                       st.none() | st.dictionaries(st.just("kueue.x-k8s.io/workload"),
                                                   st.just("w1"), max_size=1),
                       st.none() | st.dictionaries(st.just("kueue.x-k8s.io/podset"),
                                                   st.just("node"), max_size=1))


@settings(max_examples=60, deadline=None)
@given(first=_decisions, second=st.none() | _decisions, user=st.booleans(),
       runtime=st.sampled_from(["torch-distributed", "mpi-distributed"]))
def test_a_resume_lays_the_new_decision_over_the_base_as_a_fresh_layout_would(
        first: dict[str, Any], second: dict[str, Any] | None, user: bool,
        runtime: str) -> None:
    """Admitted with ``first``, stopped (Kueue restores its empty entry), admitted again
    with ``second``: the resumed JobSet's pods are scheduled as a JobSet laid out with
    ``second`` from the start would be; nothing of ``first`` is left."""
    users = [USER_PATCH] if user else []
    if runtime == "mpi-distributed":
        first = copy.deepcopy(first)
        first["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["name"] = \
            "launcher"
    body = laid_out([*users, first], runtime)
    now = [*users, second if second is not None else empty_decision()]
    ops = kueue.resume_ops(body, now, IDENTITY_LABELS)
    assert ops is not None
    resumed = apply(body, ops)
    assert scheduling(resumed) == scheduling(render_jobset(request(job(now, runtime)), OPTS))
    # Only the fields a suspended JobSet may change moved.
    for rj_before, rj_after in zip(body["spec"]["replicatedJobs"],
                                   resumed["spec"]["replicatedJobs"], strict=True):
        before = copy.deepcopy(rj_before["template"]["spec"]["template"])
        after = copy.deepcopy(rj_after["template"]["spec"]["template"])
        for t in (before, after):
            for k in kueue.META_FIELDS:
                t.get("metadata", {}).pop(k, None)
            for k in kueue.SPEC_FIELDS:
                t["spec"].pop(k, None)
        assert before == after


def test_an_entry_cannot_rename_the_pods_of_a_job() -> None:
    body = laid_out([empty_decision()])
    hostile = decision(labels={UID_LABEL: "someone-else", MANAGED_BY_LABEL: "x",
                               JOB_ID_LABEL: "1", TRAINJOB_NAME_LABEL: "other", "ok": "1"})
    resumed = apply(body, kueue.resume_ops(body, [hostile], IDENTITY_LABELS) or [])
    labels = resumed["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"][
        "labels"]
    before = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"][
        "labels"]
    assert {k: labels[k] for k in IDENTITY_LABELS} == {k: before[k] for k in IDENTITY_LABELS}
    assert labels["ok"] == "1"


def test_a_resume_checks_each_replicated_job_by_name() -> None:
    body = laid_out([decision({"rack": "r1"})])
    ops = kueue.resume_ops(body, [decision({"rack": "r2"})], IDENTITY_LABELS) or []
    assert {"op": "test", "path": "/spec/replicatedJobs/0/name", "value": "node"} in ops
    renamed = copy.deepcopy(body)
    renamed["spec"]["replicatedJobs"][0]["name"] = "other"
    with pytest.raises(AssertionError):
        apply(renamed, ops)


def test_no_base_no_operations_and_a_bad_one_is_refused() -> None:
    body = render_jobset(request(job([])), OPTS)
    assert kueue.resume_ops(body, [decision()], IDENTITY_LABELS) is None
    body["metadata"]["annotations"][kueue.ANN_BASE] = "[1, 2"
    with pytest.raises(BackendRejected, match=kueue.ANN_BASE):
        kueue.resume_ops(body, [decision()], IDENTITY_LABELS)
    ok = laid_out([decision()])
    bad = decision()
    bad["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"]["spec"]["nodeSelector"] = "rack=r1"
    with pytest.raises(BackendRejected, match="nodeSelector"):
        kueue.resume_ops(ok, [bad], IDENTITY_LABELS)


def test_a_one_node_mpi_job_keeps_only_the_replicated_jobs_it_has() -> None:
    """Trainer's MPI plugin (which Kueue runs) counts ``node`` workers for a one-node job
    whose launcher is the only pod of the bridge's layout: that part is left out."""
    doc = builders.trainjob_doc("mpi-distributed", nodes=1, image=IMAGE, command=["true"])
    doc["metadata"]["labels"] = {kueue.QUEUE_LABEL: "q"}
    both = decision({"rack": "r1"}, rjob="launcher")
    both["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"].append(
        {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": {
            "rack": "r1"}}}}}})
    one = TrainJob.model_validate(doc)
    names = {rj["name"] for rj in render_jobset(request(one), OPTS)["spec"]["replicatedJobs"]}
    assert names == {"launcher"}
    with pytest.raises(BackendRejected, match="names 'node'"):
        render_jobset(request(TrainJob.model_validate({**doc, "spec": {
            **doc["spec"], "runtimePatches": [both]}})), OPTS)
    kept = kueue.only_jobs([both], names)
    body = render_jobset(request(TrainJob.model_validate({**doc, "spec": {
        **doc["spec"], "runtimePatches": kept}})), OPTS)
    assert body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "nodeSelector"] == {"rack": "r1"}


def test_no_patch_sets_the_bridges_own_jobset_labels_or_annotations() -> None:
    """The base a resume trusts (kueue.ANN_BASE) and the bridge's identity are the
    bridge's word: a patch's JobSet metadata under the bridge's prefix is dropped."""
    forged = json.dumps({"node": {"spec.tolerations": [{"operator": "Exists"}]}})
    patch = {"manager": "mallory", "trainingRuntimeSpec": {"template": {"metadata": {
        "annotations": {kueue.ANN_BASE: forged, "hpc-bridge.io/identity": "x/y",
                        "fine": "1"},
        "labels": {"hpc-bridge.io/job-uid": "other", "hpc-bridge.io/x": "1", "ok": "1"}}}}}
    body = render_jobset(request(job([patch])), OPTS)
    meta = body["metadata"]
    assert kueue.ANN_BASE not in meta["annotations"]
    assert "hpc-bridge.io/identity" not in meta["annotations"]
    assert meta["annotations"]["fine"] == "1" and meta["labels"]["ok"] == "1"
    assert meta["labels"][UID_LABEL] != "other" and "hpc-bridge.io/x" not in meta["labels"]
    assert kueue.resume_ops(body, [decision()], IDENTITY_LABELS) is None


@pytest.mark.parametrize("pod", [
    "not a template", {"metadata": "labels"}, {"metadata": {"labels": ["x"]}},
    {"metadata": {"annotations": {"a": 1}}}, {"spec": {"nodeSelector": "rack=r1"}},
    {"spec": {"tolerations": {"key": "gpu"}}}, {"spec": {"schedulingGates": ["gate"]}},
    {"spec": []}])
def test_an_entry_of_the_wrong_shape_is_refused_naming_it(pod: Any) -> None:
    body = laid_out([decision()])
    bad = decision()
    bad["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"] = pod
    with pytest.raises(BackendRejected, match=r"spec\.runtimePatches \(kueue"):
        kueue.resume_ops(body, [bad], IDENTITY_LABELS)
    for broken in ({"trainingRuntimeSpec": "x"}, {"trainingRuntimeSpec": {"template": []}}):
        assert kueue.resume_ops(body, [{"manager": kueue.PATCH_MANAGER, **broken}],
                                IDENTITY_LABELS) is not None


# -- why Kueue holds a job -------------------------------------------------------------

PENDING = {"type": "QuotaReserved", "status": "False", "reason": "Pending",
           "message": "couldn't assign flavors to pod set node: insufficient unused quota "
                      "for cpu in flavor default, 2 more needed"}


def workload(*conditions: dict[str, str], uid: str = "u1", name: str = "w1") -> dict[str, Any]:
    return {"metadata": {"namespace": "team-a", "name": name,
                         "labels": {"kueue.x-k8s.io/job-uid": uid}},
            "status": {"conditions": list(conditions)}}


def test_hold_of_a_workload() -> None:
    assert hold_of(workload(PENDING)) == ("Pending", PENDING["message"])
    assert hold_of(workload()) == ("Pending", "")
    assert hold_of(workload({**PENDING, "status": "True", "reason": "QuotaReserved"})) is None
    assert hold_of(workload(PENDING, {"type": "Finished", "status": "True"})) is None


def test_the_watch_tells_each_change_of_a_hold_once() -> None:
    told: list[str] = []
    w = KueueWorkloads(None, told.append)  # type: ignore[arg-type]
    w._take(workload(PENDING), deleted=False)
    w._take(workload(PENDING), deleted=False)
    assert w.hold("u1", "team-a") == ("Pending", PENDING["message"]) and told == ["u1"]
    assert w.hold("u1", "team-b") is None  # only for a TrainJob of its own namespace
    w._take(workload({**PENDING, "status": "True"}), deleted=False)
    assert w.hold("u1", "team-a") is None and told == ["u1", "u1"]
    w._take(workload(PENDING), deleted=False)
    w._take(workload(PENDING), deleted=True)
    assert w.hold("u1", "team-a") is None and told == ["u1"] * 4


def test_a_replaced_workload_does_not_end_the_hold_of_its_successor() -> None:
    """Kueue replaces a TrainJob's Workload (its pod sets changed): the old one's delete,
    seen after the new one, leaves the new one's hold."""
    w = KueueWorkloads(None, lambda uid: None)  # type: ignore[arg-type]
    w._take(workload(PENDING, name="old"), deleted=False)
    w._take(workload(PENDING, name="new"), deleted=False)
    w._take(workload(PENDING, name="old"), deleted=True)
    assert w.hold("u1", "team-a") == ("Pending", PENDING["message"])
    w._take(workload(PENDING, name="new", uid="u2"), deleted=False)  # relabelled
    assert w.hold("u1", "team-a") is None and w.hold("u2", "team-a") is not None


def test_the_suspended_condition_says_why_kueue_holds_the_job() -> None:
    store = Store.open(":memory:")
    try:
        doc = builders.trainjob_doc("torch-distributed", nodes=2, command=["t"],
                                    suspend=True)
        rec = store.add(TrainJob.model_validate(doc), ALICE, "kubernetes",
                        origin="kubernetes")
        rec = store.transition(rec.id, JobState.SUSPENDED, "Suspended", "spec.suspend")
        plain = desired_conditions(rec)
        assert [(c["type"], c["status"], c["reason"]) for c in plain] == [
            ("Suspended", "True", "Suspended")]
        held = desired_conditions(rec, kueue_hold=("Pending", PENDING["message"]))
        assert [(c["type"], c["status"], c["reason"]) for c in held] == [
            ("Suspended", "True", "Pending")]
        assert held[0]["message"] == f"TrainJob is suspended: Kueue: {PENDING['message']}"
        # Stopped by Kueue while it ran (preempted): held in the back end, same words.
        rec = store.transition(rec.id, JobState.PENDING, "Resumed", "resumed")
        store.update(rec.id, attempts=1)
        rec = store.transition(rec.id, JobState.SUBMITTED, "Submitted", "JobSet created",
                               backend_id="team-a/x")
        rec = store.transition(rec.id, JobState.RUNNING, "Suspended", "suspended")
        assert desired_conditions(rec, kueue_hold=("Preempted", "by a higher priority"))[0][
            "reason"] == "Preempted"
        # An administrator's hold is not Kueue's: its own reason stays.
        admin = store.add(TrainJob.model_validate({**doc, "metadata": {
            **doc["metadata"], "name": "held", "uid": "00000000-0000-4000-8000-00000000a001"}}),
            ALICE,
            "kubernetes", origin="kubernetes")
        admin = store.transition(admin.id, JobState.SUSPENDED, "JobHeldAdmin", "held")
        assert [(c["type"], c["status"], c["reason"]) for c in desired_conditions(
            admin, kueue_hold=("Pending", "x"))] == [("Suspended", "True", "Suspended")]
    finally:
        store.close()


# -- the back end's calls (k8s_adapter/kueue_admission.py) ------------------------------


class FakeApi:
    """The apiserver's objects by (plural, namespace, name), as the client returns them."""

    def __init__(self, objects: dict[tuple[str, str, str], dict[str, Any]]) -> None:
        self.objects = objects

    async def get_namespaced_custom_object(self, group: str, version: str, namespace: str,
                                           plural: str, name: str) -> dict[str, Any]:
        try:
            return copy.deepcopy(self.objects[(plural, namespace, name)])
        except KeyError:
            raise KubeRejected(f"{plural} {name!r} not found", 404) from None


class FakeKube:
    def __init__(self, objects: dict[tuple[str, str, str], dict[str, Any]]) -> None:
        self.custom = FakeApi(objects)

    async def call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await fn(*args, **kwargs)


def cr(patches: list[dict[str, Any]], uid: str = builders.UID) -> dict[str, Any]:
    return {"metadata": {"name": "train", "namespace": "team-a", "uid": uid},
            "spec": {"runtimePatches": patches}}


def render_for(r: Any) -> dict[str, Any]:
    return render_jobset(r, OPTS)


async def test_the_submission_reads_kueues_decision_from_the_apiserver() -> None:
    stored = job([USER_PATCH, empty_decision()])
    now = [USER_PATCH, decision({"rack": "r2"})]
    policy = access_policy("backends.k8s", {})
    kube = FakeKube({("trainjobs", "team-a", "train"): cr(now)})
    body = await admitted_body(kube, policy, request(stored), render_for)  # type: ignore[arg-type]
    assert scheduling(body) == scheduling(render_jobset(request(job(now)), OPTS))
    assert kueue.ANN_BASE in body["metadata"]["annotations"]
    # Made again under the same name, or gone: refused, never laid out.
    kube = FakeKube({("trainjobs", "team-a", "train"): cr(now, uid="someone-else")})
    with pytest.raises(BackendRejected, match="made again"):
        await admitted_body(kube, policy, request(stored), render_for)  # type: ignore[arg-type]
    with pytest.raises(BackendRejected, match="is gone"):
        await admitted_body(FakeKube({}), policy, request(stored), render_for)  # type: ignore[arg-type]
    # Kueue's entry is checked as a user's patch: a reserved toleration is refused.
    tolerant = decision(tolerations=[{"key": "hpc-bridge.io/slurm-pool", "operator": "Exists"}])
    kube = FakeKube({("trainjobs", "team-a", "train"): cr([tolerant])})
    with pytest.raises(BackendRejected, match="allow_privileges"):
        await admitted_body(kube, policy, request(stored), render_for)  # type: ignore[arg-type]


async def test_a_resume_reads_kueues_decision_for_a_jobset_laid_out_for_kueue() -> None:
    body = laid_out([decision({"rack": "r1"})])
    body["metadata"]["ownerReferences"] = [{"apiVersion": "trainer.kubeflow.org/v1alpha1",
                                            "kind": "TrainJob", "name": "train",
                                            "uid": builders.UID}]
    name = body["metadata"]["name"]
    policy = access_policy("backends.k8s", {})
    objects = {("jobsets", "team-a", name): body,
               ("trainjobs", "team-a", "train"): cr([decision({"rack": "r2"})])}
    ops = await resume_operations(FakeKube(objects), policy, "team-a", name)  # type: ignore[arg-type]
    assert ops is not None
    assert apply(body, ops)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"]["nodeSelector"] == {"rack": "r2"}
    # No base (not laid out for Kueue), no JobSet: nothing to add to the resume.
    plain = render_jobset(request(job([])), OPTS)
    assert await resume_operations(FakeKube({("jobsets", "team-a", name): plain}), policy,  # type: ignore[arg-type]
                                   "team-a", name) is None
    assert await resume_operations(FakeKube({}), policy, "team-a", name) is None  # type: ignore[arg-type]
    tolerant = decision(tolerations=[{"operator": "Exists"}])
    objects[("trainjobs", "team-a", "train")] = cr([tolerant])
    with pytest.raises(BackendRejected, match="allow_privileges"):
        await resume_operations(FakeKube(objects), policy, "team-a", name)  # type: ignore[arg-type]
