"""A native Slurm array's records read as the bridge's tasks (slurm_adapter/records.py:
``jobs_from_slurm``), in the v0.0.38 shape (squeue --json and slurmrestd of 22.05)
and the v0.0.40+ one; tests/integration/test_slurm_native_arrays.py reads real arrays
on every release of the beds."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.arrays import array_key, task_uid, uid_in_array
from bridge.backend import BackendJob, BackendState
from slurm_adapter.dialects import V0_0_38, V0_0_44, Dialect
from slurm_adapter.listing import JobFields, ListingConverter
from slurm_adapter.records import (
    MAX_REMAINDER,
    NO_TASK,
    convert_listing,
    cut_lists,
    jobs_from_slurm,
)

K = "0f3a2b1c-4d5e-4f60-8a7b-9c0d1e2f3a4b"
KEY = array_key(K, 2)


def number(value: int | None, dialect: Dialect) -> Any:
    if dialect is V0_0_38:
        return value
    return {"set": value is not None, "infinite": False, "number": value or 0}


def record(dialect: Dialect, *, job_id: int, task: int | None, listed: str = "",
           state: str = "PENDING", reason: str = "JobArrayTaskLimit", array: int = 500,
           comment: str = f"hpc-bridge:{KEY} my note") -> dict[str, Any]:
    return {"job_id": job_id, "array_job_id": number(array, dialect),
            "array_task_id": number(task, dialect), "array_task_string": listed,
            "comment": comment, "job_state": state if dialect is V0_0_38 else [state],
            "state_reason": reason, "user_id": 1001, "user_name": "alice",
            "partition": "debug", "name": "wrap", "current_working_directory": "/tmp"}


def jobs_from_slurm_(raw: dict[str, Any], dialect: Dialect) -> tuple[BackendJob, ...]:
    """As a back end with ``native_arrays`` reads the record."""
    return jobs_from_slurm(raw, dialect, arrays=True)


DIALECTS = pytest.mark.parametrize("dialect", [V0_0_38, V0_0_44], ids=lambda d: d.version)


@DIALECTS
def test_a_split_task_is_one_job_with_its_own_id_and_uid(dialect: Dialect) -> None:
    (first,) = jobs_from_slurm_(record(dialect, job_id=501, task=2, state="RUNNING",
                                      reason="None"), dialect)
    assert (first.backend_id, first.job_uid, first.state) == ("500_2", K,
                                                              BackendState.RUNNING)
    assert first.note == "my note" and first.owner_uid == 1001
    (other,) = jobs_from_slurm_(record(dialect, job_id=502, task=9), dialect)
    assert (other.backend_id, other.job_uid) == ("500_9", task_uid(K, 9))


@DIALECTS
def test_the_pending_remainder_is_one_pending_job_per_listed_task(dialect: Dialect) -> None:
    jobs = jobs_from_slurm_(record(dialect, job_id=500, task=None, listed="7,9-11%1"),
                           dialect)
    assert [j.backend_id for j in jobs] == ["500_7", "500_9", "500_10", "500_11"]
    assert [j.job_uid for j in jobs] == [uid_in_array(KEY, i) for i in (7, 9, 10, 11)]
    assert {(j.state, j.reason) for j in jobs} == {(BackendState.PENDING,
                                                    "JobArrayTaskLimit")}


@DIALECTS
def test_what_no_array_of_the_bridges_is(dialect: Dialect) -> None:
    """An array's key on a job of no array, a list longer than any of the bridge's
    arrays (a forged key), and a record that lists no pending task: no job."""
    assert jobs_from_slurm_(record(dialect, job_id=7, task=None, array=0, listed="1-3"),
                           dialect) == ()
    assert jobs_from_slurm_(record(dialect, job_id=500, task=None,
                                  listed=f"0-{MAX_REMAINDER}"), dialect) == ()
    assert jobs_from_slurm_(record(dialect, job_id=500, task=None, listed="",
                                  state="CANCELLED"), dialect) == ()


def test_a_plain_job_is_read_as_before() -> None:
    (job,) = jobs_from_slurm_(record(V0_0_38, job_id=42, task=None, array=0,
                                    comment=f"hpc-bridge:{K}"), V0_0_38)
    assert (job.backend_id, job.job_uid) == ("42", K)


def test_tasks_of_one_array_are_kept_apart_in_a_listing() -> None:
    """Each task has a uid of its own: none is folded into another (pick_jobs keeps
    one job per uid and owner)."""
    raw = [record(V0_0_38, job_id=501, task=2, state="RUNNING", reason="None"),
           record(V0_0_38, job_id=500, task=None, listed="3-5%1")]
    jobs, owners = convert_listing(raw, V0_0_38, jobs_from_slurm_)
    assert [j.backend_id for j in jobs] == ["500_2", "500_3", "500_4", "500_5"]
    assert owners == {j.backend_id: 1001 for j in jobs}


def test_an_unchanged_remainder_converts_to_the_same_job_objects() -> None:
    """The listing converter's fast path (slurm_adapter/listing.py) holds for a
    remainder's tasks: the engine then compares them by identity."""
    raw = [JobFields(**record(V0_0_38, job_id=500, task=None, listed="3-5%1"))]
    converter = ListingConverter(arrays=True)
    first, _ = converter.convert(raw, V0_0_38)
    again, _ = converter.convert(
        [JobFields(**record(V0_0_38, job_id=500, task=None, listed="3-5%1"))], V0_0_38)
    assert len(first) == 3 and all(a is b for a, b in zip(first, again, strict=True))
    assert all(isinstance(j, BackendJob) for j in first)


def test_without_native_arrays_a_record_keyed_as_an_arrays_is_nobodys() -> None:
    """A back end that submits no native arrays made no such record: a user's own array
    with a forged key cannot make it read one record as many jobs."""
    for raw in (record(V0_0_38, job_id=500, task=None, listed="0-1000"),
                record(V0_0_38, job_id=501, task=2, state="RUNNING", reason="None")):
        assert jobs_from_slurm(raw, V0_0_38) == ()
    assert convert_listing([record(V0_0_38, job_id=500, task=None, listed="0-1000")],
                           V0_0_38) == ([], {})


def test_a_list_cut_short_gives_the_tasks_before_the_cut_and_a_marker() -> None:
    jobs = jobs_from_slurm_(record(V0_0_38, job_id=500, task=None, listed="3,5,8,1..."),
                            V0_0_38)
    kept, cut = cut_lists(list(jobs))
    assert cut and [j.backend_id for j in kept] == ["500_3", "500_5", "500_8"]
    whole = list(jobs_from_slurm_(record(V0_0_38, job_id=500, task=None, listed="3,5"),
                                  V0_0_38))
    assert cut_lists(whole) == (whole, False) and cut_lists(whole)[0] is whole


@DIALECTS
def test_a_pending_tasks_output_path_names_its_own_index(dialect: Dialect) -> None:
    raw = {**record(dialect, job_id=500, task=None, listed="3,5"),
           "standard_output": "/tmp/o-%A_%a.out"}
    assert [j.stdout_path for j in jobs_from_slurm_(raw, dialect)] == [
        "/tmp/o-500_3.out", "/tmp/o-500_5.out"]


def test_slurms_no_value_for_a_task_index_is_the_remainder() -> None:
    (job,) = jobs_from_slurm_(record(V0_0_38, job_id=500, task=NO_TASK, listed="4"),
                              V0_0_38)
    assert job.backend_id == "500_4"
