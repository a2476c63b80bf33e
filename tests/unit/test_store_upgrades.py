"""Upgrades: a store written by each past release opens, migrates and keeps its jobs;
a store written by a newer release is refused (never silently downgraded).

The fixtures are SQL dumps written by the store code of each release
(tests/unit/fixtures/store/make_fixtures.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from bridge.daemon import main
from bridge.schema import SCHEMA_VERSION, SchemaTooNew
from bridge.states import JobState
from bridge.store import Store
from tests.unit.builders import ALICE, new_trainjob

FIXTURES = Path(__file__).parent / "fixtures" / "store"


def restore(dump: str, path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.executescript((FIXTURES / dump).read_text())
    conn.close()
    return path


@pytest.mark.parametrize("dump", ["v1-first.sql", "v1.sql", "v2.sql", "v3.sql", "v4.sql",
                                  "v5.sql"])
def test_a_store_of_each_past_release_opens_and_migrates(dump: str, tmp_path: Path) -> None:
    store = Store.open(restore(dump, tmp_path / "s.sqlite"))
    version = store._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    assert int(version[0]) == SCHEMA_VERSION
    by_name = {r.name: r for r in store.list_jobs(states=list(JobState))}
    assert set(by_name) == {"queued", "running", "done"}
    assert by_name["queued"].state is JobState.PENDING
    running = by_name["running"]
    assert (running.state, running.backend_id, running.nodes) == (
        JobState.RUNNING, "4242", ["node1"])
    assert running.owner == ALICE and running.job.spec.trainer is not None
    done = by_name["done"]
    assert (done.state, done.exit_code, done.message) == (JobState.SUCCEEDED, 0, "exit 0")
    assert [t.dst for t in store.transitions(done.id)] == [
        JobState.PENDING, JobState.SUBMITTED, JobState.RUNNING, JobState.SUCCEEDED]
    assert len(store.pending_events()) >= 1  # unpublished events survive the upgrade
    # The columns and rules of today's schema work on the migrated table.
    store.update(running.id, placement={"hosts": ["node1"]}, queue="debug")
    assert store.get(running.id).placement == {"hosts": ["node1"]}
    assert store.get(running.id).queue == "debug"
    again = store.add(new_trainjob("done"), ALICE, "slurm")
    assert again.name == "done" and again.id != done.id  # a finished job frees its name
    # Version 5: a job from before arrays is a plain job; an array's tasks can be added.
    assert (done.array_job_id, store.array_task_ids(done.id)) == (None, [])
    # Version 6: a running job takes a progress report.
    store.set_trainer_status(running.id, {"progressPercentage": 5}, 1.0)
    assert store.trainer_statuses([running.id]) == {running.id: {"progressPercentage": 5}}
    # jobs.suspend_wanted is filled in for unfinished jobs (from the summary), so the
    # suspend-work index sees them: a running job asking for a suspend is work.
    wanted = dict(store._db.execute("SELECT name, suspend_wanted FROM jobs").fetchall())
    assert wanted["running"] in (0, None) and wanted["queued"] in (0, None)
    job = store.get(running.id).job
    job.spec.suspend = True
    store.save_document(running.id, job)
    assert [r.id for r in store.suspend_candidates("slurm")] == [running.id]
    store.close()
    # Opening the migrated store again changes nothing.
    reopened = Store.open(tmp_path / "s.sqlite")
    assert len(reopened.list_jobs(states=list(JobState))) == 4
    reopened.close()


def test_a_store_written_by_a_newer_release_is_refused_untouched(tmp_path: Path) -> None:
    path = restore("v3.sql", tmp_path / "s.sqlite")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    with pytest.raises(SchemaTooNew, match=f"schema version {SCHEMA_VERSION + 1}, newer"):
        Store.open(path)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM meta").fetchone()[0] == str(SCHEMA_VERSION + 1)
    conn.close()


def test_serve_refuses_a_newer_store_with_a_clear_message(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    state.mkdir()
    path = restore("v3.sql", state / "bridge.sqlite")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    config = tmp_path / "bridge.toml"
    config.write_text(f'[daemon]\nstate_dir = "{state}"\nsocket = "{tmp_path}/b.sock"\n'
                      '[backends.flux]\nkind = "flux"\n')
    assert main(["serve", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "schema version 99, newer than this hpc-bridge knows" in err
    assert not (tmp_path / "b.sock").exists()


def test_a_malformed_summary_does_not_stop_a_start(tmp_path: Path) -> None:
    """Only a damaged store has one; the suspend-work column reads it as unknown (the
    job is looked at) instead of failing the migration, and so the daemon's start."""
    store = Store.open(tmp_path / "s.sqlite")
    rec = store.add(new_trainjob("a"), ALICE, "slurm")
    store._db.execute("UPDATE jobs SET summary='not json', state='Running', backend_id='7',"
                      " suspend_wanted=0 WHERE id=?", (rec.id,))
    store.close()
    again = Store.open(tmp_path / "s.sqlite")
    assert again._db.execute("SELECT suspend_wanted FROM jobs WHERE id=?",
                             (rec.id,)).fetchone()[0] is None
    again.close()
