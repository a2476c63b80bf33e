"""How a job's cache servers and its tasks meet: status files in a private directory the
job's nodes share (its working directory is on the shared file system), reached only
through an open :class:`data_cache.privatedir.PrivateDir`.

Contract:

* :func:`write_status` writes server ``K``'s ``server-K.json`` atomically (mode 0600):
  ``{"address": "grpc+tls://host:port"}`` once it serves, or ``{"error": "..."}`` when
  it cannot.
* :func:`wait_for_servers` reads only status files this user wrote, not writable by
  others (a planted one would be handed the job's credentials), and returns the
  ``count`` addresses in server order once every server wrote its address; it raises
  :class:`CacheStartError` with the server's own reason as soon as one wrote an error,
  when process ``pid`` (the servers' step, or this node's server) ended first, or after
  ``timeout`` seconds.
* :func:`tell_peers` gives every server the whole list (Trainer's shard protocol needs
  it).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from data_cache.credentials import Credentials, client
from data_cache.privatedir import CacheStartError, PrivateDir

__all__ = ["CacheStartError", "PrivateDir", "alive", "status_name", "tell_peers",
           "wait_for_servers", "write_status"]

#: The largest status file read (an address or an error message).
MAX_STATUS_BYTES = 64 * 1024


def status_name(index: int) -> str:
    return f"server-{index}.json"


def write_status(directory: PrivateDir, index: int, doc: dict[str, str]) -> None:
    """Write server ``index``'s status (see the module docstring)."""
    directory.write(status_name(index), json.dumps(doc).encode())


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, ended but not reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _status(directory: PrivateDir, index: int) -> dict[str, str] | None:
    name = status_name(index)
    raw = directory.read(name, MAX_STATUS_BYTES + 1)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if (len(raw) > MAX_STATUS_BYTES or not isinstance(doc, dict)
            or not all(isinstance(v, str) for v in doc.values())
            or not ("address" in doc or "error" in doc)):
        raise CacheStartError(f"{name}: malformed status")
    return doc


def wait_for_servers(directory: PrivateDir, count: int, *, pid: int | None = None,
                     timeout: float | None = None) -> list[str]:
    """The servers' addresses once all serve (see the module docstring)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    addresses: dict[int, str] = {}
    delay = 0.01
    while True:
        for k in range(count):
            if k in addresses:
                continue
            doc = _status(directory, k)
            if doc is None:
                continue
            if "error" in doc:
                raise CacheStartError(f"cache server {k}: {doc['error']}")
            addresses[k] = doc["address"]
        if len(addresses) == count:
            return [addresses[k] for k in range(count)]
        if pid is not None and not alive(pid):
            raise CacheStartError(
                "the cache server process ended before every server was serving "
                f"({count - len(addresses)} of {count} not yet; see the job's output for "
                "their messages)")
        if deadline is not None and time.monotonic() > deadline:
            raise CacheStartError(
                f"{count - len(addresses)} cache servers were not serving after {timeout} s")
        # A status file appears once, written by a process on another node: polled, with
        # a back-off (no file-system notification reaches across nodes).
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def tell_peers(addresses: list[str], creds: Credentials, only: int | None = None) -> None:
    """Send every server (or only server ``only``) the list of all addresses."""
    import pyarrow.flight as flight

    from data_cache.server import auth_header

    options = flight.FlightCallOptions(headers=[auth_header(creds.token)], timeout=30)
    body = json.dumps(addresses).encode()
    for k, address in enumerate(addresses):
        if only is not None and k != only:
            continue
        try:
            with client(address, creds) as client_:
                list(client_.do_action(flight.Action("peers", body), options))
        except flight.FlightError as exc:
            raise CacheStartError(f"cache server {k} ({address}): {exc}") from None
