"""The daemon's side of systemd's protocols (packaging/systemd/): readiness and
watchdog notifications (``sd_notify``) and socket activation (``sd_listen_fds``).

Each protocol is a few lines of environment parsing and one datagram, so no
dependency: ``systemd-python`` needs libsystemd headers to build and would pull a C
extension into a daemon that otherwise has none.

* :func:`sd_notify` — one datagram to ``$NOTIFY_SOCKET`` (abstract when it starts
  with ``@``); a no-op without it.
* :func:`watchdog_interval` — half of ``$WATCHDOG_USEC`` (the interval systemd asks
  pings at), or None when the watchdog is off or meant for another process
  (``$WATCHDOG_PID``).
* :func:`watchdog_pings` — the task that sends ``WATCHDOG=1`` at that interval from
  the event loop: a loop that blocks stops pinging, and systemd restarts the daemon.
* :func:`listen_fds` — the sockets systemd passed (``$LISTEN_FDS`` from fd 3, for this
  pid only); the variables are removed so programs the daemon runs never see them.
"""

from __future__ import annotations

import asyncio
import os
import socket

SD_LISTEN_FDS_START = 3


def sd_notify(state: str) -> bool:
    """Send ``state`` (e.g. ``READY=1``) to systemd if it is listening; whether it was."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(address)
            sock.sendall(state.encode())
        except OSError:
            return False
    return True


def _for_this_pid(var: str) -> bool:
    pid = os.environ.get(var)
    return pid is None or (pid.isdigit() and int(pid) == os.getpid())


def watchdog_interval() -> float | None:
    """Seconds between ``WATCHDOG=1`` pings (half of ``WATCHDOG_USEC``), or None."""
    usec = os.environ.get("WATCHDOG_USEC", "")
    if not usec.isdigit() or int(usec) == 0 or not _for_this_pid("WATCHDOG_PID"):
        return None
    return int(usec) / 2 / 1_000_000


async def watchdog_pings(interval: float) -> None:
    """Ping systemd's watchdog every ``interval`` seconds until cancelled."""
    while True:
        sd_notify("WATCHDOG=1")
        await asyncio.sleep(interval)


def listen_fds() -> list[socket.socket]:
    """The unix stream sockets systemd passed to this process (socket activation).

    Raises ValueError for a passed descriptor that is not a listening unix stream
    socket (the unit's ``ListenStream=`` must be a path): the API identifies callers
    by ``SO_PEERCRED``, which only a unix socket gives."""
    count = os.environ.get("LISTEN_FDS", "")
    mine = os.environ.get("LISTEN_PID", "").isdigit() and _for_this_pid("LISTEN_PID")
    for var in ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"):
        os.environ.pop(var, None)
    if not mine or not count.isdigit():
        return []
    sockets = []
    for fd in range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + int(count)):
        os.set_inheritable(fd, False)
        sock = socket.socket(fileno=fd)
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
            raise ValueError(f"systemd passed fd {fd}, which is not a unix stream socket "
                             f"(the socket unit's ListenStream= must be a path)")
        sockets.append(sock)
    return sockets
