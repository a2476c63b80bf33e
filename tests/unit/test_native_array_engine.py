"""When an array goes native and how its tasks are stored and named to Slurm
(bridge/engine_native_array.py, bridge/engine_admission.py); the submissions themselves,
crashes included, run on the real Slurm: tests/integration/test_native_arrays.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from bridge.arrays import ANN_NATIVE, array_key, parse
from bridge.engine_admission import prepare, task_rows
from bridge.engine_native_array import check_native_arrays, native_mode, slurm_indexes
from bridge.engine_settings import EngineSettings
from bridge.model import ANN_SCHEDULING
from bridge.runtimes import RuntimeCatalog
from bridge.scheduling import SchedulingOptions
from bridge.store import Store
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
