"""bridge.backend.merge_changes: consecutive change batches as one, each job's last
report kept (property-tested against applying the batches one by one)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.backend import BackendJob, BackendState, StatusBatch, merge_changes

STATES = list(BackendState)


def report(uid: str, where: str, state: BackendState) -> BackendJob:
    return BackendJob(backend_id=f"ns/{where}", job_uid=uid, state=state)


reports = st.builds(report, st.sampled_from(["u1", "u2", "u3"]),
                    st.sampled_from(["js-1", "js-2"]), st.sampled_from(STATES))
batches = st.lists(st.builds(lambda jobs, at: StatusBatch(tuple(jobs), False, at),
                             st.lists(reports, max_size=4),
                             st.floats(0, 1e9, allow_nan=False)), min_size=1, max_size=6)


@given(batches)
def test_the_merge_ends_where_applying_one_by_one_ends(given_batches: list[StatusBatch]
                                                       ) -> None:
    one_by_one: dict[tuple[str, str], BackendJob] = {}
    for batch in given_batches:
        for job in batch.jobs:
            one_by_one[(job.job_uid, job.backend_id)] = job
    merged = merge_changes(given_batches)
    assert not merged.complete
    assert {(j.job_uid, j.backend_id): j for j in merged.jobs} == one_by_one
    assert len(merged.jobs) == len(one_by_one)  # one report a JobSet
    assert merged.at == max(b.at for b in given_batches)


def test_first_seen_order_and_two_jobsets_of_one_job_both_kept() -> None:
    a1, b1 = report("a", "js-a", BackendState.PENDING), report("b", "js-b", BackendState.RUNNING)
    a2 = report("a", "js-a", BackendState.RUNNING)
    other = report("a", "js-a2", BackendState.PENDING)  # the same uid elsewhere
    merged = merge_changes([StatusBatch((a1, b1), False, 1.0),
                            StatusBatch((a2, other), False, 2.0)])
    assert merged.jobs == (a2, b1, other)


def test_a_listing_is_never_merged() -> None:
    with pytest.raises(ValueError, match="change batches only"):
        merge_changes([StatusBatch((), True, 1.0)])
