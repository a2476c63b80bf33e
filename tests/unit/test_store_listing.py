"""Light listings: summaries beside documents, documents read on first use, pages."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.job_summary import job_summary
from bridge.model import TrainJob
from bridge.states import JobState
from bridge.store import Store
from tests.unit.builders import ALICE, BOB, new_trainjob
from tests.unit.test_array_store import add_array


def job(name: str = "", nodes: int | None = 2, scheduling: dict[str, object] | None = None,
        ) -> TrainJob:
    return new_trainjob(name, nodes=nodes, scheduling=scheduling)


def test_summary_holds_what_a_listing_shows(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite")
    rec = store.add(job("a", 3, {"job_name": "train", "partition": "gpu",
                                 "time_limit_minutes": 30}), ALICE, "slurm")
    assert rec.summary == {"jobName": "train", "partition": "gpu", "timeLimitMinutes": 30,
                           "runtime": "plain", "numNodes": 3, "suspend": False}
    assert store.add(job("b", None), ALICE, "slurm").summary["numNodes"] == 1
    bad = store.add(job("c", 1, {"partition": 7}), ALICE, "slurm")  # invalid options
    assert bad.summary["partition"] is None and bad.summary["jobName"] is None


def test_listed_records_read_their_document_on_first_use(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite")
    original = job("lazy")
    rec = store.add(original, ALICE, "slurm")
    [listed] = store.list_jobs()
    assert listed.document is None and "job" not in vars(listed)
    assert listed.job.to_dict() == original.to_dict()
    assert listed.job is listed.job
    # spec.suspend changes the summary with the document.
    listed.job.spec.suspend = True
    store.save_document(rec.id, listed.job)
    assert store.get(rec.id).suspend_requested is True
    assert store.find("lazy").job.spec.suspend is True


def test_an_older_database_gets_its_summaries(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    store = Store.open(path)
    j = job("old", 4)
    rec = store.add(j, ALICE, "slurm")
    store.close()
    conn = sqlite3.connect(path)  # as schema version 3 left it: no summary column
    conn.execute("ALTER TABLE jobs DROP COLUMN summary")
    conn.commit()
    conn.close()
    again = Store.open(path)
    assert again.get(rec.id).summary == job_summary(j)


def test_count_active_counts_unfinished_jobs_of_one_user(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite")
    recs = [store.add(job(), BOB, "slurm") for _ in range(4)]
    store.add(job(), ALICE, "slurm")
    store.transition(recs[0].id, JobState.CANCELLED, "Cancelled")
    store.transition(recs[1].id, JobState.SUSPENDED, "Suspended")
    assert store.count_active(BOB.uid) == 3
    assert store.count_active(ALICE.uid) == 1
    assert store.count_active(4242) == 0
    # Counted only as far as asked (the per-user limit's check needs no more).
    assert [store.count_active(BOB.uid, n) for n in (0, 1, 2, 3, 4)] == [0, 1, 2, 3, 3]


@settings(max_examples=40, deadline=None)
@given(owners=st.lists(st.booleans(), min_size=0, max_size=40),
       page=st.integers(1, 7), finished=st.sets(st.integers(0, 39)))
def test_pages_return_every_matching_job_once_in_order(
        owners: list[bool], page: int, finished: set[int]) -> None:
    store = Store.open(":memory:")
    ids = []
    for i, is_bob in enumerate(owners):
        rec = store.add(job(), BOB if is_bob else ALICE, "slurm")
        if i in finished:
            store.transition(rec.id, JobState.CANCELLED, "Cancelled")
        ids.append((rec.id, is_bob, i in finished))
    active = [JobState.PENDING]
    seen: list[int] = []
    after = None
    while True:
        rows = store.list_jobs(active, user="bob", after_id=after, limit=page)
        seen += [r.id for r in rows]
        if len(rows) < page:
            break
        after = rows[-1].id
    assert seen == [i for i, is_bob, done in ids if is_bob and not done]


def test_the_reconcile_filters_read_only_what_is_due_or_asked(tmp_path: Path) -> None:
    """A pass reads the pending jobs due now and the active jobs with a cancel to send,
    not every job the daemon tracks."""
    store = Store.open(tmp_path / "s.sqlite")
    due = store.add(job("due"), ALICE, "slurm")
    later = store.add(job("later"), ALICE, "slurm")
    store.update(later.id, next_attempt_at=time.time() + 3600)
    cancel = store.add(job("cancel"), ALICE, "slurm")
    store.request_cancel(cancel.id)
    assert [r.id for r in store.list_jobs([JobState.PENDING], due_by=time.time())] == [
        due.id, cancel.id]
    assert [r.id for r in store.list_jobs([JobState.PENDING], cancel_requested=True)] == [
        cancel.id]
    assert [r.id for r in store.list_jobs([JobState.PENDING], cancel_requested=False)] == [
        due.id, later.id]


_STATES = [JobState.PENDING, JobState.SUSPENDED, JobState.CANCELLED]


@settings(max_examples=40, deadline=None)
@given(jobs=st.lists(st.tuples(st.booleans(), st.sampled_from(_STATES),
                               st.sampled_from(["slurm", "flux"]), st.booleans()),
                     max_size=30),
       page=st.integers(1, 9),
       states=st.one_of(st.none(), st.lists(st.sampled_from(_STATES), min_size=1, unique=True)),
       user=st.sampled_from([None, "alice", "bob"]),
       backend=st.sampled_from([None, "slurm", "flux"]))
def test_the_apis_listing_rows_are_list_jobs_records_as_views(
        jobs: list[tuple[bool, JobState, str, bool]], page: int,
        states: list[JobState] | None, user: str | None, backend: str | None) -> None:
    """``list_rows`` (the API's listing: ids from the index, then plain rows) pages the
    same jobs in the same order as ``list_jobs``, and each row's view is its record's."""
    from bridge.views import list_view, list_view_of_row

    store = Store.open(":memory:")
    add_array(store, "1,4-5")  # tasks: arrayJobId, arrayTaskId, arrayTasks
    for is_bob, state, where, placed in jobs:
        rec = store.add(job(scheduling={"job_name": "j", "partition": "p"}),
                        BOB if is_bob else ALICE, where)
        if placed:
            store.update(rec.id, placement={"hosts": ["n1"]}, nodes=["n1", "n2"],
                         started_at=time.time())
        if state is not JobState.PENDING:
            store.transition(rec.id, state, "Why", "a message")
    after = None
    while True:
        rows = store.list_rows(states, user=user, backend=backend, after_id=after, limit=page)
        recs = store.list_jobs(states, user=user, backend=backend, after_id=after, limit=page)
        assert [r.id for r in rows] == [r.id for r in recs]
        for row, rec in zip(rows, recs, strict=True):
            assert list_view_of_row(row, {"progressPercentage": 5}) == list_view(
                rec, {"progressPercentage": 5})
            assert list_view_of_row(row) == list_view(rec)
        if len(rows) < page:
            break
        after = rows[-1].id


def test_the_per_pass_queries_are_answered_from_their_indexes(tmp_path: Path) -> None:
    """What each reconcile pass and status snapshot asks (cancels to send, snapshot keys)
    and the listing's ids are read through the indexes made for them, not by scanning
    every unfinished job (SQLite picks a partial index only when the query states its
    condition as the index does)."""
    store = Store.open(tmp_path / "s.sqlite")
    store.add(job("a"), ALICE, "slurm")
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    active = [JobState.SUBMITTED, JobState.RUNNING]
    cases = {
        "jobs_cancel_pending": lambda: store.list_jobs(active, cancel_requested=True),
        "jobs_status_keys": lambda: store.job_keys(active, "slurm"),
        "jobs_suspend_work": lambda: store.suspend_candidates("slurm"),
        "jobs_state": lambda: store.list_rows(active, limit=10),
    }
    for index, query in cases.items():
        statements.clear()
        query()
        sql = next(s for s in statements if s.lstrip().upper().startswith("SELECT"))
        plan = " ".join(str(r[3]) for r in store._db.execute("EXPLAIN QUERY PLAN " + sql))
        assert re.search(rf"INDEX {index}\b", plan), (index, sql, plan)
    store._db.set_trace_callback(None)
