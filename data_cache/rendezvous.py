"""How a job's cache servers and its tasks meet: status files in a private directory the
job's nodes share (its working directory is on the shared file system).

Contract:

* :func:`write_status` writes ``DIR/server-K.json`` atomically (mode 0600, a temporary
  file then ``rename``): ``{"address": "grpc://host:port"}`` once server ``K`` serves,
  or ``{"error": "..."}`` when it cannot.
* :func:`wait_for_servers` checks that the directory is private
  (:func:`check_private`) and reads only status files this user wrote, not writable by
  others (a planted one would be handed the job's token); it returns the ``count``
  addresses in server order once every
  server wrote its address, and raises :class:`CacheStartError` with the server's own
  reason as soon as one wrote an error, when process ``pid`` (the servers' step or
  process) ended first, or after ``timeout`` seconds.
* :func:`tell_peers` gives every server the whole list (Trainer's shard protocol needs
  it).
* :func:`private_dir` makes (or, made by another task of the job, checks) a directory
  that is this user's alone: a real directory, not a link, owned by the caller, no
  permission for group or others. Anything else raises :class:`CacheStartError`
  (another user planted it).
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

from data_cache.credentials import Credentials, client

__all__ = ["CacheStartError", "alive", "check_private", "private_dir", "tell_peers",
           "wait_for_servers", "write_status"]


class CacheStartError(Exception):
    """The cache did not start; the message says which server and why."""


def write_status(path: Path, doc: dict[str, str]) -> None:
    """Write ``doc`` to ``path`` atomically, readable by the owner only."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh)
    os.replace(tmp, path)


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


#: The largest status file read (an address or an error message).
MAX_STATUS_BYTES = 64 * 1024


def _status(path: Path) -> dict[str, str] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CacheStartError(f"{path.name}: unreadable status: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o022:
            # Only this user's servers write here; anything else was planted (and would
            # be handed the job's token).
            raise CacheStartError(f"{path.name}: not written by this user's cache server")
        raw = fh.read(MAX_STATUS_BYTES + 1)
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if (len(raw) > MAX_STATUS_BYTES or not isinstance(doc, dict)
            or not all(isinstance(v, str) for v in doc.values())
            or not ("address" in doc or "error" in doc)):
        raise CacheStartError(f"{path.name}: malformed status")
    return doc


def wait_for_servers(directory: Path, count: int, *, pid: int | None = None,
                     timeout: float | None = None) -> list[str]:
    """The servers' addresses once all serve (see the module docstring)."""
    check_private(directory)
    deadline = None if timeout is None else time.monotonic() + timeout
    addresses: dict[int, str] = {}
    delay = 0.01
    while True:
        for k in range(count):
            if k in addresses:
                continue
            doc = _status(directory / f"server-{k}.json")
            if doc is None:
                continue
            if "error" in doc:
                raise CacheStartError(f"cache server {k}: {doc['error']}")
            addresses[k] = doc["address"]
        if len(addresses) == count:
            return [addresses[k] for k in range(count)]
        if pid is not None and not alive(pid):
            raise CacheStartError(
                f"the cache servers ended before {count - len(addresses)} of them were "
                "serving (see the job's output for their messages)")
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


def private_dir(path: Path) -> bool:
    """Make ``path`` (mode 0700) or check the one another task of the job made; True
    when this call made it (see the module docstring)."""
    try:
        os.mkdir(path, 0o700)
        made = True
    except FileExistsError:
        made = False
    check_private(path)
    return made


def check_private(path: Path) -> None:
    """Raise :class:`CacheStartError` unless ``path`` is a real directory of this user
    with no permission for anyone else."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise CacheStartError(f"{path}: {exc.strerror}") from None
    if (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid()
            or stat.S_IMODE(st.st_mode) & 0o077):
        raise CacheStartError(f"{path} is not a private directory of this user "
                              "(someone else made it): the cache does not use it")
