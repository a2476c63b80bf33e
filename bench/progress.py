"""Progress reports from inside jobs (Kubeflow Trainer's KEP-2779 protocol), in process.

Goal (issue: "progress POST -> visible in tqueue and in the TrainJob status"):
p95 POST -> visible <= 1 s.

One process, a real store in a temporary directory holding ``--jobs`` running jobs, the
daemon's progress endpoint (:func:`bridge.status_server.make_status_app`, its rate
limits lifted and every report made an event: heavier than the daemon's default, where
a job's reports become events at most every 10 s) served over real TLS (a
self-signed certificate made with ``openssl``), and the daemon's API
(:func:`bridge.api.make_app`) on a TCP port with a bearer token, read the way tqueue
reads it (as root: no per-user request rate).
Measured, p50/p95/max over ``--samples`` reports, each to a random job with an
increasing ``progressPercentage`` (and a marker of its own in
``estimatedRemainingSeconds``), sent one at a time over one kept-alive TLS connection:

* **POST latency**: the request sent -> its 200 received;
* **POST -> visible in ``GET /v1/jobs/{id}``**: the request sent -> a GET of that job
  returned showing the report;
* **POST -> visible in the full listing** (tqueue: ``GET /v1/jobs?states=all``, every
  page): one extra report after every ``--batch`` samples, sent -> the listing of all
  jobs returned showing it (and every report of the batch);
* **POST -> progress event in the outbox feed** (:class:`bridge.feed.EventFeed`, which
  looks when a commit pokes it, at most every 10 ms): what MQTT, ``/v1/events`` and
  the TrainJob CR's status follow; the CR write itself (a Kubernetes API call) is not
  part of this figure. Every report is made an event (``event_interval`` 0; the
  daemon's default makes one at most every 10 s a job). Each sample is sent just after
  the feed woke for the previous one, so it is near the feed's worst case (the 10 ms
  between two looks);
* **throughput**: reports accepted a second from 16 concurrent senders (one kept-alive
  connection each, in the same process and event loop as the server) for ``--seconds``,
  each an event (figures before 2026-12-06 ran with the default event interval).

Five full listings alone (no report in flight) are timed too.

Baseline, in the same process: the same TLS POSTs (same path, same body) to a trivial
aiohttp handler that reads the body and answers 200 without checking or storing, so
the ratios show the cost of the bridge's checks (token HMAC, job lookup, rate bucket,
report parsing) and the store write. Whether the goal was met is printed for
information only (the exit status is 0 either way).

    .venv/bin/python bench/progress.py [--jobs 1000] [--samples 200] [--batch 10]
                                       [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

# bench/hostlist.py would shadow the python-hostlist package: not the script's folder.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from bridge.api import make_app  # noqa: E402
from bridge.backend import BackendJob, Owner, StatusBatch, SubmitRequest  # noqa: E402
from bridge.engine import Engine, EngineSettings  # noqa: E402
from bridge.feed import EventFeed  # noqa: E402
from bridge.limits import LimitSettings  # noqa: E402
from bridge.model import ensure_identity, load_trainjob  # noqa: E402
from bridge.nodes import Inventory  # noqa: E402
from bridge.runtimes import RuntimeCatalog  # noqa: E402
from bridge.service import JobService  # noqa: E402
from bridge.states import JobState  # noqa: E402
from bridge.status_server import make_status_app, serve_status, tls_context  # noqa: E402
from bridge.store import Store  # noqa: E402
from bridge.trainer_status import STATUS_PATH, job_token  # noqa: E402

ALICE = Owner(1001, 1001, "alice")
ROOT = Owner(0, 0, "root")
API_TOKEN = "bench-root-token"
SECRET = b"b" * 32
NAMESPACE = "bench"
SENDERS = 16
GOAL_S = 1.0


class IdleBackend:
    """The engine's only back end (``slurm``); the reconcile loop never runs here, so
    nothing is submitted, found or watched."""

    name = "slurm"

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def submit(self, request: SubmitRequest) -> str:
        return request.job_uid

    async def lookup(self, job_uids: Collection[str]) -> list[BackendJob]:
        return []

    async def cancel(self, backend_id: str, owner: Owner) -> None:
        pass

    async def watch(self, interval: float) -> AsyncIterator[StatusBatch]:
        while True:
            await asyncio.sleep(3600)
            yield StatusBatch((), False, 0.0)

    async def inventory(self) -> Inventory:
        return Inventory(nodes=())

    async def read_log(self, job: BackendJob, stream: str, offset: int) -> tuple[bytes, int]:
        return b"", offset


@dataclass(frozen=True)
class Job:
    id: int
    path: str
    token: str


@dataclass
class Figures:
    post: list[float]
    visible_one: list[float]
    visible_list: list[float]
    feed: list[float]
    listing_misses: int


def _make_cert(tmp: Path) -> tuple[str, str]:
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return str(cert), str(key)


def _fill(store: Store, n: int) -> list[Job]:
    jobs = []
    for i in range(n):
        tj = ensure_identity(load_trainjob(
            {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
             "metadata": {"name": f"p{i}", "namespace": NAMESPACE},
             "spec": {"runtimeRef": {"name": "plain"},
                      "trainer": {"numNodes": 1, "command": ["hostname"]}}}))
        rec = store.add(tj, ALICE, "slurm")
        store.transition(rec.id, JobState.SUBMITTED, "Submitted", backend_id=str(rec.id))
        store.transition(rec.id, JobState.RUNNING, "Running", started_at=time.time())
        jobs.append(Job(rec.id, STATUS_PATH.format(namespace=rec.namespace, name=rec.name),
                        job_token(SECRET, rec.uid)))
    return jobs


def _baseline_app() -> web.Application:
    async def accept(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"trainerStatus": {}})

    app = web.Application()
    app.router.add_post(STATUS_PATH, accept)
    return app


def _body(pct: int, marker: int) -> bytes:
    return json.dumps({"trainerStatus": {"progressPercentage": pct,
                                         "estimatedRemainingSeconds": marker}}).encode()


def _shows(view: dict[str, Any], pct: int, marker: int) -> bool:
    status = view.get("trainerStatus") or {}
    return bool(status.get("progressPercentage") == pct
                and status.get("estimatedRemainingSeconds") == marker)


async def _post(session: aiohttp.ClientSession, base: str, job: Job, body: bytes) -> int:
    async with session.post(base + job.path, data=body,
                            headers={"Authorization": f"Bearer {job.token}",
                                     "Content-Type": "application/json"}) as resp:
        await resp.read()
        return resp.status


async def _listing(api: aiohttp.ClientSession, base: str) -> dict[int, dict[str, Any]]:
    """Every job, page after page, as tqueue reads them."""
    params = {"states": "all"}
    found: dict[int, dict[str, Any]] = {}
    while True:
        async with api.get(base + "/v1/jobs", params=params) as resp:
            resp.raise_for_status()
            data = await resp.json()
        found.update((int(v["id"]), v) for v in data["items"])
        token = data["metadata"].get("continue")
        if not token:
            return found
        params["continue"] = token


async def _post_latency(session: aiohttp.ClientSession, base: str, jobs: list[Job],
                        samples: int) -> list[float]:
    out = []
    for n in range(samples):
        body = _body(min(100, n * 100 // samples), 1_000_000 + n)
        start = time.perf_counter()
        status = await _post(session, base, random.choice(jobs), body)
        out.append(time.perf_counter() - start)
        if status != 200:
            raise SystemExit(f"baseline POST answered {status}")
    return out


async def _bridge_latency(session: aiohttp.ClientSession, status_base: str,
                          api: aiohttp.ClientSession, api_base: str, store: Store,
                          feed: EventFeed, jobs: list[Job], samples: int,
                          batch: int) -> Figures:
    figs = Figures([], [], [], [], 0)
    batch_reports: list[tuple[Job, int, int]] = []
    marker = 0
    for n in range(samples):
        job, pct = random.choice(jobs), min(100, n * 100 // samples)
        marker += 1
        seq = store.last_event_id()
        start = time.perf_counter()
        status = await _post(session, status_base, job, _body(pct, marker))
        figs.post.append(time.perf_counter() - start)
        if status != 200:
            raise SystemExit(f"progress POST answered {status}")
        while True:  # the report is stored before the 200: the first GET shows it
            async with api.get(f"{api_base}/v1/jobs/{job.id}") as resp:
                resp.raise_for_status()
                view = await resp.json()
            if _shows(view, pct, marker):
                figs.visible_one.append(time.perf_counter() - start)
                break
        if not await feed.wait_after(seq, 5.0):
            raise SystemExit("the outbox feed did not see the progress event in 5 s")
        figs.feed.append(time.perf_counter() - start)
        batch_reports.append((job, pct, marker))
        if len(batch_reports) == batch or n == samples - 1:
            job = random.choice(jobs)
            marker += 1
            start = time.perf_counter()
            status = await _post(session, status_base, job, _body(pct, marker))
            if status != 200:
                raise SystemExit(f"progress POST answered {status}")
            batch_reports.append((job, pct, marker))
            latest = {j.id: (p, m) for j, p, m in batch_reports}  # a job's last report wins
            while True:
                views = await _listing(api, api_base)
                if _shows(views[job.id], pct, marker):
                    figs.visible_list.append(time.perf_counter() - start)
                    break
            figs.listing_misses += sum(1 for i, (p, m) in latest.items()
                                       if not _shows(views[i], p, m))
            batch_reports = []
    return figs


async def _throughput(base: str, ca: ssl.SSLContext, jobs: list[Job],
                      seconds: float) -> tuple[float, int]:
    """Reports answered 200 a second from SENDERS concurrent senders; and the other
    answers' count."""
    counts = [0, 0]

    async def sender(k: int) -> None:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ca, limit=1)) as s:
            n = 0
            while time.perf_counter() < deadline:
                n += 1
                status = await _post(s, base, random.choice(jobs), _body(n % 101, k))
                counts[0 if status == 200 else 1] += 1

    start = time.perf_counter()
    deadline = start + seconds
    await asyncio.gather(*(sender(k) for k in range(SENDERS)))
    return counts[0] / (time.perf_counter() - start), counts[1]


