"""Event stream figures against the real mosquitto (``testbed/mosquitto.sh up``).

Run with ``.venv/bin/python bench/events.py [--backlog 10000] [--samples 200] [--batch 500]``.

* **Backlog throughput**: a store with ``--backlog`` unpublished events (4 per job:
  Pending, Submitted, Running, Succeeded) is drained by the daemon's
  :class:`bridge.publisher.Publisher` (QoS 1, each event marked only after its PUBACKs).
  Baseline, in the same process: the same messages published raw with aiomqtt at QoS 1,
  no store. Goal: >= 5,000 events/s.
* **Slurm -> MQTT latency** (``--slurm N``): a real daemon on the real Slurm bed
  (``poll_interval`` 1 s) runs N jobs one after the other; each job's first command
  writes the time, and the ``Running`` event's arrival at a subscriber is compared with
  it (the job starts a little after Slurm marks it running: a slight underestimate).
  Goal: <= one poll interval + 50 ms.
* **Commit -> MQTT latency**: a state change committed to the store, to the event's
  arrival at a subscriber, p50/p95 over ``--samples`` changes made one at a time, each
  20-60 ms after the previous one arrived (the outbox feed looks every 20 ms). On a
  real daemon add the back end's poll interval (Slurm) or watch latency (Kubernetes)
  before the commit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import aiomqtt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.backend import Owner
from bridge.events import plan_batch
from bridge.feed import EventFeed
from bridge.model import load_trainjob
from bridge.publisher import Publisher
from bridge.settings_events import MqttSection
from bridge.states import JobState
from bridge.store import Store

OWNER = Owner(1001, 1001, "alice")


def _broker() -> tuple[str, int]:
    env = Path("/run/hpc-bridge-testbed/mosquitto.env")
    if not env.exists():
        sys.exit("mosquitto is not up: bash testbed/mosquitto.sh up")
    kv = dict(line.split("=", 1) for line in env.read_text().split())
    return kv["MQTT_HOST"], int(kv["MQTT_PORT"])


def _add_job(store: Store, n: int) -> int:
    job = load_trainjob({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                         "metadata": {"name": f"b{n}", "namespace": "bench", "uid": f"u{n}"},
                         "spec": {"runtimeRef": {"name": "torch-distributed"}}}, "bench")
    return store.add(job, OWNER, "slurm").id


def _fill(store: Store, events: int) -> None:
    for n in range(events // 4):
        job_id = _add_job(store, n)
        for state in (JobState.SUBMITTED, JobState.RUNNING, JobState.SUCCEEDED):
            store.transition(job_id, state, "Bench")


def _check(store: Store, drained: asyncio.Event) -> None:
    if store.outbox_backlog()[0] == 0:
        drained.set()


async def _raw_rate(host: str, port: int, store: Store) -> float:
    """Baseline: the same messages, QoS 1, straight from aiomqtt (no store)."""
    messages = plan_batch("bench/raw", store.events_after(0, 1_000_000))
    async with aiomqtt.Client(host, port, identifier="bench-raw",
                              max_inflight_messages=100) as client:
        client.pending_calls_threshold = 10_000
        start = time.perf_counter()
        for i in range(0, len(messages), 1000):
            await asyncio.gather(*(client.publish(m.topic, m.payload, qos=1, retain=m.retain)
                                   for m in messages[i:i + 1000]))
        elapsed = time.perf_counter() - start
    return len(store.events_after(0, 1_000_000)) / elapsed


async def _drain_rate(host: str, port: int, store: Store, batch: int) -> float:
    feed = EventFeed(store)
    settings = MqttSection(host=host, port=port, prefix="bench/ours", batch_size=batch,
                           client_id="bench-publisher")
    drained = asyncio.Event()
    publisher = Publisher(store, feed, settings, on_published=lambda _: _check(store, drained))
    waiting = store.outbox_backlog()[0]
    start = time.perf_counter()
    task = asyncio.create_task(publisher.run())
    await drained.wait()
    elapsed = time.perf_counter() - start
    task.cancel()
    return waiting / elapsed


async def _latency(host: str, port: int, store: Store, samples: int) -> list[float]:
    feed = EventFeed(store)
    feed_task = asyncio.create_task(feed.run())
    settings = MqttSection(host=host, port=port, prefix="bench/lat", client_id="bench-lat")
    drained = asyncio.Event()
    _check(store, drained)
    publisher = Publisher(store, feed, settings, on_published=lambda _: _check(store, drained))
    pub_task = asyncio.create_task(publisher.run())
    latencies: list[float] = []
    async with aiomqtt.Client(host, port, identifier="bench-sub") as sub:
        await sub.subscribe("bench/lat/jobs/+/events", qos=1)
        await drained.wait()
        messages = sub.messages
        for n in range(samples):
            # At a random moment, not right behind the previous event (whose publisher
            # round may still be running and would pick this one up at once).
            await asyncio.sleep(random.uniform(0.02, 0.06))
            committed = time.perf_counter()
            job_id = _add_job(store, 10_000_000 + n)
            seq = store.last_event_id()
            async for msg in messages:
                body = json.loads(msg.payload if isinstance(msg.payload, bytes) else b"{}")
                if body.get("id") == seq and body.get("jobId") == job_id:
                    latencies.append(time.perf_counter() - committed)
                    break
    pub_task.cancel()
    feed_task.cancel()
    return latencies


def _slurm_latency(jobs: int) -> tuple[list[float], list[float]]:
    """Job start (its own clock stamp) -> its Running event at an MQTT subscriber, and
    the part of it after the daemon committed the change (the event's ``time``)."""
    from tests.integration.bed import (
        Daemon,
        cleanup,
        fresh_daemon_dir,
        read_testbed_env,
        shared_dir,
        wait_for,
    )
    from tests.integration.mqtt import Subscriber, mqtt_toml

    bed = read_testbed_env()
    if bed is None:
        sys.exit("the Slurm bed is not up: bash testbed/slurm.sh up")
    host, port = _broker()
    arrived: dict[int, float] = {}
    committed: dict[int, float] = {}
    sub = Subscriber(host, port, "bench/slurm/jobs/+/events", f"bench-{time.time_ns()}")
    sub.client.on_message = lambda _c, _u, msg: _arrival(arrived, committed, msg.payload)
    workdir, outdir = fresh_daemon_dir("bench-events"), shared_dir("bench-events-out-")
    d = Daemon(workdir, {"rest_socket": bed["SLURMRESTD_SOCKET"],
                         "rest_version": bed.get("SLURM_REST_VERSION", "v0.0.38"),
                         "jwt_key": bed["SLURM_JWT_KEY"]},
               extra_toml=mqtt_toml(host, port, "bench/slurm"))
    d.start()
    latencies: list[float] = []
    published: list[float] = []
    try:
        for n in range(jobs):
            stamp = outdir / f"start-{n}"
            script = outdir / f"job-{n}.sh"
            script.write_text(f"#!/bin/bash\n#SBATCH --output=/dev/null\n"
                              f"date +%s.%N > {stamp}\nsleep 3\n")
            res = d.cli("alice", "tbatch", "--parsable", str(script), cwd=outdir)
            job_id = int(res.stdout)
            wait_for(lambda j=job_id: j in arrived, 60, f"job {job_id}'s Running event", 0.05)
            started = float(wait_for(lambda s=stamp: s.exists() and s.read_text().strip(),
                                     30, "the job's stamp", 0.05))
            latencies.append(arrived[job_id] - started)
            published.append(arrived[job_id] - committed[job_id])
            d.wait_state(job_id, ["Succeeded", "Failed"])
    finally:
        sub.close()
        d.stop()
        cleanup(workdir)
        cleanup(outdir)
    return latencies, published


def _arrival(arrived: dict[int, float], committed: dict[int, float], payload: bytes) -> None:
    event = json.loads(payload)
    if event.get("state") == "Running":
        arrived.setdefault(int(event["jobId"]), time.time())
        stamp = datetime.strptime(event["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
        committed.setdefault(int(event["jobId"]), stamp.replace(tzinfo=UTC).timestamp())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--batch", type=int, default=500, help="the publisher's batch_size")
    parser.add_argument("--slurm", type=int, default=0, metavar="N",
                        help="also measure Slurm -> MQTT latency over N real jobs")
    args = parser.parse_args()
    if args.slurm:
        lat, pub = _slurm_latency(args.slurm)
        print(f"Slurm job start -> Running on MQTT over {len(lat)} jobs (poll_interval 1 s): "
              f"p50 {statistics.median(lat) * 1e3:.0f} ms, "
              f"p95 {statistics.quantiles(lat, n=20)[18] * 1e3:.0f} ms; goal <= 1050 ms; "
              f"of which commit -> MQTT p50 {statistics.median(pub) * 1e3:.0f} ms, "
              f"p95 {statistics.quantiles(pub, n=20)[18] * 1e3:.0f} ms")
    host, port = _broker()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp) / "bench.sqlite")
        _fill(store, args.backlog)
        raw = asyncio.run(_raw_rate(host, port, store))
        ours = asyncio.run(_drain_rate(host, port, store, args.batch))
        lat = asyncio.run(_latency(host, port, store, args.samples))
    q = statistics.quantiles(lat, n=20)
    print(f"backlog {args.backlog} events: publisher {ours:,.0f} events/s, raw aiomqtt "
          f"{raw:,.0f} events/s (ratio {ours / raw:.2f}); goal >= 5,000 events/s")
    print(f"commit -> MQTT arrival over {len(lat)} changes: p50 {statistics.median(lat) * 1e3:.1f}"
          f" ms, p95 {q[18] * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
