"""The job event stream on the real bed: a real daemon on the real Slurm publishing to a
real mosquitto (the bed's, or one of the test's own to stop and restart), read by a
real MQTT subscriber (docs/events.md)."""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.integration.bed import Daemon, cleanup, fresh_daemon_dir, wait_for
from tests.integration.conftest import rest_settings
from tests.integration.mqtt import (
    OwnBroker,
    Subscriber,
    bed_broker,
    make_tls_files,
    mqtt_toml,
)
from tests.requirements import require

pytestmark = pytest.mark.integration

PAYLOAD_KEYS = {"id", "type", "time", "jobId", "uid", "namespace", "name", "user",
                "backend", "backendId", "from", "state", "reason", "message", "exitCode"}
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def _broker() -> tuple[str, int]:
    broker = bed_broker()
    require(broker is not None, "the bed's mosquitto is not up (/run/hpc-bridge-testbed/"
                                "mosquitto.env missing); start it: bash testbed/mosquitto.sh up")
    assert broker is not None
    return broker


def _submit(d: Daemon, user: str, outdir: Path, command: str) -> int:
    script = outdir / f"job-{uuid.uuid4().hex[:8]}.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH --time=00:05:00\n#SBATCH --output=%x-%j.out\n"
                      f"{command}\n")
    script.chmod(0o755)
    res = d.cli(user, "tbatch", "--parsable", str(script), cwd=outdir)
    assert res.returncode == 0, res.stderr
    return int(res.stdout)


def _recorded(d: Daemon, job_ids: set[int]) -> list[dict[str, Any]]:
    """Every event the daemon recorded for ``job_ids`` (root's view of /v1/events)."""
    items: list[dict[str, Any]] = []
    since = 0
    while True:
        page = d.api("GET", "/v1/events", params={"since": since, "timeout": 0}).json()
        if not page["items"]:
            return [e for e in items if e["jobId"] in job_ids]
        items += page["items"]
        since = page["next"]


def _states(d: Daemon, job_id: int) -> list[str]:
    return [t["to"] for t in d.job(job_id)["transitions"]]


def test_a_jobs_transitions_arrive_in_order_with_the_documented_payload(
        testbed: dict[str, str], outdir: Path) -> None:
    host, port = _broker()
    prefix = f"hpcb-test/{uuid.uuid4().hex[:8]}"
    sub = Subscriber(host, port, f"{prefix}/jobs/+/events", f"ev-{uuid.uuid4().hex}")
    workdir = fresh_daemon_dir("events")
    d = Daemon(workdir, rest_settings(testbed), extra_toml=mqtt_toml(host, port, prefix))
    d.start()
    try:
        job_id = _submit(d, "alice", outdir, "echo hi")
        done = d.wait_state(job_id, ["Succeeded", "Failed"])
        assert done["state"] == "Succeeded", done
        wait_for(lambda: any(e["jobId"] == job_id and e["state"] == "Succeeded"
                             for e in sub.events()), 30, "the Succeeded event on MQTT")
        got = [e for e in sub.events() if e["jobId"] == job_id]
        assert [e["state"] for e in got] == _states(d, job_id)
        assert [e["id"] for e in got] == sorted({e["id"] for e in got})
        assert got == _recorded(d, {job_id})  # the same payload as /v1/events
        first, last = got[0], got[-1]
        assert set(first) == PAYLOAD_KEYS and first["type"] == "transition"
        assert first["from"] is None and first["state"] == "Pending"
        assert TIME.match(last["time"]), last
        assert (last["user"], last["backend"], last["uid"]) == ("alice", "slurm", done["uid"])
        assert last["backendId"] == done["backendId"] and last["exitCode"] == 0
        # A late subscriber gets the job's latest state, retained.
        late = Subscriber(host, port, f"{prefix}/jobs/{job_id}/state", f"st-{uuid.uuid4().hex}")
        try:
            retained = wait_for(lambda: late.messages, 10, "the retained state")
            assert retained[0][2] is True and retained[0][1] == last
        finally:
            late.close()
        assert d.stop() == 0  # SIGTERM ends the publisher and the feed cleanly
    finally:
        sub.close()
        d.stop()
        cleanup(workdir)


