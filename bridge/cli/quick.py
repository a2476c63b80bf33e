"""The quick paths of ``tqueue`` and ``tbatch``: their console scripts' entry points.

These two commands run in loops and under ``watch`` and are measured against ``squeue``
and the interpreter's own start (docs/operations.md, ``bench/scale.py``). Their common
case needs no option parser, no JSON listing and no client class: this module imports
only what the interpreter has loaded already, the C modules ``_socket`` and ``_json``,
:mod:`bridge.http11` and the few names it needs, and speaks to the daemon's unix socket
itself.

* ``tqueue`` with no options but ``-h/--noheader``, ``-r/--array``, ``-u/--user`` (one
  user) and ``--me``: asks the daemon for squeue's table (``GET /v1/jobs``, ``Accept:
  text/plain``, as :meth:`bridge.client.BridgeClient.queue_table`) and writes it as it
  arrives.
* ``tbatch`` (not ``--help``/``--version``): builds the request as
  :mod:`bridge.cli.tbatch` does (:mod:`bridge.cli.sbatch_request`), sends it once with
  a fresh ``Idempotency-Key``, and prints the daemon's answer.

Contract: what they print and their exit statuses are those of the full commands
(:func:`bridge.cli.tqueue.tqueue_main`, :func:`bridge.cli.tbatch.tbatch_main`), which
they hand over to for anything else, and each request is sent as often as the full
command would send it:

* before any request (other options, ``HPC_BRIDGE_URL`` for TCP, a daemon that cannot
  be reached: the full command says why, or waits while its listen queue is full);
* with the daemon's whole answer when it is not the expected success (a refusal, a
  429, a ``--test-only`` estimate, an answer not as expected): the full client reads
  it as if it had come to it, and asks again only where it would have (a 429, after its
  ``Retry-After``);
* ``tbatch`` with the request it built (a script read from stdin is never read twice)
  and its ``Idempotency-Key``: when no whole answer came, the full client sends it again
  under that key, and the daemon answers a repeat with the job the first one made;
* ``tqueue`` asks again, as the full command does, when the daemon answers JSON (an
  older daemon without the table).

Once ``tqueue``'s table has begun, a failure is reported as the full command reports
it (``tqueue: error: ...``, status 1).
"""

from __future__ import annotations

import _socket
import os
import sys

from bridge.client_env import (
    DEFAULT_SOCKET,
    DEFAULT_TIMEOUT,
    ENV_SOCKET,
    ENV_URL,
    IDEMPOTENCY_HEADER,
    USER_AGENT,
)
from bridge.http11 import Connection, ProtocolError
from bridge.queue_header import HEADER
from bridge.quick_json import dumps, loads

TYPE_CHECKING = False  # typing costs ~2 ms of start-up
if TYPE_CHECKING:
    from typing import Any

    from bridge.http11 import Response

__all__ = ["tbatch_main", "tqueue_main"]

#: User names sent as they are in a query (others go through the full command's quoting).
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _socket_path() -> str | None:
    """The daemon's unix socket, or None when the environment names a TCP daemon."""
    if os.environ.get(ENV_URL):
        return None
    path = os.environ.get(ENV_SOCKET) or DEFAULT_SOCKET
    return None if "\0" in path else path


def _unix(path: str) -> _socket.socket:
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(DEFAULT_TIMEOUT)
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


def _connect(path: str) -> Connection | None:
    """A connection to the daemon, or None when there is none to be had (the full
    command then says why, or waits while the daemon's listen queue is full)."""
    connection = Connection(lambda: _unix(path), "hpc-bridge")
    try:
        connection.connect()
    except OSError:
        return None
    return connection


# ------------------------------------------------------------------------- tqueue


def _queue_options(argv: list[str]) -> tuple[bool, bool, str | None] | None:
    """(header, array, user) of a command line the quick path answers, else None."""
    header, array, me = True, False, False
    user_words: str | None = None
    i = 0
    while i < len(argv):
        word = argv[i]
        if word in ("-h", "--noheader"):
            header = False
        elif word in ("-r", "--array"):
            array = True
        elif word == "--me":
            me = True
        elif word in ("-u", "--user"):
            if i + 1 == len(argv) or argv[i + 1].startswith("-"):
                return None
            i += 1
            user_words = argv[i]
        elif word.startswith("--user="):
            user_words = word[len("--user="):]
        else:
            return None
        i += 1
    users = [u for u in (user_words or "").split(",") if u]
    if me:
        import pwd

        try:
            users.append(pwd.getpwuid(os.getuid()).pw_name)
        except KeyError:
            return None
    if len(set(users)) > 1 or not all(set(u) <= _PLAIN for u in users):
        return None
    return header, array, users[0] if users else None