async def _run(tmp: Path, args: argparse.Namespace) -> tuple[Figures, list[float], float,
                                                             float, int, list[float]]:
    cert, key = _make_cert(tmp)
    store = Store.open(tmp / "bench.sqlite")
    jobs = _fill(store, args.jobs)
    engine = Engine(store, {"slurm": IdleBackend()}, RuntimeCatalog(),
                    EngineSettings(default_backend="slurm"))
    feed = EventFeed(store)
    feed_task = asyncio.create_task(feed.run())
    runners = [
        # No rate limits (the endpoint's own cost is measured), and every report an
        # event, as the feed figure needs (by default a job's reports become events at
        # most every 10 s, and one user's reports are limited to 20 a second).
        await serve_status(make_status_app(store, SECRET, rate=1e9, burst=10**9,
                                           user_rate=1e9, user_burst=10**9,
                                           event_interval=0.0),
                           "127.0.0.1:0", tls_context(cert, key)),
        await serve_status(_baseline_app(), "127.0.0.1:0", tls_context(cert, key)),
    ]
    api_runner = web.AppRunner(make_app(JobService(engine, feed), {API_TOKEN: ROOT},
                                        LimitSettings()), access_log=None)
    await api_runner.setup()
    await web.TCPSite(api_runner, "127.0.0.1", 0).start()
    runners.append(api_runner)
    status_base, raw_base = (f"https://127.0.0.1:{r.addresses[0][1]}" for r in runners[:2])
    api_base = f"http://127.0.0.1:{api_runner.addresses[0][1]}"
    ca = ssl.create_default_context(cafile=cert)
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ca)) as session, \
                aiohttp.ClientSession(headers={"Authorization": f"Bearer {API_TOKEN}"}) as api:
            # warm up both connections (TLS handshake, first-request costs)
            await _post_latency(session, raw_base, jobs, 10)
            await _post_latency(session, status_base, jobs, 10)
            await _listing(api, api_base)
            base_lat = await _post_latency(session, raw_base, jobs, args.samples)
            figs = await _bridge_latency(session, status_base, api, api_base, store, feed,
                                         jobs, args.samples, args.batch)
            start = time.perf_counter()
            await _listing(api, api_base)
            listing = [time.perf_counter() - start]
            for _ in range(4):
                start = time.perf_counter()
                await _listing(api, api_base)
                listing.append(time.perf_counter() - start)
        raw_rate, _ = await _throughput(raw_base, ca, jobs, args.seconds)
        rate, refused = await _throughput(status_base, ca, jobs, args.seconds)
    finally:
        for runner in runners:
            await runner.cleanup()
        feed_task.cancel()
        store.close()
    return figs, base_lat, raw_rate, rate, refused, listing


