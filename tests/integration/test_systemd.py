"""The shipped systemd units, checked with Debian's systemd tools (no systemd as PID 1
needed): ``systemd-analyze verify`` on packaging/systemd/, ``systemd-socket-activate``
handing the daemon its API socket (``LISTEN_FDS``) and the CLI working through it, and
the watchdog protocol: ``READY=1``, periodic ``WATCHDOG=1``, and a daemon that stops
pinging (SIGSTOP) seen as hung by the same rule systemd applies (no ping within
``WatchdogSec``)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.bed import BIN, REPO, Daemon, cleanup, fresh_daemon_dir, wait_for
from tests.integration.conftest import rest_settings
from tests.requirements import require

pytestmark = pytest.mark.integration

UNITS = REPO / "packaging" / "systemd"
SHIPPED_EXEC = "/opt/hpc-bridge/bin/hpc-bridge"


def _tool(name: str) -> str:
    path = shutil.which(name)
    require(path is not None, f"{name} is missing: apt-get install -y systemd")
    assert path is not None
    return path


def test_the_units_verify_clean(tmp_path: Path) -> None:
    analyze = _tool("systemd-analyze")
    service = (UNITS / "hpc-bridge.service").read_text()
    assert f"ExecStart={SHIPPED_EXEC} serve" in service
    # verify checks that ExecStart's program exists: point it at this checkout's.
    (tmp_path / "hpc-bridge.service").write_text(
        service.replace(SHIPPED_EXEC, str(BIN / "hpc-bridge")))
    shutil.copy(UNITS / "hpc-bridge.socket", tmp_path)
    res = subprocess.run([analyze, "verify", str(tmp_path / "hpc-bridge.service"),
                          str(tmp_path / "hpc-bridge.socket")],
                         capture_output=True, text=True, timeout=60, check=False)
    # rc 0 and no output: an unknown or misspelt key only warns, so warnings fail too.
    assert (res.returncode, res.stdout, res.stderr) == (0, "", ""), res
    for must in ("Type=notify", "WatchdogSec=", "StateDirectory=hpc-bridge",
                 "StateDirectoryMode=0700", "RuntimeDirectory=hpc-bridge",
                 "RuntimeDirectoryPreserve=yes", "NoNewPrivileges=yes"):
        assert must in service, must
    security = subprocess.run([analyze, "security", "--offline=yes",
                               str(tmp_path / "hpc-bridge.service")],
                              capture_output=True, text=True, timeout=60, check=False)
    assert "Overall exposure level for hpc-bridge.service" in security.stdout, security
    assert "Service cannot issue chroot()" in security.stdout
    # client_root's drop-in, where a site installs it (verify reads the unit's .d/;
    # a misspelt key there is told on stderr); systemd's own assessment shows that it
    # was read and what it allows.
    (tmp_path / "hpc-bridge.service.d").mkdir()
    shutil.copy(UNITS / "client-root.conf", tmp_path / "hpc-bridge.service.d")
    res = subprocess.run([analyze, "verify", str(tmp_path / "hpc-bridge.service"),
                          str(tmp_path / "hpc-bridge.socket")],
                         capture_output=True, text=True, timeout=60, check=False)
    assert (res.returncode, res.stdout, res.stderr) == (0, "", ""), res
    widened = subprocess.run([analyze, "security", "--offline=yes",
                              str(tmp_path / "hpc-bridge.service")],
                             capture_output=True, text=True, timeout=60, check=False)
    assert "Service may issue chroot()" in widened.stdout, widened
    assert "chroot is allowed" in widened.stdout, widened


class NotifyListener:
    """A ``NOTIFY_SOCKET`` like systemd's: datagrams from the service, in order."""

    def __init__(self, path: Path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))

    def next(self, timeout: float) -> str | None:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(4096).decode()
        except TimeoutError:
            return None

    def wait_for(self, message: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if self.next(left) == message:
                return
        raise AssertionError(f"no {message} within {timeout}s")

    def hung(self, watchdog_sec: float, observe: float) -> bool:
        """systemd's rule: hung when no ``WATCHDOG=1`` arrives within ``watchdog_sec``
        of the previous one (observed for ``observe`` seconds at most)."""
        end = time.monotonic() + observe
        last = time.monotonic()
        while time.monotonic() < end:
            message = self.next(max(0.01, last + watchdog_sec - time.monotonic()))
            if message is None:
                return True
            if message == "WATCHDOG=1":
                last = time.monotonic()
        return False

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = fresh_daemon_dir("systemd")
    yield path
    cleanup(path)


def test_socket_activation_watchdog_and_a_hung_daemon(
        testbed: dict[str, str], workdir: Path, outdir: Path) -> None:
    activate = _tool("systemd-socket-activate")
    daemon = Daemon(workdir, rest_settings(testbed))
    daemon.write_config()  # its own socket setting names daemon.socket: never created
    listen = workdir / "activated" / "bridge.sock"
    listen.parent.mkdir(mode=0o755)
    notify = NotifyListener(workdir / "notify.sock")
    watchdog_usec = 1_000_000
    proc = subprocess.Popen(
        [activate, "-l", str(listen),
         "-E", f"NOTIFY_SOCKET={notify.path}", "-E", f"WATCHDOG_USEC={watchdog_usec}",
         str(BIN / "hpc-bridge"), "serve", "--config", str(daemon.config)],
        stdin=subprocess.DEVNULL, stdout=daemon.log.open("ab"), stderr=subprocess.STDOUT)
    try:
        wait_for(listen.is_socket, 30, "systemd-socket-activate to listen")
        listen.chmod(0o666)  # what the socket unit's SocketMode=0666 does: alice may connect
        # The first connection starts the daemon (as systemd does); it is served.
        cli_env = {"HPC_BRIDGE_SOCKET": str(listen)}
        script = outdir / "who.sh"
        script.write_text("#!/bin/bash\n#SBATCH -o who-%j.out\nid -un\n")
        res = daemon.cli("alice", "tbatch", "--parsable", str(script), cwd=outdir, env=cli_env)
        assert res.returncode == 0, res.stderr + daemon.log.read_text()[-2000:]
        job_id = res.stdout.strip()
        notify.wait_for("READY=1", 30)
        assert not daemon.socket.exists()  # the inherited socket replaced its own
        queue = daemon.cli("alice", "tqueue", env=cli_env)
        assert queue.returncode == 0 and job_id in queue.stdout, queue
        try:
            wait_for(lambda: _finished(daemon, listen, job_id), 120, f"job {job_id} to finish")
        except AssertionError as exc:  # what the daemon saw, to tell why
            raise AssertionError(f"{exc}\n{daemon.log.read_text()[-4000:]}") from None
        shown = daemon.cli("alice", "tshow", job_id, env=cli_env)
        assert "Succeeded" in shown.stdout, shown
        assert [p.read_text() for p in outdir.glob("who-*.out")] == ["alice\n"]
        # Watchdog: pings at half of WATCHDOG_USEC, so never hung while it runs ...
        assert not notify.hung(watchdog_usec / 1e6, observe=3.0)
        # ... and seen as hung once it stops pinging.
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            assert notify.hung(watchdog_usec / 1e6, observe=5.0)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        notify.wait_for("WATCHDOG=1", 5)  # pings again once resumed
        proc.terminate()
        assert proc.wait(30) == 0
        notify.wait_for("STOPPING=1", 5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        notify.close()


def _finished(daemon: Daemon, listen: Path, job_id: str) -> bool:
    res = daemon.cli("alice", "tshow", job_id, env={"HPC_BRIDGE_SOCKET": str(listen)})
    return res.returncode == 0 and any(s in res.stdout for s in ("Succeeded", "Failed"))
