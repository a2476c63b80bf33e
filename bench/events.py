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
* **Kubernetes -> MQTT latency** (``--k8s N``): a real daemon on the real Kubernetes bed
  (``testbed/k8s/k8s.sh up``: JobSet controller, kwok nodes), its back end mapping alice
  to a fresh namespace (deleted afterwards), runs N ``tbatch --wrap true`` jobs one after
  the other (kwok runs no containers: the pods go Running, then Succeeded at once). A
  ``kubectl get jobsets --watch`` in this process stamps when each JobSet's status first
  shows ``Completed``/``Failed``; the job's ``Succeeded`` event's arrival at a subscriber
  is compared with it. The anchor, same run: watch saw the end -> the daemon's commit of
  ``Succeeded`` (the event's ``time``, ms resolution), i.e. the bridge's own watch, vs
  the rest (outbox -> MQTT). The anchor may be a few ms below zero: kubectl decodes and
  prints each object before the bench reads it, so the bench's stamp lags the daemon's
  own watch (the latency is then a slight underestimate). Goal: <= 100 ms
  (informational: the exit status is 0).
  ``--only-backends`` skips the store figures below (run only ``--slurm``/``--k8s``).
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
import operator
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import aiomqtt
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

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

    bed = read_testbed_env()
    if bed is None:
        sys.exit("the Slurm bed is not up: bash testbed/slurm.sh up")
    host, port = _broker()
    arrived: dict[int, float] = {}
    committed: dict[int, float] = {}
    sub = _subscribe(host, port, "bench/slurm/jobs/+/events",
                     lambda payload: _arrival(arrived, committed, payload))
    workdir, outdir = fresh_daemon_dir("bench-events"), shared_dir("bench-events-out-")
    d = Daemon(workdir, {"rest_socket": bed["SLURMRESTD_SOCKET"],
                         "rest_version": bed.get("SLURM_REST_VERSION", "v0.0.38"),
                         "jwt_key": bed["SLURM_JWT_KEY"]},
               extra_toml=_mqtt_toml(host, port, "bench/slurm"))
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
            wait_for(partial(operator.contains, arrived, job_id), 60,
                     f"job {job_id}'s Running event", 0.05)
            started = float(wait_for(partial(_stamp, stamp), 30, "the job's stamp", 0.05))
            latencies.append(arrived[job_id] - started)
            published.append(arrived[job_id] - committed[job_id])
            d.wait_state(job_id, ["Succeeded", "Failed"])
    finally:
        sub.loop_stop()
        sub.disconnect()
        d.stop()
        cleanup(workdir)
        cleanup(outdir)
    return latencies, published


def _stamp(path: Path) -> str:
    return path.read_text().strip() if path.exists() else ""


def _subscribe(host: str, port: int, topic: str,
               on_payload: Callable[[bytes], None]) -> mqtt.Client:
    """A paho client (what aiomqtt is built on; its thread calls ``on_payload`` as each
    message arrives) subscribed to ``topic`` at QoS 1 when this returns."""
    subscribed = threading.Event()
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"bench-{time.time_ns()}")
    client.on_connect = lambda c, *_: c.subscribe(topic, qos=1)
    client.on_subscribe = lambda *_: subscribed.set()
    client.on_message = lambda _c, _u, msg: on_payload(bytes(msg.payload))
    client.connect(host, port, keepalive=10)
    client.loop_start()
    if not subscribed.wait(20):
        client.loop_stop()
        sys.exit(f"no MQTT subscription on {host}:{port}")
    return client


def _mqtt_toml(host: str, port: int, prefix: str) -> str:
    """An ``[events.mqtt]`` table for the daemon (fast reconnects), as the tests'
    ``tests.integration.mqtt.mqtt_toml`` writes it."""
    return (f'[events.mqtt]\nhost = "{host}"\nport = {port}\nprefix = "{prefix}"\n'
            "retry_base = 0.2\nretry_cap = 1.0\npublish_timeout = 3.0\n")


