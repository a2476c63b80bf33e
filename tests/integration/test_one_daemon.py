"""One active daemon per state directory and per socket (real daemons, real Slurm).

A second daemon on a state directory must refuse to start and leave the first one's
socket and jobs alone; a socket file another process still answers on is never
removed, even by a daemon with a state directory of its own."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from tests.integration.bed import BIN, Daemon, cleanup, fresh_daemon_dir, wait_for
from tests.integration.conftest import rest_settings

pytestmark = pytest.mark.integration

SLOW = "#!/bin/bash\n#SBATCH -N 1 -c 1\n#SBATCH -o slow-%j.out\nsleep 4; echo done\n"


def _serve(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "hpc-bridge"), "serve", "--config", str(config)],
                          capture_output=True, text=True, timeout=60, check=False)


def _ready(d: Daemon) -> bool:
    try:
        return bool(d.api("GET", "/v1/healthz").json()["ready"])
    except (httpx.HTTPError, OSError):
        return False


def test_a_second_daemon_on_one_state_dir_refuses_and_harms_nothing(
        testbed: dict[str, str], outdir: Path) -> None:
    workdir = fresh_daemon_dir("one")
    first = Daemon(workdir, rest_settings(testbed))
    first.start()
    try:
        script = outdir / "slow.sh"
        script.write_text(SLOW)
        ids = []
        for _ in range(3):
            res = first.cli("alice", "tbatch", "--parsable", str(script), cwd=outdir)
            assert res.returncode == 0, res.stderr
            ids.append(int(res.stdout))
        first.wait_state(ids[0], ["Running", "Succeeded"])
        # The same configuration (same state dir, same socket), as a second unit or a
        # rolling update would start it.
        second = _serve(first.config)
        assert second.returncode == 2, second.stderr
        assert first.proc is not None
        assert (f"state directory {workdir / 'state'} is in use by another hpc-bridge "
                f"daemon (pid {first.proc.pid})") in second.stderr
        # The first daemon still answers on its socket and every job completes once.
        assert first.api("GET", "/v1/healthz").json()["ready"] is True
        for job_id in ids:
            done = first.wait_state(job_id, ["Succeeded", "Failed", "Cancelled"])
            assert done["state"] == "Succeeded", done
            assert len([t for t in done["transitions"] if t["to"] == "Submitted"]) == 1
        for job_id in ids:
            assert Path(first.job(job_id)["stdout"]).read_text() == "done\n"
    finally:
        first.stop()
        cleanup(workdir)


def test_a_socket_another_daemon_answers_on_is_never_removed(
        testbed: dict[str, str]) -> None:
    workdir = fresh_daemon_dir("sock")
    other = fresh_daemon_dir("sock2")
    first = Daemon(workdir, rest_settings(testbed))
    first.start()
    try:
        # Another state directory, but the first daemon's socket path.
        second = Daemon(other, rest_settings(testbed))
        second.write_config()
        text = second.config.read_text().replace(str(second.socket), str(first.socket))
        second.config.write_text(text)
        res = _serve(second.config)
        assert res.returncode == 2, res.stderr
        assert f"another process answers on the API socket {first.socket}" in res.stderr
        assert first.api("GET", "/v1/healthz").json()["ready"] is True
        # Once the first daemon is gone (killed: its socket file stays), it is replaced.
        first.kill()
        assert first.socket.is_socket()
        takeover = subprocess.Popen([str(BIN / "hpc-bridge"), "serve", "--config",
                                     str(second.config)], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: _ready(first), 30, "the second daemon to serve on the socket")
        finally:
            takeover.terminate()
            takeover.wait(30)
    finally:
        first.stop()
        cleanup(workdir)
        cleanup(other)
