"""The daemon as an admin runs it: systemd notification, SIGTERM, TCP with tokens."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.bed import BIN, Daemon, cleanup, fresh_daemon_dir, wait_for
from tests.integration.conftest import rest_settings

pytestmark = pytest.mark.integration


def test_ready_notification_and_clean_sigterm(testbed: dict[str, str]) -> None:
    workdir = fresh_daemon_dir("notify")
    notify = workdir / "notify.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify))
    listener.settimeout(30)
    d = Daemon(workdir, rest_settings(testbed), extra_env={"NOTIFY_SOCKET": str(notify)})
    try:
        d.start()
        assert listener.recv(256) == b"READY=1"
        # READY means serving: the API answers right away.
        assert d.api("GET", "/v1/healthz").json()["ready"] is True
        assert d.stop() == 0
        assert listener.recv(256) == b"STOPPING=1"
        assert not d.socket.exists() or not d.socket.is_socket() or _refused(d.socket)
    finally:
        listener.close()
        d.stop()
        cleanup(workdir)


def test_usr1_and_usr2_dump_what_the_daemon_waits_for_and_it_goes_on(
        daemon: Daemon) -> None:
    """``kill -USR1``: every asyncio task's stack in the log; ``-USR2``: every thread's
    (bridge.daemon.dump_tasks). A daemon that does not stop gets both from the test bed
    before it is killed, so a hang says where it is."""
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGUSR1)
    wait_for(lambda: '"event": "asyncio tasks"' in daemon.log.read_text(), 10,
             "the task dump")
    daemon.proc.send_signal(signal.SIGUSR2)
    wait_for(lambda: "Current thread" in daemon.log.read_text()
             or "Thread 0x" in daemon.log.read_text(), 10, "the thread dump")
    text = daemon.log.read_text()
    assert "track-slurm" in text, text[-2000:]  # the engine's status task, named
    assert daemon.api("GET", "/v1/healthz").json()["ready"] is True
    assert daemon.stop() == 0


def _refused(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(path))
        except OSError:
            return True
    return False


def test_tcp_listener_needs_a_token_and_the_token_names_the_user(
        testbed: dict[str, str], outdir: Path) -> None:
    workdir = fresh_daemon_dir("tcp")
    tokens = workdir / "tokens.csv"
    tokens.write_text('# token,user,uid\ns3cr3t-bob,bob,1002\n')
    tokens.chmod(0o600)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    d = Daemon(workdir, rest_settings(testbed),
               daemon_settings={"tcp": f"127.0.0.1:{port}", "token_file": str(tokens)})
    d.start()
    try:
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{url}/v1/jobs").status_code == 401
        bad = httpx.get(f"{url}/v1/jobs", headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401
        # A token that is not UTF-8 is just a wrong token: 401, not a 500.
        for raw in (b"Bearer \xff\xfe", b"Bearer s3cr3t-bob\xff", b"\xffBearer x"):
            bad = httpx.get(f"{url}/v1/jobs", headers={"Authorization": raw})
            assert bad.status_code == 401, (raw, bad.status_code, bad.text)
        script = outdir / "who.sh"
        script.write_text("#!/bin/bash\nid -un\n")
        res = d.cli("root", "tbatch", "--parsable", str(script), cwd=outdir,
                    env={"HPC_BRIDGE_URL": url, "HPC_BRIDGE_TOKEN": "s3cr3t-bob"})
        assert res.returncode == 0, res.stderr
        done = d.wait_state(int(res.stdout), ["Succeeded", "Failed"])
        assert done["user"] == "bob" and done["state"] == "Succeeded", done
        log = httpx.get(f"{url}/v1/jobs/{done['id']}/log",
                        headers={"Authorization": "Bearer s3cr3t-bob"})
        assert log.text == "bob\n"
    finally:
        d.stop()
        cleanup(workdir)


def test_sigterm_while_a_back_end_is_still_starting_stops_the_daemon(
        testbed: dict[str, str]) -> None:
    """A slurmrestd that accepts and never answers holds the engine in its back end's
    start (before ready) for the request timeout, 120 s here: SIGTERM still stops the
    daemon at once, cleanly (it did not: it waited for the engine to be ready first)."""
    workdir = fresh_daemon_dir("slowstart")
    silent = socket.socket(socket.AF_UNIX)
    silent.bind(str(workdir / "silent.sock"))
    silent.listen(16)  # connections queue; none is ever answered
    settings = {**rest_settings(testbed), "rest_socket": str(workdir / "silent.sock"),
                "request_timeout": 120.0}
    d = Daemon(workdir, settings)
    try:
        workdir.chmod(0o755)
        d.write_config()
        with d.log.open("ab") as logf:
            d.proc = subprocess.Popen([str(BIN / "hpc-bridge"), "serve", "--config",
                                       str(d.config)], stdout=logf, stderr=logf,
                                      stdin=subprocess.DEVNULL)

        def serving_not_ready() -> bool:
            try:
                return d.api("GET", "/v1/healthz").json().get("ready") is False
            except (httpx.HTTPError, OSError):
                return False

        wait_for(serving_not_ready, 30, "the API to answer while the engine starts", 0.2)
        assert d.proc.poll() is None
        started = time.monotonic()
        assert d.stop() == 0
        assert time.monotonic() - started < 20, "it waited for the back end's start"
        assert '"event": "shutting down"' in d.log.read_text()
    finally:
        silent.close()
        d.stop()
        cleanup(workdir)
