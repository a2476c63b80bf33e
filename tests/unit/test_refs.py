"""References resolve among the caller's own jobs first; ambiguity is an error."""

from __future__ import annotations

import pytest

from bridge.model import TrainJob, ensure_identity, load_trainjob
from bridge.refs import AmbiguousJob
from bridge.states import JobState
from bridge.store import JobNotFound, Store
from tests.unit.builders import ALICE, BOB


def job(name: str, namespace: str = "default") -> TrainJob:
    return ensure_identity(load_trainjob({
        "kind": "TrainJob", "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runtimeRef": {"name": "plain"}, "trainer": {"command": ["true"]}}}))


def finish(store: Store, job_id: int) -> None:
    store.transition(job_id, JobState.CANCELLED, "Cancelled")


def test_own_jobs_first_then_others_then_ambiguity() -> None:
    store = Store.open(":memory:")
    bobs = store.add(job("train"), BOB, "slurm")
    finish(store, bobs.id)  # bob took the name first; it is free again
    alices = store.add(job("train"), ALICE, "slurm")
    # Each caller gets their own job; bob's newer-or-older job never captures alice's.
    assert store.find("train", caller_uid=ALICE.uid).id == alices.id
    assert store.find("train", caller_uid=BOB.uid).id == bobs.id
    # Someone with no job of that name (root) may not be handed a guess.
    with pytest.raises(AmbiguousJob) as info:
        store.find("train", caller_uid=0)
    assert f"{alices.id} (alice, default/train" in str(info.value)
    assert f"{bobs.id} (bob, default/train" in str(info.value)
    # Numeric ids are global, and a namespace narrows names.
    assert store.find(str(bobs.id), caller_uid=ALICE.uid).id == bobs.id
    with pytest.raises(JobNotFound):
        store.find("train", namespace="other", caller_uid=0)


def test_a_name_that_is_another_jobs_uid_does_not_capture_it() -> None:
    store = Store.open(":memory:")
    alices = store.add(job("train"), ALICE, "slurm")
    bobs = store.add(job(alices.uid), BOB, "slurm")  # bob names his job alice's uid
    assert store.find(alices.uid, caller_uid=ALICE.uid).id == alices.id
    assert store.find(alices.uid, caller_uid=BOB.uid).id == bobs.id
    assert store.find(alices.uid, caller_uid=0).id == alices.id  # the exact uid wins


def test_own_reruns_pick_the_live_one_else_the_newest() -> None:
    store = Store.open(":memory:")
    first = store.add(job("train"), ALICE, "slurm")
    finish(store, first.id)
    second = store.add(job("train"), ALICE, "slurm")
    assert store.find("train", caller_uid=ALICE.uid).id == second.id
    finish(store, second.id)
    store.add(job("train", "team"), ALICE, "slurm")
    # alice's jobs in two namespaces: she must say which.
    with pytest.raises(AmbiguousJob):
        store.find("train", caller_uid=ALICE.uid)
    assert store.find("train", namespace="default", caller_uid=ALICE.uid).id == second.id
