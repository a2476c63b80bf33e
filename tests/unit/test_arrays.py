"""Job arrays (bridge/arrays.py): sbatch's ``--array`` syntax, its normal form, the step
and variables a task is told, and %A/%a pinned for a task (bridge/jobid.py)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.arrays import (
    MAX_ARRAY_SIZE,
    MAX_TEXT,
    THROTTLED,
    ArraySpec,
    ArrayTask,
    array_key,
    expand_listed,
    parse,
    parse_array_key,
    task_env,
    task_uid,
    uid_in_array,
)
from bridge.cli.common import expand_tasks
from bridge.cli.queue_format import LETTERS, NAMES, display_id, fold_pending
from bridge.client_types import JobView
from bridge.jobid import ID_VARIABLE, UID_VARIABLE, identity_env, pin_job_id
from bridge.model import is_job_uid

# --------------------------------------------------------------------------- parse


@pytest.mark.parametrize(("text", "indexes", "limit"), [
    ("0-31%4", tuple(range(32)), 4),
    ("1,3,5", (1, 3, 5), None),
    ("0-15:4", (0, 4, 8, 12), None),
    ("0-16:4", (0, 4, 8, 12, 16), None),
    ("7", (7,), None),
    ("0", (0,), None),
    ("1000", (1000,), None),
    ("0-1000", tuple(range(1001)), None),
    ("5,1,3", (1, 3, 5), None),  # sorted
    ("1,1,1", (1,), None),  # duplicates once
    ("0-5,3-8", tuple(range(9)), None),  # overlaps merged
    ("0-10:5,5", (0, 5, 10), None),
    ("2-2", (2,), None),
    ("3-4:10", (3,), None),  # a step past the end: the first index only
    ("0-3%1", (0, 1, 2, 3), 1),
    ("1,2%999999999", (1, 2), 999_999_999),
    ("0-9%100", tuple(range(10)), 100),  # a throttle over the count is allowed
])
def test_parse_accepts_sbatch_forms(text: str, indexes: tuple[int, ...],
                                    limit: int | None) -> None:
    assert parse(text) == ArraySpec(indexes, limit)


@pytest.mark.parametrize(("text", "words"), [
    ("", "is not an index"),
    ("x", "'x' is not an index"),
    ("1,", "'' is not an index"),
    (",1", "'' is not an index"),
    ("1-", "is not an index"),
    ("-1", "is not an index"),
    ("1:2", "is not an index"),
    (" 1", "is not an index"),
    ("1 ", "is not an index"),
    ("0x1", "is not an index"),
    ("%4", "is not an index"),
    ("5-1", "runs backwards"),
    ("1-4%0", "throttle %0"),
    ("1-4%00", "throttle %0"),
    ("1-4%", "invalid throttle"),
    ("1-4%x", "invalid throttle"),
    ("1-4%-1", "invalid throttle"),
    ("1-4%1%2", "invalid throttle"),
    ("1-4%1234567890", "invalid throttle"),
    ("1-4%\uff14", "invalid throttle"),  # a full-width 4
    ("0-1001", "index 1001 is not below the maximum array size 1001"),
    ("1001", "index 1001"),
    ("1-4:0", "step in '1-4:0' must be at least 1"),
    ("\uff11", "is not an index"),  # a full-width 1
    ("1-\uff14", "is not an index"),
    ("\u0661", "is not an index"),  # an Arabic-Indic 1
    ("\u00b2", "is not an index"),  # a superscript 2
    ("1234567890", "is not an index"),  # more than 9 digits
    ("1" * (MAX_TEXT + 1), f"longer than {MAX_TEXT}"),
])
def test_parse_refuses_what_sbatch_refuses_and_names_it(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        parse(text)


def test_the_maximum_size_is_a_parameter() -> None:
    assert parse("0-9", max_size=10).indexes == tuple(range(10))
    with pytest.raises(ValueError, match="not below the maximum array size 10"):
        parse("0-10", max_size=10)
    with pytest.raises(ValueError, match="maximum array size 5"):
        parse("1,2,5", max_size=5)
    assert MAX_ARRAY_SIZE == 1001


def test_a_step_that_passes_the_maximum_is_still_refused() -> None:
    """The last index written is checked, as sbatch checks it, even if the step would
    not reach it."""
    with pytest.raises(ValueError, match="index 1001"):
        parse("0-1001:2")


# --------------------------------------------------------------------------- normal form


@pytest.mark.parametrize(("spec", "text"), [
    (ArraySpec((7,)), "7"),
    (ArraySpec(tuple(range(32)), 4), "0-31%4"),
    (ArraySpec((1, 3, 5)), "1,3,5"),
    (ArraySpec((0, 4, 8, 12)), "0,4,8,12"),
    (ArraySpec((0, 1, 2, 5, 7, 8)), "0-2,5,7-8"),
    (ArraySpec((0, 1), 1), "0-1%1"),
])
def test_text_is_the_normal_form(spec: ArraySpec, text: str) -> None:
    assert spec.text() == text


_INDEXES = st.sets(st.integers(0, MAX_ARRAY_SIZE - 1), min_size=1, max_size=200)
_LIMITS = st.none() | st.integers(1, 999_999_999)


@given(_INDEXES, _LIMITS)
def test_text_round_trips(indexes: set[int], limit: int | None) -> None:
    spec = ArraySpec(tuple(sorted(indexes)), limit)
    text = spec.text()
    assert parse(text) == spec
    assert parse(text).text() == text  # the normal form is a fixed point
    assert len(text) <= MAX_TEXT


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 60), st.integers(1, 70)),
                min_size=1, max_size=8), _LIMITS)
def test_parse_is_the_set_the_ranges_name(ranges: list[tuple[int, int, int]],
                                          limit: int | None) -> None:
    parts = [f"{a}-{min(a + n, 1000)}:{s}" for a, n, s in ranges]
    text = ",".join(parts) + (f"%{limit}" if limit is not None else "")
    want = sorted({i for a, n, s in ranges for i in range(a, min(a + n, 1000) + 1, s)})
    spec = parse(text)
    assert spec == ArraySpec(tuple(want), limit)
    assert parse(spec.text()) == spec


# --------------------------------------------------------------------------- step, env


@pytest.mark.parametrize(("indexes", "step"), [
    ((7,), 1),
    ((0, 1, 2, 3), 1),
    ((0, 4, 8, 12), 4),
    ((1, 3, 5), 2),
    ((10, 20), 10),
    ((0, 1, 5), 1),  # not evenly spaced
    ((0, 2, 4, 7), 1),
])
def test_step(indexes: tuple[int, ...], step: int) -> None:
    assert ArraySpec(indexes).step == step


def test_step_of_a_parsed_range_with_a_step() -> None:
    assert parse("0-15:4").step == 4
    assert parse("3-4:10").step == 1  # one index


def test_task_env_is_what_slurm_sets() -> None:
    spec = parse("0-15:4%2")
    assert task_env(ArrayTask(17, 8, spec)) == {
        "SLURM_ARRAY_JOB_ID": "17", "SLURM_ARRAY_TASK_ID": "8",
        "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0",
        "SLURM_ARRAY_TASK_MAX": "12", "SLURM_ARRAY_TASK_STEP": "4"}
    one = task_env(ArrayTask(5, 7, parse("7")))
    assert (one["SLURM_ARRAY_TASK_COUNT"], one["SLURM_ARRAY_TASK_MIN"],
            one["SLURM_ARRAY_TASK_MAX"], one["SLURM_ARRAY_TASK_STEP"]) == ("1", "7", "7", "1")
    uneven = task_env(ArrayTask(5, 3, parse("1,3,4")))
    assert uneven["SLURM_ARRAY_TASK_STEP"] == "1"
    assert uneven["SLURM_ARRAY_TASK_COUNT"] == "3"


def test_identity_env_adds_the_array_variables_only_for_a_task() -> None:
    plain = identity_env(42, "u-1")
    assert plain == {ID_VARIABLE: "42", UID_VARIABLE: "u-1"}
    task = identity_env(44, "u-3", ArrayTask(42, 2, parse("0-3")))
    assert task[ID_VARIABLE] == "44"
    assert task["SLURM_ARRAY_JOB_ID"] == "42" and task["SLURM_ARRAY_TASK_ID"] == "2"


def test_throttled_is_squeues_reason() -> None:
    assert THROTTLED == "JobArrayTaskLimit"


# --------------------------------------------------------------------------- %A and %a

_TASK = ArrayTask(40, 3, parse("0-7%2"))


@pytest.mark.parametrize(("pattern", "pinned"), [
    ("slurm-%A_%a.out", "slurm-40_3.out"),
    ("%A", "40"),
    ("%a", "3"),
    ("%4a", "0003"),
    ("%4A-%3a", "0040-003"),
    ("%12a", "0000000003"),  # at most 10 digits, as for %j
    ("%j", "43"),  # the task's own id
    ("%J.%j", "43.43"),
    ("%x-%A-%a-%u", "%x-40-3-%u"),
    ("%%a", "%%a"),
    ("no-pattern", "no-pattern"),
    ("back\\slash-%a", "back\\slash-%a"),
])
def test_pin_with_a_task(pattern: str, pinned: str) -> None:
    assert pin_job_id(pattern, 43, _TASK) == pinned


@pytest.mark.parametrize(("pattern", "pinned"), [
    ("%A_%a", "42_%a"),  # a plain job: %a left for the world
    ("%4a-%j", "%4a-42"),
    ("%A", "42"),
])
def test_pin_a_plain_job_keeps_a_for_the_world(pattern: str, pinned: str) -> None:
    assert pin_job_id(pattern, 42) == pinned


@given(st.integers(1, 10**9), st.integers(0, 1000), st.integers(0, 12))
def test_pin_pads_the_index_as_sbatch_does(array_id: int, index: int, width: int) -> None:
    task = ArrayTask(array_id, index, ArraySpec((index,)))
    w = str(width) if width else ""
    got = pin_job_id(f"o-%{w}A-%{w}a.log", array_id + index, task)
    pad = min(width, 10)
    assert got == f"o-{array_id:0{pad}d}-{index:0{pad}d}.log"


# --------------------------------------------------------------------------- tqueue


def test_display_id_and_the_array_fields() -> None:
    task: JobView = {"id": 44, "arrayJobId": 42, "arrayTaskId": 2}
    task0: JobView = {"id": 42, "arrayJobId": 42, "arrayTaskId": 0}
    plain: JobView = {"id": 7}
    assert display_id(task) == "42_2"
    assert display_id(task0) == "42_0"
    assert display_id(plain) == "7"
    now = datetime.now(UTC)
    assert str(LETTERS["i"].value(task, now)) == "42_2"
    assert str(LETTERS["A"].value(task, now)) == "44"
    assert str(LETTERS["F"].value(task, now)) == "42"
    assert str(LETTERS["K"].value(task, now)) == "2"
    assert str(LETTERS["F"].value(plain, now)) == "7"
    assert str(LETTERS["K"].value(plain, now)) == "N/A"
    assert str(LETTERS["K"].value(task0, now)) == "0"
    assert NAMES["jobarrayid"] is LETTERS["i"]
    assert NAMES["arrayjobid"] is LETTERS["F"] and NAMES["arraytaskid"] is LETTERS["K"]


@pytest.mark.parametrize(("ref", "expected"), [
    ("12_[1-3,7]", ["12_1", "12_2", "12_3", "12_7"]),
    ("12_[0-6:3]", ["12_0", "12_3", "12_6"]),
    ("12_[5]", ["12_5"]),
    ("12", ["12"]), ("12_4", ["12_4"]), ("name", ["name"]),
    ("12_[x]", ["12_[x]"]), ("12_[3-1]", ["12_[3-1]"]), ("12_[1-3:0]", ["12_[1-3:0]"]),
    ("12_[0-999999999]", ["12_[0-999999999]"]),  # past MAX_TASKS: sent as it is
])
def test_tcancel_expands_scancels_task_lists(ref: str, expected: list[str]) -> None:
    assert expand_tasks(ref) == expected


def _task(i: int, state: str = "Pending", reason: str = "JobArrayTaskLimit",
          backend_id: str | None = None) -> JobView:
    return cast(JobView, {"id": 40 + i, "arrayJobId": 40, "arrayTaskId": i,
                          "arrayTasks": "0-9%2", "state": state, "reason": reason,
                          "backendId": backend_id})


def test_tqueue_folds_an_arrays_pending_tasks_as_squeue_does() -> None:
    running = [_task(0, "Running", "Submitted", "7"), _task(1, "Running", "Submitted", "8")]
    waiting = [_task(i) for i in (2, 3, 4, 6, 9)]
    plain = cast(JobView, {"id": 99, "state": "Pending", "reason": "Created"})
    shown = fold_pending([*running, *waiting, plain])
    assert [display_id(j) for j in shown] == ["40_0", "40_1", "40_[2-4,6,9%2]", "99"]
    one = fold_pending([_task(5)])
    assert [display_id(j) for j in one] == ["40_5"]
    # Another reason (a dependency) is another row; a task in its back end is its own.
    mixed = fold_pending([_task(2), _task(3, reason="Dependency"), _task(4),
                          _task(5, backend_id="9")])
    assert [display_id(j) for j in mixed] == ["40_[2,4%2]", "40_3", "40_5"]


# --------------------------------------------------------------------------- task uids

K = "0f3a2b1c-4d5e-4f60-8a7b-9c0d1e2f3a4b"


def test_a_tasks_uid_follows_from_the_first_uid_and_its_index_alone() -> None:
    assert task_uid(K, 7) == task_uid(K, 7)
    assert len({task_uid(K, i) for i in range(1000)}) == 1000
    assert task_uid(K, 7) != task_uid("1f3a2b1c-4d5e-4f60-8a7b-9c0d1e2f3a4b", 7)
    # A uid as the bridge takes any job's (RFC 4122, canonical), never the first one.
    assert is_job_uid(task_uid(K, 7)) and task_uid(K, 7) != K


@given(first=st.integers(0, MAX_ARRAY_SIZE - 1), index=st.integers(0, MAX_ARRAY_SIZE - 1))
def test_an_array_key_names_every_tasks_uid(first: int, index: int) -> None:
    key = array_key(K, first)
    assert parse_array_key(key) == (K, first)
    assert uid_in_array(key, index) == (K if index == first else task_uid(K, index))


@pytest.mark.parametrize("key", [K, "", "+0", f"{K}+", f"{K}+x", f"{K}+-1", f"{K}+\uff11",
                                 f"{K}+1234567890"])
def test_what_is_no_array_key(key: str) -> None:
    assert parse_array_key(key) is None and uid_in_array(key, 0) is None


@pytest.mark.parametrize(("text", "expected"), [
    ("2-9%2", ((2, 3, 4, 5, 6, 7, 8, 9), False)),
    ("1-10:3", ((1, 4, 7, 10), False)),
    ("2,5,8-9%1", ((2, 5, 8, 9), False)),
    ("7", ((7,), False)),
    # Cut at SLURM_BITSTR_LEN: the whole items before the cut only.
    ("2,5,8-9,12,6...%1", ((2, 5, 8, 9, 12), True)),
    ("1...", ((), True)),
])
def test_a_listed_remainder_expands_as_slurm_lists_it(
        text: str, expected: tuple[tuple[int, ...], bool]) -> None:
    assert expand_listed(text, 100) == expected


@pytest.mark.parametrize("text", ["", "x", "5-2", "1-9:0", "0-4000000", "1,,2"])
def test_what_is_no_listed_remainder(text: str) -> None:
    """Not the syntax, or more than the limit: counted before any index is made."""
    assert expand_listed(text, 10_000) is None
