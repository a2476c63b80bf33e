"""The SQLite store: atomic state changes with history and an outbox; restart-safe."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from bridge.backend import Owner
from bridge.model import TrainJob
from bridge.schema import SCHEMA_VERSION
from bridge.states import IllegalTransition, JobState
from bridge.store import DuplicateJob, JobNotFound, Store
from tests.unit.builders import ALICE, new_trainjob


def job(name: str = "") -> TrainJob:
    return new_trainjob(name, command=["echo", "$(hostile) 'quote' \"dq\" ü"])


def test_add_transition_history_and_outbox(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite")
    rec = store.add(job(), ALICE, "slurm")
    assert rec.state is JobState.PENDING and rec.owner == ALICE
    store.transition(rec.id, JobState.SUBMITTED, "Submitted", backend_id="42")
    store.transition(rec.id, JobState.RUNNING, "Running", nodes=["node1", "node2"])
    done = store.transition(rec.id, JobState.SUCCEEDED, "Completed", exit_code=0)
    assert done.finished_at is not None and done.nodes == ["node1", "node2"]
    assert [t.dst for t in store.transitions(rec.id)] == [
        JobState.PENDING, JobState.SUBMITTED, JobState.RUNNING, JobState.SUCCEEDED]
    events = store.pending_events()
    assert [e.payload["to"] for e in events] == ["Pending", "Submitted", "Running", "Succeeded"]
    assert events[-1].payload["backendId"] == "42"
    store.mark_published([e.id for e in events[:2]])
    assert [e.payload["to"] for e in store.pending_events()] == ["Running", "Succeeded"]


def test_old_events_are_pruned_in_batches(tmp_path: Path) -> None:
    """Retention (bridge/eventtasks.py): events written before the cut go, the oldest
    first, at most ``limit`` at once; with ``published_only`` unpublished ones stay."""
    store = Store.open(tmp_path / "s.sqlite")
    rec = store.add(job(), ALICE, "slurm")
    store.transition(rec.id, JobState.SUBMITTED, "Submitted", backend_id="42")
    store.transition(rec.id, JobState.RUNNING, "Running")
    ids = [e.id for e in store.events_after(0, 10)]
    store.mark_published(ids[:1])
    cut = store.event_boundary(time.time() + 1)  # every event so far is older
    assert cut == ids[-1] + 1
    assert store.prune_events(cut, published_only=True) == 1  # only the published one
    assert [e.id for e in store.events_after(0, 10)] == ids[1:]
    assert store.prune_events(cut, published_only=False, limit=1) == 1
    assert store.prune_events(cut, published_only=False) == 1
    assert store.events_after(0, 10) == []
    store.transition(rec.id, JobState.SUCCEEDED, "Completed", exit_code=0)
    young = store.event_boundary(time.time() - 3600)
    assert young == store.last_event_id()  # the new event is the first young one
    assert store.prune_events(young, published_only=False) == 0  # young: kept
    assert len(store.events_after(0, 10)) == 1


def test_the_newest_event_id_is_read_again_only_after_a_write(tmp_path: Path) -> None:
    """last_event_id answers from memory while nothing was written (it is asked on every
    reconcile pass and status round), and sees every write: a transition, a prune."""
    store = Store.open(tmp_path / "s.sqlite")
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    assert store.last_event_id() == 0
    rec = store.add(job(), ALICE, "slurm")
    first = store.last_event_id()
    assert first == store.events_after(0, 10)[-1].id
    statements.clear()
    assert [store.last_event_id() for _ in range(3)] == [first] * 3
    assert statements == []  # nothing written since: no statement
    store.transition(rec.id, JobState.SUBMITTED, "Submitted", backend_id="1")
    assert store.last_event_id() == first + 1
    store.prune_events(first + 2, published_only=False)
    assert store.last_event_id() == 0 and store.events_after(0, 10) == []


def test_an_event_id_read_in_a_transaction_that_rolls_back_is_not_kept(tmp_path: Path,
                                                                       ) -> None:
    """A rollback leaves the connection's change count where it was: an id read
    inside the transaction, kept, would name an event that never was."""
    store = Store.open(tmp_path / "s.sqlite")
    rec = store.add(job(), ALICE, "slurm")
    first = store.last_event_id()
    store._db.execute("BEGIN")
    store._db.execute("INSERT INTO outbox (job_id, event, created_at) VALUES (?, '{}', 0)",
                      (rec.id,))
    assert store.last_event_id() == first + 1
    store._db.execute("ROLLBACK")
    assert store.last_event_id() == first


def test_illegal_transition_changes_nothing(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite")
    rec = store.add(job(), ALICE, "slurm")
    store.transition(rec.id, JobState.CANCELLED, "Cancelled")
    with pytest.raises(IllegalTransition):
        store.transition(rec.id, JobState.RUNNING, "Running", backend_id="7")
    after = store.get(rec.id)
    assert after.state is JobState.CANCELLED and after.backend_id is None
    assert len(store.transitions(rec.id)) == 2
    assert len(store.pending_events()) == 2


def test_reopen_gives_the_same_state(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    store = Store.open(path)
    j = job("same-name")
    rec = store.add(j, ALICE, "slurm")
    store.update(rec.id, attempts=1, submitting_since=123.5)
    before = store.get(rec.id)
    # No close(): as if the process had been killed.
    again = Store.open(path)
    assert again.get(rec.id) == before
    assert again.find("same-name").id == rec.id
    assert again.find(str(rec.id)).uid == rec.uid
    assert again.find(rec.uid).id == rec.id
    with pytest.raises(JobNotFound):
        again.find("nope")


def test_duplicates_are_refused(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite")
    j = job("dup")
    store.add(j, ALICE, "slurm")
    with pytest.raises(DuplicateJob):
        store.add(j, ALICE, "slurm")


def test_one_users_name_does_not_block_anothers(tmp_path: Path) -> None:
    """Bob cannot squat a name: live names are unique per owner (and namespace)."""
    store = Store.open(tmp_path / "s.sqlite")
    bob = Owner(uid=1002, gid=1002, user="bob")
    bobs = store.add(job("train"), bob, "slurm")
    alices = store.add(job("train"), ALICE, "slurm")
    assert alices.id != bobs.id
    with pytest.raises(DuplicateJob, match="alice has an unfinished job named"):
        store.add(job("train"), ALICE, "slurm")
    assert store.find("train", caller_uid=ALICE.uid).id == alices.id
    assert store.find("train", caller_uid=bob.uid).id == bobs.id
    names = [r["name"] for r in store._db.execute("PRAGMA index_list(jobs)")]
    assert "jobs_live_owner_name" in names and "jobs_live_name" not in names


def test_wal_mode(tmp_path: Path) -> None:
    Store.open(tmp_path / "s.sqlite")
    conn = sqlite3.connect(tmp_path / "s.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_unknown_fields_are_refused(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite")
    rec = store.add(job(), ALICE, "slurm")
    with pytest.raises(ValueError, match="unknown job fields"):
        store.update(rec.id, owner_uid=0)


def test_placement_is_stored_as_json(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite")
    rec = store.add(job(), ALICE, "slurm")
    assert rec.placement is None
    placement = {"hosts": ["node1", "node2"], "score": "leaf:1,level1:1", "pinned": False}
    store.transition(rec.id, JobState.PENDING, "WaitingForTopology", "x", placement=placement)
    assert store.get(rec.id).placement == placement
    store.update(rec.id, placement=None)
    assert store.get(rec.id).placement is None


def test_a_version_1_database_gains_the_placement_column(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    store = Store.open(path)
    rec = store.add(job("old"), ALICE, "slurm")
    store.close()
    # What the daemon of schema version 1 left behind: no placement column.
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE jobs DROP COLUMN placement")
    conn.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    again = Store.open(path)
    assert again.get(rec.id).placement is None
    again.update(rec.id, placement={"hosts": ["n1"]})
    assert again.get(rec.id).placement == {"hosts": ["n1"]}
    version = again._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    assert version[0] == str(SCHEMA_VERSION)


def test_a_name_is_free_again_once_its_job_has_finished(tmp_path: Path) -> None:
    """As in Kubernetes: a TrainJob deleted and created again under its name."""
    store = Store.open(tmp_path / "s.sqlite")
    first = store.add(job("again"), ALICE, "slurm")
    with pytest.raises(DuplicateJob):
        store.add(job("again"), ALICE, "slurm")
    store.transition(first.id, JobState.CANCELLED, "Cancelled")
    second = store.add(job("again"), ALICE, "slurm")
    assert second.id != first.id
    assert store.find("again").id == second.id


def test_a_version_2_database_drops_its_table_wide_name_constraint(tmp_path: Path) -> None:
    path = tmp_path / "v2.sqlite"
    store = Store.open(path)
    done = store.add(job("kept"), ALICE, "slurm")
    store.transition(done.id, JobState.FAILED, "X", "kept message")
    store.close()
    # Rebuild the table as version 2 had it: UNIQUE (namespace, name) on every row.
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys=OFF")
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name='jobs'").fetchone()[0]
    conn.execute(sql.replace("CREATE TABLE jobs", "CREATE TABLE old_jobs").replace(
        "placement         TEXT\n)", "placement         TEXT,\n    UNIQUE (namespace, name)\n)"))
    conn.execute("INSERT INTO old_jobs SELECT * FROM jobs")
    conn.execute("DROP TABLE jobs")
    conn.execute("ALTER TABLE old_jobs RENAME TO jobs")
    conn.commit()
    conn.close()
    again = Store.open(path)
    assert again.get(done.id).message == "kept message"
    assert len(again.transitions(done.id)) == 2
    assert again.add(job("kept"), ALICE, "slurm").name == "kept"


def test_by_uids_reads_just_those_jobs_in_chunks(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite")
    recs = [store.add(job(f"j{i}"), ALICE, "slurm") for i in range(3)]
    store.transition(recs[1].id, JobState.SUBMITTED, "Submitted")
    uids = [recs[2].uid, recs[0].uid, *(f"missing-{i}" for i in range(1200))]
    assert [r.id for r in store.by_uids(uids)] == [recs[0].id, recs[2].id]
    assert [r.id for r in store.by_uids([r.uid for r in recs], [JobState.SUBMITTED])] == [
        recs[1].id]


def test_idempotency_keys_are_unique_per_owner_and_survive_a_v3_database(
        tmp_path: Path) -> None:
    path = tmp_path / "v3.sqlite"
    store = Store.open(path)
    old = store.add(job("old"), ALICE, "slurm")
    store.close()
    # What a schema-3 daemon left: no idempotency columns nor index.
    conn = sqlite3.connect(path)
    conn.execute("DROP INDEX jobs_idempotency")
    conn.execute("ALTER TABLE jobs DROP COLUMN idempotency_key")
    conn.execute("ALTER TABLE jobs DROP COLUMN request_digest")
    conn.execute("UPDATE meta SET value='3' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    store = Store.open(path)
    assert store.get(old.id).idempotency_key is None
    bob = Owner(uid=1002, gid=1002, user="bob")
    first = store.add(job(), ALICE, "slurm", idempotency_key="k", request_digest="d")
    with pytest.raises(DuplicateJob):
        store.add(job(), ALICE, "slurm", idempotency_key="k")
    bobs = store.add(job(), bob, "slurm", idempotency_key="k")
    assert store.by_idempotency_key(ALICE.uid, "k") == first
    assert store.by_idempotency_key(bob.uid, "k") == bobs
    assert store.by_idempotency_key(ALICE.uid, "other") is None


def test_a_listing_decodes_no_shape_until_it_is_read(tmp_path: Path) -> None:
    """A listing of thousands of rows pays for each row's shape only where it is read."""
    store = Store.open(tmp_path / "s.sqlite")
    store.add(job(), ALICE, "slurm", shape={"version": 1, "nodes": 2})
    [rec] = store.list_jobs()
    assert "shape" not in vars(rec)  # not decoded yet
    assert rec.shape == {"version": 1, "nodes": 2}
    assert rec.shape_json is not None and "shape" in vars(rec)
