"""One daemon per state directory: an exclusive ``flock`` on ``STATE_DIR/daemon.lock``.

Two daemons on one store would both submit the same queued jobs, both answer the same
TrainJob CRs and remove each other's socket. :func:`acquire` takes the lock without
waiting; if another process holds it, :class:`StateDirLocked` names that process's pid
(written into the lock file by the holder) so the admin knows what to stop.

Contract:

* The lock lives as long as the returned :class:`StateLock` is open (the kernel drops
  it when the process dies, however it dies: no stale lock after SIGKILL or a crash).
* The file descriptor is close-on-exec, so programs the daemon runs (``sbatch`` …)
  never inherit the lock and never keep it after the daemon is gone.
* The lock file itself is never removed (removing it would let a third process lock a
  new inode while the second still holds the old one).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from bridge.errors import BridgeError

LOCK_NAME = "daemon.lock"


class StateDirLocked(BridgeError, ValueError):
    """Another live process holds the state directory's lock."""

    def __init__(self, state_dir: Path, pid: int | None):
        self.pid = pid
        holder = f"pid {pid}" if pid else "another process (pid not yet written)"
        super().__init__(
            f"state directory {state_dir} is in use by another hpc-bridge daemon ({holder}); "
            f"only one daemon may run on a state directory: stop that one first")


class StateLock:
    """The held lock; :meth:`release` (or process exit) gives it up."""

    def __init__(self, fd: int, path: Path):
        self._fd: int | None = fd
        self.path = path

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None


def holder_pid(path: Path) -> int | None:
    """The pid the holder wrote into the lock file, if any."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def acquire(state_dir: Path) -> StateLock:
    """Lock ``state_dir`` for this process or raise :class:`StateDirLocked`."""
    path = state_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StateDirLocked(state_dir, holder_pid(path)) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return StateLock(fd, path)
