"""The quick paths of ``tqueue`` and ``tbatch`` (bridge/cli/quick.py) against a scripted
daemon on a unix socket: what they send, what they print, and what they hand over to
the full commands. (The integration tests run both console scripts against the real
daemon: every ``tbatch`` and ``tqueue`` there starts here.)"""

from __future__ import annotations

import ast
import io
import json
import re
import shutil
import socketserver
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.cli import quick
from bridge.queue_cells import HEADER as CELLS_HEADER
from bridge.queue_header import HEADER
from bridge.quick_json import dumps, loads


@dataclass
class FakeDaemon:
    """Answers each connection with the next of ``answers`` (raw bytes); keeps each
    request's head and body."""

    path: str
    answers: list[bytes] = field(default_factory=list)
    requests: list[tuple[str, bytes]] = field(default_factory=list)

    def head(self, i: int = -1) -> str:
        return self.requests[i][0]

    def header(self, name: str, i: int = -1) -> str | None:
        for line in self.head(i).split("\r\n")[1:]:
            key, _, value = line.partition(":")
            if key.strip().lower() == name.lower():
                return value.strip()
        return None


def _reply(status: str, body: bytes, content_type: str = "application/json") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def _chunked(status: str, pieces: list[bytes], end: bool = True) -> bytes:
    out = (f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
           "Transfer-Encoding: chunked\r\n\r\n").encode()
    for piece in pieces:
        out += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    return out + (b"0\r\n\r\n" if end else b"")


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDaemon]:
    where = tempfile.mkdtemp(prefix="quick-", dir="/tmp")  # a short unix socket path
    fake = FakeDaemon(str(Path(where) / "bridge.sock"))

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                line = self.rfile.readline()
                if not line:
                    return
                head += line
            text = head.decode("latin-1")
            match = re.search(r"(?im)^content-length:\s*(\d+)", text)
            body = self.rfile.read(int(match.group(1))) if match else b""
            fake.requests.append((text, body))
            self.wfile.write(fake.answers.pop(0) if fake.answers else _reply("500 Oops", b"{}"))

    server = socketserver.ThreadingUnixStreamServer(fake.path, Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.delenv("HPC_BRIDGE_URL", raising=False)
    monkeypatch.setenv("HPC_BRIDGE_SOCKET", fake.path)
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def handed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """What the quick paths hand to the full commands (which then return 7)."""
    calls: list[tuple[str, Any]] = []
    import bridge.cli.tbatch as tbatch
    import bridge.cli.tqueue as tqueue

    def full_tqueue(argv: list[str] | None = None, *, refused: Any = None) -> int:
        calls.append(("tqueue", argv) if refused is None
                     else ("tqueue", argv, refused[0].status, refused[1]))
        return 7

    def full_tbatch(argv: list[str] | None = None) -> int:
        calls.append(("tbatch", argv))
        return 7

    def send(request: dict[str, Any], key: str, answered: Any = None) -> int:
        calls.append(("send", (request, key, answered and (answered[0].status, answered[1]))))
        return 7

    monkeypatch.setattr(tqueue, "tqueue_main", full_tqueue)
    monkeypatch.setattr(tbatch, "tbatch_main", full_tbatch)
    monkeypatch.setattr(tbatch, "send_main", send)
    return calls


def _run(monkeypatch: pytest.MonkeyPatch, main: Any, *argv: str) -> int:
    monkeypatch.setattr(sys, "argv", [main.__name__, *argv])
    return int(main())


# ------------------------------------------------------------------------- tqueue


@pytest.mark.parametrize(("argv", "expected"), [
    ([], (True, False, None)),
    (["-h", "-r"], (False, True, None)),
    (["--noheader", "--array", "-u", "alice"], (False, True, "alice")),
    (["--user=alice,alice"], (True, False, "alice")),
    (["-u", "bob", "--user", "alice"], (True, False, "alice")),  # the last one, as argparse
    (["--user="], (True, False, None)),
    (["-u", "alice,bob"], None),  # two users: the full command filters
    (["-hr"], None), (["--noh"], None), (["-ualice"], None),  # argparse's other spellings
    (["-u"], None), (["-u", "-h"], None), (["-u", "al ice"], None),
    (["-t", "all"], None), (["--json"], None), (["-o", "%i"], None), (["--help"], None),
    (["--"], None), (["job.sh"], None),
])
def test_the_command_lines_the_quick_path_answers(argv: list[str],
                                                   expected: tuple[bool, bool, str | None] | None
                                                   ) -> None:
    assert quick._queue_options(argv) == expected


def test_me_is_the_caller() -> None:
    import os
    import pwd

    me = pwd.getpwuid(os.getuid()).pw_name
    assert quick._queue_options(["--me"]) == (True, False, me)
    assert quick._queue_options(["--me", "-u", me]) == (True, False, me)
    assert quick._queue_options(["--me", "-u", me + "x"]) is None


def test_tqueue_writes_the_daemons_table(daemon: FakeDaemon, handed: list[Any],
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    rows = ["      1     debug  job    alice  R   0:01   1 node1\n", "      2 ... é\n"]
    daemon.answers.append(_chunked("200 OK", [rows[0].encode(), rows[1].encode()[:-3],
                                              rows[1].encode()[-3:]]))
    assert _run(monkeypatch, quick.tqueue_main, "-u", "alice", "-r") == 0
    assert capsys.readouterr().out == HEADER + "".join(rows)
    assert daemon.head().startswith("GET /v1/jobs?user=alice&array=1 HTTP/1.1\r\n")
    assert daemon.header("Accept") == "text/plain"
    assert daemon.header("User-Agent") == "hpc-bridge-client/1"
    daemon.answers.append(_reply("200 OK", b"", "text/plain; charset=utf-8"))
    assert _run(monkeypatch, quick.tqueue_main, "-h") == 0
    assert capsys.readouterr().out == ""
    assert daemon.head().startswith("GET /v1/jobs HTTP/1.1\r\n")
    daemon.answers.append(_chunked("200 OK", [b"      3 caf\xc3"]))  # ends mid-character
    assert _run(monkeypatch, quick.tqueue_main, "-h") == 0
    assert capsys.readouterr().out == "      3 caf\ufffd"
    assert handed == []
    assert HEADER == CELLS_HEADER


@pytest.mark.parametrize(("answer", "status", "body"), [
    (_reply("429 Too Many Requests", b'{"error": "busy"}'), 429, b'{"error": "busy"}'),
    (_reply("413 Request Entity Too Large", b"too large", "text/plain; charset=utf-8"), 413,
     b"too large"),
    (_reply("400 Bad Request", b'{"error": "unknown query parameter \'array\'"}'), 400,
     b'{"error": "unknown query parameter \'array\'"}'),
    (_reply("200 OK", b'{"items": []}'), None, None),  # a daemon without the table
])
def test_tqueue_hands_what_it_does_not_expect_to_the_full_command(
        answer: bytes, status: int | None, body: bytes | None, daemon: FakeDaemon,
        handed: list[Any], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A refusal goes with the answer (the full command words it, or waits and asks
    again); an older daemon's JSON without (the full command lists as before)."""
    daemon.answers.append(answer)
    assert _run(monkeypatch, quick.tqueue_main, "-r") == 7
    assert handed == [("tqueue", ["-r"]) if status is None else ("tqueue", ["-r"], status, body)]
    assert capsys.readouterr().out == ""
    assert len(daemon.requests) == 1


def test_tqueue_hands_over_other_options_tcp_and_no_daemon(
        daemon: FakeDaemon, handed: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run(monkeypatch, quick.tqueue_main, "-t", "all") == 7
    monkeypatch.setenv("HPC_BRIDGE_URL", "http://127.0.0.1:1")
    assert _run(monkeypatch, quick.tqueue_main) == 7
    monkeypatch.delenv("HPC_BRIDGE_URL")
    monkeypatch.setenv("HPC_BRIDGE_SOCKET", daemon.path + ".missing")
    assert _run(monkeypatch, quick.tqueue_main) == 7
    assert handed == [("tqueue", ["-t", "all"]), ("tqueue", []), ("tqueue", [])]
    assert daemon.requests == []


def test_a_table_cut_short_is_an_error_after_what_arrived(
        daemon: FakeDaemon, handed: list[Any], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    daemon.answers.append(_chunked("200 OK", [b"      1 row\n"], end=False))
    assert _run(monkeypatch, quick.tqueue_main) == 1
    out, err = capsys.readouterr()
    assert out == HEADER + "      1 row\n"
    assert err == (f"tqueue: error: connection to hpc-bridge at {daemon.path} failed: "
                   "answer cut short\n")
    assert handed == []


# ------------------------------------------------------------------------- tbatch


def test_tbatch_sends_the_request_once_and_prints_the_answer(
        daemon: FakeDaemon, handed: list[Any], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    job = {"id": 42, "uid": "u", "name": "wrap", "state": "Pending"}
    daemon.answers += [_reply("201 Created", json.dumps(job).encode()),
                       _reply("200 OK", json.dumps({**job, "parsable": True}).encode())]
    assert _run(monkeypatch, quick.tbatch_main, "--wrap", "true") == 0
    assert _run(monkeypatch, quick.tbatch_main, "--parsable", "--wrap", "true") == 0
    assert capsys.readouterr().out == "Submitted batch job 42\n42\n"
    assert handed == []
    first = json.loads(daemon.requests[0][1])
    assert first["argv"] == ["--wrap", "true"] and "script" not in first
    assert daemon.head(0).startswith("POST /v1/sbatch HTTP/1.1\r\n")
    assert daemon.header("Content-Type", 0) == "application/json"
    keys = [daemon.header("Idempotency-Key", i) for i in (0, 1)]
    assert all(k is not None and re.fullmatch(r"[0-9a-f]{32}", k) for k in keys)
    assert keys[0] != keys[1]


@pytest.mark.parametrize("answer", [
    _reply("400 Bad Request", b'{"error": "tbatch: error: unrecognized option"}'),
    _reply("429 Too Many Requests", b'{"error": "busy"}'),
    _reply("409 Conflict", b'{"id": 1, "uid": "u", "name": "n", "state": "s", "error": "x"}'),
    _reply("201 Created", b'{"id": "x", "uid": "u", "name": "n", "state": "s"}'),
    _reply("201 Created", b'{"testOnly": true, "estimate": "start at noon"}'),
    _reply("201 Created", b"not json"),
    b"HTTP/1.1 201 Created\r\nContent-Length: 50\r\n\r\n{",  # cut short: no answer
])
def test_tbatch_hands_the_same_request_key_and_answer_to_the_full_command(
        answer: bytes, daemon: FakeDaemon, handed: list[Any],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    script = "#!/bin/sh\n#SBATCH -J from-stdin\ntrue\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(script.encode())))
    daemon.answers.append(answer)
    assert _run(monkeypatch, quick.tbatch_main) == 7
    assert capsys.readouterr().out == ""
    [(kind, (request, key, answered))] = handed
    assert kind == "send" and key == daemon.header("Idempotency-Key")
    assert request["script"] == script  # read once, from stdin, and handed over
    assert json.loads(daemon.requests[0][1]) == request
    head, _, body = answer.partition(b"\r\n\r\n")
    declared = re.search(rb"Content-Length: (\d+)", head)
    whole = declared is not None and int(declared.group(1)) == len(body)
    assert answered == ((int(head.split()[1]), body) if whole else None)


def test_what_the_full_commands_make_of_an_answer_handed_over(
        daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Each request goes to the daemon as often as the full command alone would send it:
    a refusal is worded at once, a 429 asked again after its Retry-After, under the
    same key."""
    daemon.answers.append(_reply("400 Bad Request",
                                 b'{"error": "unrecognized option \'--x\'"}'))
    assert _run(monkeypatch, quick.tbatch_main, "--x", "--wrap", "true") == 1
    assert capsys.readouterr().err == "tbatch: error: unrecognized option '--x'\n"
    assert len(daemon.requests) == 1
    daemon.answers.append(_reply("201 Created", b'{"testOnly": true, "estimate": "at noon"}'))
    assert _run(monkeypatch, quick.tbatch_main, "--test-only", "--wrap", "true") == 0
    assert capsys.readouterr().err == "tbatch: at noon\n"
    assert len(daemon.requests) == 2
    busy = _reply("429 Too Many Requests", b'{"error": "busy"}').replace(
        b"Connection: close", b"Retry-After: 0\r\nConnection: close")
    daemon.answers += [busy, _reply("201 Created", b'{"id": 9, "uid": "u", "name": "n", '
                                                   b'"state": "Pending"}')]
    assert _run(monkeypatch, quick.tbatch_main, "--wrap", "true") == 0
    assert capsys.readouterr().out == "Submitted batch job 9\n"
    assert len(daemon.requests) == 4
    assert daemon.header("Idempotency-Key", 2) == daemon.header("Idempotency-Key", 3)
    daemon.answers.append(_reply("400 Bad Request", b'{"error": "no such user"}'))
    assert _run(monkeypatch, quick.tqueue_main, "-u", "nobody") == 1
    assert capsys.readouterr().err == "tqueue: error: no such user\n"
    assert len(daemon.requests) == 5


def test_a_stdin_that_fails_half_way_is_an_unreadable_script(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Never read again: what was read before the error is gone."""
    from bridge.cli.sbatch_request import sbatch_request
    from bridge.sbatch.locate import locate

    class Failing(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> int:
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(Failing())))
    request = sbatch_request([], locate([]), "/tmp")
    assert request["scriptProblem"] == "unreadable" and "script" not in request
    monkeypatch.setattr(sys, "stdin", None)
    assert sbatch_request([], locate([]), "/tmp")["scriptProblem"] == "unreadable"


def test_tbatch_without_a_daemon_or_for_help_hands_over(
        daemon: FakeDaemon, handed: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run(monkeypatch, quick.tbatch_main, "--help") == 7
    assert _run(monkeypatch, quick.tbatch_main, "-V") == 7
    monkeypatch.setenv("HPC_BRIDGE_SOCKET", daemon.path + ".missing")
    assert _run(monkeypatch, quick.tbatch_main, "--wrap", "true") == 7
    assert [call[0] for call in handed] == ["tbatch", "tbatch", "send"]
    assert handed[2][1][2] is None  # no answer came
    assert daemon.requests == []


# --------------------------------------------------------------------- start-up


def test_the_quick_paths_import_nothing_heavy() -> None:
    """``tqueue`` and ``tbatch`` start as ``python -c pass`` does plus these modules:
    not json, re, socket, enum, typing, collections, argparse or the client."""
    code = ("import sys; before = set(sys.modules); import bridge.cli.quick; "
            "import bridge.sbatch.locate, bridge.cli.sbatch_request; "
            "print(sorted(set(sys.modules) - before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    loaded = set(ast.literal_eval(out.strip()))
    allowed = {"__future__", "_json", "_socket", "binascii", "bridge", "bridge.cli",
               "bridge.cli.quick", "bridge.cli.sbatch_request", "bridge.client_env",
               "bridge.errors", "bridge.http11", "bridge.quick_json", "bridge.queue_header",
               "bridge.sbatch", "bridge.sbatch.locate"}
    assert loaded <= allowed, sorted(loaded - allowed)


# ------------------------------------------------------------------------- JSON

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner,
                                                                max_size=4),
    max_leaves=20,
)


@given(_JSON)
def test_quick_json_is_json(value: Any) -> None:
    assert dumps(value) == json.dumps(value, separators=(",", ":"))
    assert loads(json.dumps(value, indent=1).encode()) == json.loads(json.dumps(value))
    assert loads(dumps(value).encode()) == value


@pytest.mark.parametrize("text", [b"", b" ", b"{", b"{} x", b'{"a": 1,}', b"\xff",
                                  b'"\x01"', b"[1] [2]"])
def test_quick_json_refuses_what_json_refuses(text: bytes) -> None:
    with pytest.raises(ValueError):
        json.loads(text.decode("utf-8", "replace") if text != b"\xff" else text)
    with pytest.raises(ValueError):
        loads(text)


def test_quick_json_refuses_what_is_not_json() -> None:
    with pytest.raises(TypeError, match="set is not JSON serializable"):
        dumps({"a": {1}})
