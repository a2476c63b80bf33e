"""Events without MQTT and metrics, on the real bed: ``GET /v1/events`` and ``twatch``
as alice and bob against a real daemon on the real Slurm, and a ``/metrics`` scrape
(docs/events.md)."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.bed import BIN, Daemon, cleanup, fresh_daemon_dir, wait_for
from tests.integration.conftest import rest_settings
from tests.integration.mqtt import bed_broker, free_port, mqtt_toml
from tests.integration.test_events_mqtt import _submit
from tests.requirements import require

pytestmark = pytest.mark.integration


def _watch_once(d: Daemon, user: str) -> list[dict[str, object]]:
    res = d.cli(user, "twatch", "--since", "0", "--once", "--json")
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in res.stdout.splitlines()]


def test_events_show_each_user_only_their_own_jobs(daemon: Daemon, outdir: Path) -> None:
    # alice follows from now on, before anything happens (a long-poll that must wake).
    env = [f"HPC_BRIDGE_SOCKET={daemon.socket}", f"PATH={BIN}:/usr/bin:/bin", "LANG=C.UTF-8"]
    follower = subprocess.Popen(["runuser", "-u", "alice", "--", "env", "-i", *env,
                                 str(BIN / "twatch")], stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(follower.stdout.readline, "")),
                              daemon=True)
    reader.start()
    try:
        mine = _submit(daemon, "alice", outdir, "true")
        theirs = _submit(daemon, "bob", outdir, "true")
        for job_id in (mine, theirs):
            daemon.wait_state(job_id, ["Succeeded", "Failed"])
        alice, bob = _watch_once(daemon, "alice"), _watch_once(daemon, "bob")
        assert {e["jobId"] for e in alice} == {mine}
        assert {e["jobId"] for e in bob} == {theirs}
        assert alice[-1]["state"] == "Succeeded" and alice[-1]["user"] == "alice"
        everything = daemon.api("GET", "/v1/events", params={"since": 0, "timeout": 0}).json()
        assert {e["jobId"] for e in everything["items"]} == {mine, theirs}  # root: all
        wait_for(lambda: any("->Succeeded" in line for line in lines), 30,
                 "alice's twatch to print her job's end")
        followed = [line for line in lines if line.strip()]
        assert all(f" {mine} " in line and " alice " in line for line in followed), followed
        assert not any(f" {theirs} " in line for line in followed)
    finally:
        follower.terminate()
        follower.wait(10)


@pytest.mark.parametrize(("query", "field"), [
    ({"since": "-1"}, "since"), ({"since": "x"}, "since"), ({"timeout": "61"}, "timeout"),
    ({"timeout": "nan"}, "timeout"), ({"limit": "0"}, "limit")])
def test_bad_event_queries_are_400_naming_the_parameter(
        daemon: Daemon, query: dict[str, str], field: str) -> None:
    res = daemon.api("GET", "/v1/events", params=query)
    assert res.status_code == 400 and res.json()["error"].startswith(f"{field}:"), res.text


def test_metrics_scrape_shows_jobs_counters_and_publishing(
        testbed: dict[str, str], outdir: Path) -> None:
    broker = bed_broker()
    require(broker is not None, "the bed's mosquitto is not up: bash testbed/mosquitto.sh up")
    assert broker is not None
    port = free_port()
    workdir = fresh_daemon_dir("metrics")
    d = Daemon(workdir, rest_settings(testbed),
               extra_toml=mqtt_toml(*broker, "hpcb-metrics-test")
               + f'\n[metrics]\nlisten = "127.0.0.1:{port}"\n')
    d.start()
    try:
        job_id = _submit(d, "alice", outdir, "true")
        assert d.wait_state(job_id, ["Succeeded", "Failed"])["state"] == "Succeeded"
        assert d.api("GET", "/v1/jobs/999999").status_code == 404

        def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
            return {(s.name, tuple(sorted(s.labels.items()))): s.value
                    for fam in text_string_to_metric_families(text) for s in fam.samples}

        def published() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
            m = scrape()
            return m if m[("hpcbridge_outbox_backlog", ())] == 0 else None

        m = wait_for(published, 30, "the outbox to drain")
        transitions = len(d.job(job_id)["transitions"])
        assert m[("hpcbridge_jobs", (("backend", "slurm"), ("state", "Succeeded")))] == 1
        assert m[("hpcbridge_admissions_total", (("backend", "slurm"),))] == 1
        assert m[("hpcbridge_submissions_total", (("backend", "slurm"), ("result", "ok")))] == 1
        assert m[("hpcbridge_submit_latency_seconds_count", (("backend", "slurm"),))] == 1
        assert m[("hpcbridge_events_published_total", ())] == transitions
        assert m[("hpcbridge_mqtt_connected", ())] == 1
        route = (("code", "201"), ("method", "POST"), ("route", "/v1/sbatch"))  # tbatch
        assert m[("hpcbridge_api_requests_total", route)] == 1
        missing = (("code", "404"), ("method", "GET"), ("route", "/v1/jobs/{ref}"))
        assert m[("hpcbridge_api_requests_total", missing)] == 1
        submit = (("backend", "slurm"), ("call", "submit"))
        assert m[("hpcbridge_backend_call_seconds_count", submit)] == 1
        polls = [v for (name, labels), v in m.items()
                 if name == "hpcbridge_backend_poll_jobs_count"]
        assert sum(polls) >= 1
        assert d.stop() == 0  # and the metrics listener closes with the daemon
    finally:
        d.stop()
        cleanup(workdir)
