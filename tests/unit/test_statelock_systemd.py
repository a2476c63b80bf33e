"""The state-directory lock and the systemd protocol helpers (pure process-level logic;
the daemon under systemd's own tools is tests/integration/test_systemd.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.statelock import StateDirLocked, acquire
from bridge.systemd import listen_fds, sd_notify, watchdog_interval

HOLD = """
import sys, time
from pathlib import Path
from bridge.statelock import acquire
lock = acquire(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()
"""


def test_a_second_holder_is_refused_with_the_first_ones_pid(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(StateDirLocked, match=f"pid {holder.pid}") as err:
            acquire(tmp_path)
        assert err.value.pid == holder.pid
    finally:
        holder.kill()  # dies without releasing: the kernel drops the lock
        holder.wait()
    lock = acquire(tmp_path)
    assert (tmp_path / "daemon.lock").read_text() == f"{os.getpid()}\n"
    lock.release()
    acquire(tmp_path).release()


def test_the_lock_is_not_inherited_by_programs_the_daemon_runs(tmp_path: Path) -> None:
    lock = acquire(tmp_path)
    child = subprocess.Popen(["sleep", "30"])
    try:
        lock.release()
        acquire(tmp_path).release()  # the child does not hold it
    finally:
        child.kill()
        child.wait()


def test_watchdog_interval_is_half_of_watchdog_usec_for_this_pid_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    assert watchdog_interval() is None
    monkeypatch.setenv("WATCHDOG_USEC", "3000000")
    assert watchdog_interval() == 1.5
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))
    assert watchdog_interval() is None
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert watchdog_interval() == 1.5
    monkeypatch.setenv("WATCHDOG_USEC", "0")
    assert watchdog_interval() is None


def test_sd_notify_sends_one_datagram_and_is_a_no_op_without_a_socket(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sd_notify("READY=1") is False
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(str(tmp_path / "n.sock"))
        monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "n.sock"))
        assert sd_notify("WATCHDOG=1") is True
        assert listener.recv(64) == b"WATCHDOG=1"


def test_listen_fds_ignores_sockets_meant_for_another_pid_and_clears_the_variables(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LISTEN_FDS", "1")
    monkeypatch.setenv("LISTEN_PID", str(os.getpid() + 1))
    assert listen_fds() == []
    assert "LISTEN_FDS" not in os.environ and "LISTEN_PID" not in os.environ


LISTEN_CHILD = """
import os, socket
from bridge.systemd import listen_fds
os.environ["LISTEN_PID"] = str(os.getpid())
try:
    print([s.family.name for s in listen_fds()])
except ValueError as exc:
    print("refused:", exc)
"""


@pytest.mark.parametrize(("family", "expected"), [
    (socket.AF_UNIX, "['AF_UNIX']"),
    (socket.AF_INET, "refused: systemd passed fd 3, which is not a unix stream socket"),
])
def test_listen_fds_takes_unix_stream_sockets_from_fd_3(
        family: socket.AddressFamily, expected: str, tmp_path: Path) -> None:
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind(str(tmp_path / "s.sock") if family == socket.AF_UNIX else ("127.0.0.1", 0))
        sock.listen()
        out = subprocess.run([sys.executable, "-c", LISTEN_CHILD], pass_fds=(3,),
                             env={**os.environ, "LISTEN_FDS": "1"}, capture_output=True,
                             text=True, check=True,
                             preexec_fn=lambda: os.dup2(sock.fileno(), 3))
    assert out.stdout.startswith(expected), out.stderr