def test_broker_outage_mid_burst_loses_nothing_and_keeps_per_job_order(
        testbed: dict[str, str], outdir: Path) -> None:
    workdir = fresh_daemon_dir("mqtt-outage")
    broker = OwnBroker(workdir)
    broker.start()
    prefix = "hpcb-outage"
    sub = Subscriber("127.0.0.1", broker.port, f"{prefix}/jobs/+/events",
                     f"outage-{uuid.uuid4().hex}")
    d = Daemon(workdir, rest_settings(testbed),
               extra_toml=mqtt_toml("127.0.0.1", broker.port, prefix, batch_size=7))
    d.start()
    try:
        jobs = {_submit(d, "alice", outdir, f"sleep 0.{i}") for i in range(12)}
        wait_for(lambda: len(sub.events()) >= 3, 60, "the first events on MQTT", 0.05)
        broker.stop()
        seen_before = max(e["id"] for e in sub.events())
        for job_id in jobs:  # the burst goes on while the broker is down
            d.wait_state(job_id, ["Succeeded", "Failed"])
        down = d.api("GET", "/v1/events", params={"since": seen_before, "timeout": 0}).json()
        assert down["items"], "no event was written while the broker was down"
        broker.start()
        recorded = _recorded(d, jobs)
        want = {e["id"] for e in recorded}
        wait_for(lambda: want <= {e["id"] for e in sub.events()}, 60,
                 "every recorded event on MQTT after the restart")
        got = [e for e in sub.events() if e["jobId"] in jobs]
        by_id = {e["id"]: e for e in recorded}
        for event in got:  # duplicates only as the same event, exactly as recorded
            assert event == by_id[event["id"]]
        for job_id in jobs:
            firsts: list[int] = []
            for event in got:
                if event["jobId"] == job_id and event["id"] not in firsts:
                    firsts.append(event["id"])
            assert firsts == sorted(firsts), (job_id, firsts)
            assert [by_id[i]["state"] for i in firsts] == _states(d, job_id)
        assert "MQTT broker unavailable" in d.log.read_text()  # the outage was seen
    finally:
        sub.close()
        d.stop()
        broker.stop()
        cleanup(workdir)


def test_a_password_file_others_may_read_keeps_the_daemon_from_starting(
        testbed: dict[str, str]) -> None:
    host, port = _broker()
    workdir = fresh_daemon_dir("mqtt-secret")
    secret = workdir / "mqtt.password"
    secret.write_text("s3cret\n")
    secret.chmod(0o644)
    d = Daemon(workdir, rest_settings(testbed), extra_toml=mqtt_toml(
        host, port, "hpcb-secret", username="bridge", password_file=str(secret)))
    try:
        with pytest.raises(AssertionError, match=r"MQTT password file .* mode 0644"):
            d.start()
        secret.chmod(0o600)
        d.start()  # readable by its owner only: accepted
        assert d.api("GET", "/v1/healthz").json()["ready"] is True
    finally:
        d.stop()
        cleanup(workdir)


def test_events_reach_a_broker_that_wants_tls_and_a_password(
        testbed: dict[str, str], outdir: Path) -> None:
    workdir = fresh_daemon_dir("mqtt-tls")
    ca, cert, key = make_tls_files(workdir)
    users = workdir / "mosquitto.passwd"
    subprocess.run(["mosquitto_passwd", "-c", "-b", str(users), "bridge", "s3cret"],
                   check=True, capture_output=True, timeout=30)
    broker = OwnBroker(workdir, f"cafile {ca}\ncertfile {cert}\nkeyfile {key}\n"
                                f"password_file {users}\n")
    broker.start()
    secret = workdir / "mqtt.password"
    secret.write_text("s3cret\n")
    secret.chmod(0o600)
    sub = Subscriber("127.0.0.1", broker.port, "hpcb-tls/jobs/+/events",
                     f"tls-{uuid.uuid4().hex}", ca_file=ca, auth=("bridge", "s3cret"))
    d = Daemon(workdir, rest_settings(testbed), extra_toml=mqtt_toml(
        "127.0.0.1", broker.port, "hpcb-tls", tls=True, ca_file=str(ca),
        username="bridge", password_file=str(secret)))
    d.start()
    try:
        job_id = _submit(d, "alice", outdir, "true")
        d.wait_state(job_id, ["Succeeded", "Failed"])
        wait_for(lambda: [e["state"] for e in sub.events() if e["jobId"] == job_id]
                 == _states(d, job_id), 30, "the job's events over TLS")
    finally:
        sub.close()
        d.stop()
        broker.stop()
        cleanup(workdir)
