"""The pure parts of the event stream: payloads, the messages of a batch, which events
count as published, topic prefixes, and the outbox feed (docs/events.md)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.backend import Owner
from bridge.events import (
    acked_prefix,
    event_payload,
    events_topic,
    iso_time,
    plan_batch,
    state_topic,
)
from bridge.feed import EventFeed
from bridge.filemodes import InsecureFile
from bridge.model import TrainJob, load_trainjob
from bridge.outbox import Event
from bridge.publisher import read_password
from bridge.settings_events import MetricsSection, MqttSection, check_prefix
from bridge.store import Store


def _event(seq: int, job: int, to: str = "Running") -> Event:
    return Event(seq, job, {"jobId": job, "uid": f"u{job}", "namespace": "default",
                            "name": f"j{job}", "user": "alice", "backend": "slurm",
                            "backendId": "7", "from": "Submitted", "to": to,
                            "reason": "Started", "message": "", "exitCode": None,
                            "at": 1764565262.3456})


def test_payload_is_the_documented_one() -> None:
    assert event_payload(_event(42, 7)) == {
        "id": 42, "type": "transition", "time": "2025-12-01T05:01:02.345Z", "jobId": 7,
        "uid": "u7", "namespace": "default", "name": "j7", "user": "alice",
        "backend": "slurm", "backendId": "7", "from": "Submitted", "state": "Running",
        "reason": "Started", "message": "", "exitCode": None}
    assert iso_time(0) == "1970-01-01T00:00:00.000Z"


def test_batch_sends_every_event_and_the_last_state_of_each_job_retained() -> None:
    batch = [_event(1, 1, "Submitted"), _event(2, 2), _event(3, 1, "Running")]
    msgs = plan_batch("p/c", batch)
    assert [(m.topic, m.retain, m.index) for m in msgs] == [
        (events_topic("p/c", 1), False, 0),
        (events_topic("p/c", 2), False, 1), (state_topic("p/c", 2), True, 1),
        (events_topic("p/c", 1), False, 2), (state_topic("p/c", 1), True, 2)]
    assert state_topic("p/c", 1) == "p/c/jobs/1/state"


@given(st.lists(st.integers(1, 4), min_size=1, max_size=30), st.data())
def test_only_a_fully_acknowledged_prefix_counts(jobs: list[int], data: st.DataObject
                                                 ) -> None:
    batch = [_event(i + 1, job) for i, job in enumerate(jobs)]
    msgs = plan_batch("p", batch)
    acked = data.draw(st.lists(st.booleans(), min_size=len(msgs), max_size=len(msgs)))
    done = acked_prefix(batch, msgs, acked)
    assert done == [e.id for e in batch[:len(done)]]  # a prefix, in order
    for m, ok in zip(msgs, acked, strict=True):
        if m.index < len(done):
            assert ok  # every message of a counted event was acknowledged
    if len(done) < len(batch):  # the first uncounted event had a failed message
        assert any(not ok for m, ok in zip(msgs, acked, strict=True)
                   if m.index == len(done))


@pytest.mark.parametrize("bad", ["", "a/#", "a/+/b", "$SYS/x", "a//b", "/a", "a/", "a\0"])
def test_bad_prefixes_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        check_prefix(bad)


def test_mqtt_settings_refuse_what_cannot_work() -> None:
    assert MqttSection(host="h").prefix.startswith("hpc-bridge/")
    with pytest.raises(ValueError, match="password_file needs username"):
        MqttSection(host="h", password_file="/x")
    with pytest.raises(ValueError, match="go together"):
        MqttSection(host="h", tls=True, cert_file="/c")
    with pytest.raises(ValueError, match="need tls"):
        MqttSection(host="h", ca_file="/c")
    with pytest.raises(ValueError, match="not host:port"):
        MetricsSection(listen="9464")


async def test_feed_wakes_waiters_and_observes_each_event_once() -> None:
    from bridge.backend import Owner
    from bridge.model import load_trainjob

    store = Store.open(":memory:")
    seen: list[int] = []
    feed = EventFeed(store, interval=0.01, observers=[lambda evs: seen.extend(e.id for e in evs)])
    assert await feed.wait_after(0, 0) is False
    task = asyncio.create_task(feed.run())
    job = load_trainjob({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                         "metadata": {"name": "a", "namespace": "default", "uid": "u1"},
                         "spec": {"runtimeRef": {"name": "torch-distributed"}}}, "t")
    waiter = asyncio.create_task(feed.wait_after(0, 5))
    store.add(job, Owner(1001, 1001, "alice"), "slurm")
    assert await waiter is True
    assert seen == [1] and feed.last_id == 1
    task.cancel()


def _job(n: int) -> TrainJob:

    return load_trainjob({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                          "metadata": {"name": f"a{n}", "namespace": "default",
                                       "uid": f"u{n}"},
                          "spec": {"runtimeRef": {"name": "torch-distributed"}}}, "t")


async def test_a_commit_wakes_the_feed_at_once_from_any_thread() -> None:
    """With a look every hour at most, a commit (on the loop, or in a worker thread
    while the loop waits: the store is used by one thread at a time) still wakes the
    waiters: the commit pokes the feed."""
    store = Store.open(":memory:")
    feed = EventFeed(store, interval=3600)
    task = asyncio.create_task(feed.run())
    try:
        waiter = asyncio.create_task(feed.wait_after(0, 30))
        await asyncio.sleep(0)  # the feed's first look, before any write
        store.add(_job(1), Owner(1001, 1001, "alice"), "slurm")
        assert await asyncio.wait_for(waiter, 10) is True
        waiter = asyncio.create_task(feed.wait_after(1, 30))
        await asyncio.to_thread(store.add, _job(2), Owner(1001, 1001, "alice"), "slurm")
        assert await asyncio.wait_for(waiter, 10) is True
        assert feed.last_id == 2
    finally:
        task.cancel()


async def test_a_cancelled_feed_stops_even_as_commits_poke_it() -> None:
    """A cancel that comes as a commit pokes the feed stops it (a wait_for in Python
    3.11 could swallow such a cancel: a test fixture's teardown hung on it)."""
    store = Store.open(":memory:")
    rec = store.add(_job(1), Owner(1001, 1001, "alice"), "slurm")
    for n in range(100):
        feed = EventFeed(store, interval=0.001)
        task = asyncio.create_task(feed.run())
        for _ in range(n % 4):
            await asyncio.sleep(0)
        store.set_trainer_status(rec.id, {"progressPercentage": n}, float(n))
        task.cancel()
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 5)
        assert task.cancelled()
        assert store.commit_listeners == []  # a stopped feed is no listener any more


