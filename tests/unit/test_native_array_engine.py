"""When an array goes native and how its tasks are stored and named to Slurm
(bridge/engine_native_array.py, bridge/engine_admission.py); the submissions themselves,
crashes included, run on the real Slurm: tests/integration/test_native_arrays.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bridge.arrays import parse
from bridge.engine_admission import task_rows
from bridge.engine_native_array import native_mode, slurm_indexes
from bridge.scheduling import SchedulingOptions
from tests.unit.builders import trainjob

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