def _arrival(arrived: dict[int, float], committed: dict[int, float], payload: bytes) -> None:
    event = json.loads(payload)
    if event.get("state") == "Running":
        arrived.setdefault(int(event["jobId"]), time.time())
        stamp = datetime.strptime(event["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
        committed.setdefault(int(event["jobId"]), stamp.replace(tzinfo=UTC).timestamp())


class _JobSetWatch:
    """``kubectl get jobsets -n NS --watch -o json`` in a thread: when each JobSet's
    status first showed a true ``Completed`` or ``Failed`` condition (``time.time()``)."""

    def __init__(self, kubectl: str, kubeconfig: str, namespace: str, resource: str) -> None:
        self.ended: dict[str, float] = {}
        self.watching = threading.Event()
        # -v=6 logs each response: the one for ``watch=true`` says the watch is open.
        self.proc = subprocess.Popen(
            [kubectl, "--kubeconfig", kubeconfig, "-v=6", "-n", namespace, "get", resource,
             "--watch", "-o", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            text=True, bufsize=1)
        self._threads = [threading.Thread(target=self._objects, daemon=True),
                         threading.Thread(target=self._log, daemon=True)]
        for t in self._threads:
            t.start()

    def _objects(self) -> None:
        assert self.proc.stdout is not None
        lines: list[str] = []
        for line in self.proc.stdout:  # indented JSON objects, each ending in "}" alone
            lines.append(line)
            if line.rstrip("\n") != "}":
                continue
            seen = time.time()
            try:
                obj = json.loads("".join(lines))
            except ValueError:
                continue
            lines = []
            conds = (obj.get("status") or {}).get("conditions") or []
            if any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                   for c in conds):
                self.ended.setdefault(obj["metadata"]["name"], seen)

    def _log(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if "watch=true" in line and "200 OK" in line:
                self.watching.set()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for t in self._threads:
            t.join(5)


def _k8s_latency(jobs: int) -> tuple[list[float], list[float], list[str]]:
    """A JobSet's end as a watch of our own sees it -> the job's terminal event at an MQTT
    subscriber, and -> the daemon's commit of it (the event's ``time``); per job, in
    order. Also the terminal states seen (all ``Succeeded`` when all went well)."""
    from tests.integration.bed import cleanup, wait_for
    from tests.integration.k8s_bridge import JOBSETS, k8s_daemon
    from tests.integration.k8s_users import users_namespace
    from tests.integration.k8sbed import K8S_ENV, K8sBed, read_k8s_env

    env = read_k8s_env()
    if env is None or "KUBECONFIG" not in env or "K8S_BIN_DIR" not in env:
        sys.exit(f"the Kubernetes bed is not up ({K8S_ENV}): bash testbed/k8s/k8s.sh up")
    bed = K8sBed.from_env(env)
    if not bed.apiserver_ready():
        sys.exit("the Kubernetes bed's apiserver is not ready: bash testbed/k8s/k8s.sh up")
    host, port = _broker()
    ended: dict[int, tuple[str, float, float]] = {}  # jobId -> backendId, arrival, commit
    ns = bed.new_namespace("hpcb-bench-")
    sub = _subscribe(host, port, "bench/k8s/jobs/+/events",
                     lambda payload: _terminal(ended, payload))
    watch: _JobSetWatch | None = None
    d = None
    latencies: list[float] = []
    committed: list[float] = []
    states: list[str] = []
    try:
        # What the k8s_alice fixture sets up (tests/integration/conftest_k8s.py).
        users_namespace(bed, ns)
        d = k8s_daemon(bed, ns)
        d.backend_settings.update({"placement": "constraints",
                                   "users.alice.namespace": ns,
                                   "users.alice.service_account": "alice",
                                   "default_image": "busybox:1.36"})
        d.extra_toml += "\n" + _mqtt_toml(host, port, "bench/k8s")
        d.start()
        watch = _JobSetWatch(bed.kubectl_path, bed.kubeconfig, ns, JOBSETS)
        if not watch.watching.wait(30):
            raise AssertionError(f"kubectl's JobSet watch did not open (rc {watch.proc.poll()})")
        for _ in range(jobs):
            res = d.cli("alice", "tbatch", "--parsable", "--backend", "kubernetes",
                        "--wrap", "true", cwd=d.workdir)
            if res.returncode != 0:
                raise AssertionError(f"tbatch failed: {res.stderr.strip()}")
            job_id = int(res.stdout)
            wait_for(partial(operator.contains, ended, job_id), 120,
                     f"job {job_id}'s terminal event", 0.05)
            backend_id, arrived, commit = ended[job_id]
            name = backend_id.rsplit("/", 1)[-1]
            wait_for(partial(operator.contains, watch.ended, name), 30,
                     f"the watch to see JobSet {name} end", 0.05)
            latencies.append(arrived - watch.ended[name])
            committed.append(commit - watch.ended[name])
            states.append(d.job(job_id)["state"])
    finally:
        sub.loop_stop()
        sub.disconnect()
        if watch is not None:
            watch.stop()
        if d is not None:
            d.stop()
            cleanup(d.workdir)
        bed.delete_namespace(ns)
    return latencies, committed, states


def _terminal(ended: dict[int, tuple[str, float, float]], payload: bytes) -> None:
    event = json.loads(payload)
    if event.get("type") == "transition" and event.get("state") in ("Succeeded", "Failed"):
        stamp = datetime.strptime(event["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
        ended.setdefault(int(event["jobId"]), (str(event.get("backendId")), time.time(),
                                               stamp.replace(tzinfo=UTC).timestamp()))


def _ms(values: list[float]) -> str:
    """p50/p95/max in ms (p95 inclusive: within the samples, even for a few)."""
    p95 = statistics.quantiles(values, n=20, method="inclusive")[18] if len(values) > 1 \
        else values[0]
    return (f"p50 {statistics.median(values) * 1e3:.0f} ms, p95 {p95 * 1e3:.0f} ms, "
            f"max {max(values) * 1e3:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--batch", type=int, default=500, help="the publisher's batch_size")
    parser.add_argument("--slurm", type=int, default=0, metavar="N",
                        help="also measure Slurm -> MQTT latency over N real jobs")
    parser.add_argument("--k8s", type=int, default=0, metavar="N",
                        help="also measure Kubernetes -> MQTT latency over N real jobs")
    parser.add_argument("--only-backends", action="store_true",
                        help="run only the --slurm/--k8s modes (skip the store figures)")
    args = parser.parse_args()
    if args.slurm:
        lat, pub = _slurm_latency(args.slurm)
        print(f"Slurm job start -> Running on MQTT over {len(lat)} jobs (poll_interval 1 s): "
              f"p50 {statistics.median(lat) * 1e3:.0f} ms, "
              f"p95 {statistics.quantiles(lat, n=20)[18] * 1e3:.0f} ms; goal <= 1050 ms; "
              f"of which commit -> MQTT p50 {statistics.median(pub) * 1e3:.0f} ms, "
              f"p95 {statistics.quantiles(pub, n=20)[18] * 1e3:.0f} ms")
    if args.k8s:
        lat, commit, states = _k8s_latency(args.k8s)
        p95 = statistics.quantiles(lat, n=20, method="inclusive")[18] if len(lat) > 1 \
            else lat[0]
        others = [s for s in states if s != "Succeeded"]
        print(f"Kubernetes JobSet end (own watch) -> terminal event on MQTT over {len(lat)} "
              f"jobs{f' ({len(others)} not Succeeded: {others})' if others else ''}: "
              f"{_ms(lat)}")
        print(f"  anchor, same jobs: watch saw the end -> the daemon's commit (event time, "
              f"ms resolution): {_ms(commit)}; commit -> MQTT: "
              f"{_ms([a - c for a, c in zip(lat, commit, strict=True)])}")
        print(f"  goal p95 <= 100 ms: {'met' if p95 <= 0.1 else 'NOT met'}")
    if args.only_backends:
        return
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