def _full_tqueue(argv: list[str], refused: tuple[Response, bytes] | None = None) -> int:
    from bridge.cli.tqueue import tqueue_main as full

    return full(argv) if refused is None else full(argv, refused=refused)


def _failed(prog: str, exc: OSError | ProtocolError) -> int:
    """Report a failure once connected as the full client words it; status 1."""
    from bridge.cli.common import err
    from bridge.client import BridgeClient

    err(prog, str(BridgeClient.from_env().transport_error(exc)))
    return 1


def _quiet_broken_pipe() -> int:
    """Output's reader went away (``tqueue | head``): keep Python quiet at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 1


def _table(argv: list[str]) -> int:
    options = _queue_options(argv)
    path = _socket_path()
    if options is None or path is None:
        return _full_tqueue(argv)
    header, array, user = options
    connection = _connect(path)
    if connection is None:
        return _full_tqueue(argv)
    query = "&".join(([f"user={user}"] if user else []) + (["array=1"] if array else []))
    try:
        try:
            connection.request("GET", "/v1/jobs" + ("?" + query if query else ""),
                               headers={"User-Agent": USER_AGENT, "Accept": "text/plain"})
            response = connection.getresponse()
        except (OSError, ProtocolError) as exc:
            return _failed("tqueue", exc)
        if response.status >= 400:
            try:
                refused = (response, response.read())
            except (OSError, ProtocolError) as exc:
                return _failed("tqueue", exc)
            connection.close()
            return _full_tqueue(argv, refused)  # it words the error, or waits and asks again
        if not (response.getheader("Content-Type") or "").startswith("text/plain"):
            connection.close()
            return _full_tqueue(argv)  # an older daemon's JSON: it lists as before
        import codecs

        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        write = sys.stdout.write
        if header:
            write(HEADER)
        while True:
            try:
                chunk = response.read1(65536)
            except (OSError, ProtocolError) as exc:
                sys.stdout.flush()
                return _failed("tqueue", exc)
            write(decoder.decode(chunk, final=not chunk))
            if not chunk:
                break
        sys.stdout.flush()
    except BrokenPipeError:
        return _quiet_broken_pipe()
    finally:
        connection.close()
    return 0


def tqueue_main() -> int:
    """``tqueue`` (``sys.argv``), quickly where it can be; returns the exit status."""
    try:
        return _table(sys.argv[1:])
    except KeyboardInterrupt:
        return 130


# ------------------------------------------------------------------------- tbatch


def _submitted(answer: Any) -> str | None:
    """The line tbatch prints for the daemon's answer, or None when the full command
    should read it (a ``--test-only`` estimate, or an answer not as expected)."""
    if not isinstance(answer, dict) or answer.get("testOnly") is not None:
        return None
    if not {"id", "uid", "name", "state"} <= answer.keys():
        return None
    job_id = answer["id"]
    if type(job_id) is not int:
        return None
    return str(job_id) if answer.get("parsable") is True else f"Submitted batch job {job_id}"


def _submit(argv: list[str]) -> int:
    from bridge.sbatch.locate import locate

    found = locate(argv)
    path = _socket_path()
    if found.help or found.version or path is None:
        from bridge.cli.tbatch import tbatch_main as full

        return full(argv)
    from bridge.cli.sbatch_request import sbatch_request

    try:
        cwd = os.getcwd()
    except OSError:  # nothing read yet: the full command says so
        from bridge.cli.tbatch import tbatch_main as full

        return full(argv)
    request = sbatch_request(argv, found, cwd)
    key = os.urandom(16).hex()
    line = None
    answered = None
    connection = _connect(path)
    if connection is not None:
        try:
            connection.request("POST", "/v1/sbatch", body=dumps(request).encode("ascii"),
                               headers={"User-Agent": USER_AGENT, "Accept": "application/json",
                                        IDEMPOTENCY_HEADER: key,
                                        "Content-Type": "application/json"})
            response = connection.getresponse()
            answered = (response, response.read())
            if response.status < 300:
                line = _submitted(loads(answered[1]))
        except (OSError, ProtocolError, ValueError):
            line = None  # no whole answer: sent again under the same key; or not JSON
        finally:
            connection.close()
    if line is None:
        from bridge.cli.tbatch import send_main

        return send_main(request, key, answered)
    try:
        print(line)
        sys.stdout.flush()
    except BrokenPipeError:
        return _quiet_broken_pipe()
    return 0


def tbatch_main() -> int:
    """``tbatch`` (``sys.argv``), quickly where it can be; returns the exit status."""
    from bridge.cli.sbatch_request import error_status

    try:
        return error_status(_submit(sys.argv[1:]))
    except KeyboardInterrupt:
        return 130