def _stats(name: str, xs: list[float]) -> str:
    return (f"{name:<44} n={len(xs):<4} p50 {statistics.median(xs) * 1e3:7.2f} ms  "
            f"p95 {_p95(xs) * 1e3:7.2f} ms  max {max(xs) * 1e3:7.2f} ms")


def _p95(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=20, method="inclusive")[18] if len(xs) >= 2 else xs[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--batch", type=int, default=10,
                        help="samples between two full listings (tqueue)")
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="how long each throughput run lasts")
    args = parser.parse_args()
    if args.jobs < 1 or args.samples < 2 or args.batch < 1:
        parser.error("--jobs >= 1, --samples >= 2 and --batch >= 1")
    with tempfile.TemporaryDirectory() as tmp:
        figs, base_lat, raw_rate, rate, refused, listing = asyncio.run(_run(Path(tmp), args))

    print(f"{args.jobs} running jobs, {args.samples} reports one at a time over one kept-alive "
          f"TLS connection; API listing as root over TCP")
    print(_stats("baseline: POST to a trivial handler (TLS)", base_lat))
    print(_stats("progress POST -> 200 (checks + store)", figs.post))
    print(_stats("POST -> visible in GET /v1/jobs/{id}", figs.visible_one))
    print(_stats(f"POST -> visible in full listing ({args.jobs} jobs)", figs.visible_list))
    print(_stats("POST -> progress event in the outbox feed", figs.feed))
    print(_stats("one full listing GET /v1/jobs?states=all", listing))
    if figs.listing_misses:
        print(f"WARNING: {figs.listing_misses} reports missing from the listing after their 200")
    print(f"throughput, {SENDERS} senders for {args.seconds:g} s: bridge {rate:,.0f} reports/s"
          f" ({refused} not 200), baseline {raw_rate:,.0f} reports/s")
    print("ratios (bridge / baseline):")
    print(f"  POST latency p50   {statistics.median(figs.post) / statistics.median(base_lat):6.2f}"
          "  (> 1: slower)")
    print(f"  POST latency p95   {_p95(figs.post) / _p95(base_lat):6.2f}")
    print(f"  throughput         {rate / raw_rate:6.2f}  (< 1: fewer reports/s)")
    worst = max(_p95(figs.visible_one), _p95(figs.visible_list), _p95(figs.feed))
    print(f"goal: p95 POST -> visible <= {GOAL_S:g} s: worst p95 above {worst * 1e3:.1f} ms, "
          f"{'met' if worst <= GOAL_S else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
