"""When an array goes native and how its tasks are stored and named to Slurm
(bridge/engine_native_array.py, bridge/engine_admission.py); the submissions themselves,
crashes included, run on the real Slurm: tests/integration/test_native_arrays.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from bridge.arrays import ANN_NATIVE, THROTTLED, array_key, parse
from bridge.engine_admission import prepare, task_rows
from bridge.engine_array import ArrayThrottle
from bridge.engine_native_array import check_native_arrays, native_mode, slurm_indexes
from bridge.engine_settings import EngineSettings
from bridge.model import ANN_SCHEDULING
from bridge.runtimes import RuntimeCatalog
from bridge.scheduling import SchedulingOptions
from bridge.states import JobState
from bridge.store import Store
from bridge.store_arrays import NOT_DUE
from tests.unit.builders import ALICE, trainjob

NATIVE_BACKEND = SimpleNamespace(native_arrays=True)


@pytest.mark.parametrize(("backend", "options", "placement", "native"), [
    (NATIVE_BACKEND, {}, "constraints", True),
    (NATIVE_BACKEND, {"output": "o-%A_%a", "dependency": "afterok:3"}, "none", True),
    (SimpleNamespace(native_arrays=False), {}, "constraints", False),
    (object(), {}, "constraints", False),  # a back end without the setting
    (NATIVE_BACKEND, {"output": "o-%j"}, "constraints", False),  # each task's own id
    (NATIVE_BACKEND, {"error": "e-%4J"}, "constraints", False),
    (NATIVE_BACKEND, {"dependency": "aftercorr:3"}, "constraints", False),  # per task
    (NATIVE_BACKEND, {"dependency": "singleton"}, "constraints", False),
    (NATIVE_BACKEND, {}, "nodelist", False),  # hosts pinned per job
])
def test_when_an_array_goes_native(backend: object, options: dict[str, str], placement: str,
                                   native: bool) -> None:
    assert native_mode(backend, SchedulingOptions(**options), placement) is native


def test_a_native_arrays_tasks_are_all_due_slurm_throttles_them() -> None:
    document = trainjob(command=["true"]).to_dict()
    spec = parse("0-5%2")
    assert [r.waiting for r in task_rows(document, spec)] == [None, None] + [
        "JobArrayTaskLimit"] * 4
    assert [r.waiting for r in task_rows(document, spec, native=True)] == [None] * 6


@pytest.mark.parametrize(("indexes", "text"), [
    ([1, 3, 5, 7], "1-7:2"),  # Slurm tells the tasks SLURM_ARRAY_TASK_STEP from it
    ([0, 1, 2, 5], "0-2,5"), ([4], "4"), ([2, 3], "2-3"), ([0, 10], "0-10:10"),
])
def test_the_indexes_as_slurm_is_given_them(indexes: list[int], text: str) -> None:
    assert slurm_indexes(indexes) == text


def test_a_clients_own_native_annotation_is_dropped_and_the_summary_keeps_the_bridges(
        tmp_path: Path) -> None:
    """The mark is the bridge's (admission drops a client's, as it drops the adopt-only
    one); a rewrite of the document (a hold, a release) keeps it in the summary."""
    job = trainjob(command=["true"], annotations={
        ANN_NATIVE: "forged", ANN_SCHEDULING: json.dumps({"array": "0-3%2"})})
    plain = prepare(job, ALICE, "api", backends={"slurm": SimpleNamespace()},
                    catalog=RuntimeCatalog(), settings=EngineSettings(default_backend="slurm"))
    assert ANN_NATIVE not in plain.job.metadata.annotations
    assert "arrayMode" not in plain.summary and plain.tasks[2].waiting == "JobArrayTaskLimit"
    native = prepare(trainjob(command=["true"], annotations={
        ANN_SCHEDULING: json.dumps({"array": "0-3%2"})}), ALICE, "api",
        backends={"slurm": NATIVE_BACKEND}, catalog=RuntimeCatalog(),
        settings=EngineSettings(default_backend="slurm"))
    key = array_key(native.job.metadata.uid or "", 0)
    assert (native.summary["arrayMode"], native.summary["arrayKey"]) == ("native", key)
    assert [t.waiting for t in native.tasks] == [None] * 4
    store = Store.open(tmp_path / "s.sqlite")
    head = store.add(native.job, ALICE, "slurm", summary=native.summary,
                     tasks=native.tasks)
    task = store.get(head.id + 1)
    store.save_document(task.id, task.job)  # what a hold or release writes
    assert store.get(task.id).summary["arrayKey"] == key
    assert store.native_unfinished("slurm") == 4


def test_turning_native_arrays_off_with_tasks_unfinished_stops_the_start(
        tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite")
    native = prepare(trainjob(command=["true"], annotations={
        ANN_SCHEDULING: json.dumps({"array": "0-1"})}), ALICE, "api",
        backends={"slurm": NATIVE_BACKEND}, catalog=RuntimeCatalog(),
        settings=EngineSettings(default_backend="slurm"))
    store.add(native.job, ALICE, "slurm", summary=native.summary, tasks=native.tasks)
    check_native_arrays(store, {"slurm": NATIVE_BACKEND})
    with pytest.raises(ValueError, match=r"backends\.slurm\.native_arrays is off, but 2 tasks"):
        check_native_arrays(store, {"slurm": SimpleNamespace(native_arrays=False)})


def test_a_parked_part_of_a_native_array_is_made_due_whole_when_a_place_frees(
        tmp_path: Path) -> None:
    """A later part of a native array with no place under its ``%2`` waits not due (no
    pass reads it) and, once a task of the array in Slurm ends, is made due whole: it
    goes as one native array with the place left (Slurm throttles it), where the
    one-job path frees one task per place."""
    store = Store.open(tmp_path / "s.sqlite")
    prepared = prepare(trainjob(command=["true"], annotations={
        ANN_SCHEDULING: json.dumps({"array": "0-5%2"})}), ALICE, "api",
        backends={"slurm": NATIVE_BACKEND}, catalog=RuntimeCatalog(),
        settings=EngineSettings(default_backend="slurm"))
    head = store.add(prepared.job, ALICE, "slurm", summary=prepared.summary,
                     tasks=prepared.tasks)
    ids = store.array_task_ids(head.id)
    for job_id in ids[:2]:
        store.transition(job_id, JobState.SUBMITTED, "Submitted", "", backend_id="7")
    throttle = ArrayThrottle(store)
    throttle.park(store.by_ids(ids[2:]), 2, 100.0)
    parked = store.by_ids(ids[2:])
    assert {(r.reason, r.next_attempt_at) for r in parked} == {(THROTTLED, NOT_DUE)}
    throttle.changed({ids[0]}, 101.0)  # the first look is the restart sweep: still full
    assert all(r.next_attempt_at == NOT_DUE for r in store.by_ids(ids[2:]))
    store.transition(ids[0], JobState.SUCCEEDED, "Completed", "")
    throttle.changed({ids[0]}, 102.0)
    assert [r.id for r in store.by_ids(ids[2:]) if r.next_attempt_at == 102.0] == ids[2:]