async def test_a_look_that_failed_is_made_again() -> None:
    """A look whose read fails (a busy database) is not taken for done: the next look
    reads again, though nothing was written in between."""
    store = Store.open(":memory:")
    seen: list[int] = []
    feed = EventFeed(store, observers=[lambda evs: seen.extend(e.id for e in evs)])
    store.add(_job(1), Owner(1001, 1001, "alice"), "slurm")
    real = store.events_after
    failures = [sqlite3.OperationalError("database is locked")]

    def flaky(*args: object, **kwargs: object) -> list[Event]:
        if failures:
            raise failures.pop()
        return real(*args, **kwargs)  # type: ignore[arg-type]

    store.events_after = flaky  # type: ignore[method-assign]
    with pytest.raises(sqlite3.OperationalError):
        await feed.check()
    await feed.check()
    assert seen == [1] and feed.last_id == 1


async def test_an_idle_feed_reads_nothing() -> None:
    """Without a write since its last look, a look reads no outbox (no SQLite lock)."""
    store = Store.open(":memory:")
    feed = EventFeed(store, interval=3600)
    reads: list[int] = []
    real = store.last_event_id

    def counted() -> int:
        reads.append(1)
        return real()

    store.last_event_id = counted  # type: ignore[method-assign]
    await feed.check()
    await feed.check()
    assert len(reads) == 1
    store.add(_job(1), Owner(1001, 1001, "alice"), "slurm")
    await feed.check()
    assert len(reads) == 2 and feed.last_id == 1


def test_a_password_file_others_may_read_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "mqtt.pw"
    secret.write_text("s3cret\n")
    secret.chmod(0o644)
    settings = MqttSection(host="h", username="bridge", password_file=secret)
    with pytest.raises(InsecureFile, match="MQTT password file"):
        read_password(settings)
    secret.chmod(0o600)
    assert read_password(settings) == "s3cret"


def test_twatch_lines_show_the_change_and_escape_control_characters() -> None:
    from bridge.cli.twatch import format_event

    event = event_payload(_event(42, 7))
    event["message"] = "evil\x1b[2Jtext\nmore"
    line = format_event(event)
    assert line.startswith("42 2025-12-01T05:01:02.345Z 7 j7 alice Submitted->Running Started ")
    assert "\x1b" not in line and "\n" not in line and "\\x1b[2J" in line
    first = dict(event, **{"from": None, "state": "Pending", "message": ""})
    assert format_event(first).endswith("alice -->Pending Started")


def test_twatch_refuses_a_negative_since(capsys: pytest.CaptureFixture[str]) -> None:
    from bridge.cli.twatch import twatch_main

    assert twatch_main(["--since", "-3"]) == 1
    assert "twatch: error: --since must be 0 or more" in capsys.readouterr().err
