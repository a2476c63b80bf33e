"""The t* commands without a daemon: arguments, output formats, errors and exit codes.

The daemon is a scripted HTTP server on 127.0.0.1 (standard library, in a thread)
behind the real client.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import pytest
import yaml

from bridge import model
from bridge.cli import (
    format_queue,
    format_show,
    tbatch_main,
    tcancel_main,
    tlog_main,
    tqueue_main,
    tshow_main,
)
from bridge.cli import tshow as tshow_module
from bridge.client import BridgeClient, JobView
from bridge.model import ANN_BATCH_SCRIPT, ANN_SCHEDULING

#: The modules of bridge.cli that are commands (one each).
COMMAND_MODULES = ("tbatch", "tqueue", "tshow", "tcancel", "tcontrol", "tlog", "twatch")
#: Commands whose console scripts start in :mod:`bridge.cli.quick`.
QUICK_COMMANDS = ("tbatch", "tqueue")


@dataclass
class Request:
    """A request as the fake daemon saw it (``path`` decoded, ``params`` the query)."""

    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    content: bytes


@dataclass
class Reply:
    """What the fake daemon answers: ``json`` or ``content`` with a Content-Length, or
    ``chunks`` with chunked transfer encoding (``cut``: then the connection breaks)."""

    status: int = 200
    json: Any = None
    content: bytes = b""
    chunks: Sequence[bytes] | None = None
    cut: bool = False
    content_type: str = "application/octet-stream"  # of ``chunks``


Handler = Callable[[Request], Reply]


class Daemon:
    """A scripted daemon: routes -> replies, and the requests it saw."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.routes: dict[tuple[str, str], Handler] = {}
        self.url = ""

    def on(self, method: str, path: str, handler: Handler) -> None:
        self.routes[(method, path)] = handler

    def __call__(self, request: Request) -> Reply:
        self.requests.append(request)
        handler = self.routes.get((request.method, request.path))
        if handler is None:
            return Reply(404, json={"error": f"job {request.path} not found"})
        return handler(request)

    def body(self, i: int = -1) -> Any:
        return json.loads(self.requests[i].content)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: Daemon


class _HTTPHandler(BaseHTTPRequestHandler):
    """Hands each request to the server's :class:`Daemon` and writes its reply."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        content = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        request = Request(
            self.command,
            unquote(url.path),
            dict(parse_qsl(url.query)),
            dict(self.headers),
            content,
        )
        reply = self.server.fake(request)
        self.send_response(reply.status)
        if reply.chunks is None:
            body = reply.content if reply.json is None else json.dumps(reply.json).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in reply.chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        if reply.cut:
            self.close_connection = True
        else:
            self.wfile.write(b"0\r\n\r\n")

    do_POST = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    fake = Daemon()
    server = _Server(("127.0.0.1", 0), _HTTPHandler)
    server.fake = fake
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    for command in COMMAND_MODULES:
        monkeypatch.setattr(
            f"bridge.cli.{command}.connect", lambda: BridgeClient(url=fake.url, timeout=10)
        )
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    import time

    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


# ------------------------------------------------- tbatch (the rest: test_tbatch.py)


def test_tbatch_daemon_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sock = str(tmp_path / "b.sock")
    monkeypatch.setenv("HPC_BRIDGE_SOCKET", sock)
    monkeypatch.delenv("HPC_BRIDGE_URL", raising=False)
    assert tbatch_main(["--wrap", "true"]) == 1
    assert capsys.readouterr().err == (
        f"tbatch: error: cannot reach hpc-bridge at {sock}: is the daemon running? "
        "(set HPC_BRIDGE_SOCKET)\n"
    )


def test_tbatch_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert tbatch_main(["--help"]) == 0
    assert "Usage: tbatch" in capsys.readouterr().out
    assert tbatch_main(["-V"]) == 0
    assert capsys.readouterr().out.startswith("tbatch (hpc-bridge ")


# ----------------------------------------------------------------------- tqueue

NOW = datetime(2026, 1, 2, 4, 0, 0, tzinfo=UTC)


def view(**over: Any) -> JobView:
    base: dict[str, Any] = {
        "id": 12,
        "uid": "u-12",
        "name": "tj-12",
        "namespace": "default",
        "jobName": "train.sh",
        "user": "alice",
        "unixUid": 1000,
        "backend": "slurm",
        "backendId": "9001",
        "state": "Running",
        "reason": None,
        "message": None,
        "runtime": "plain",
        "numNodes": 3,
        "nodes": ["n01", "n02", "n03"],
        "exitCode": None,
        "partition": "gpu",
        "timeLimitMinutes": 60,
        "submitTime": "2026-01-02T03:00:00Z",
        "startTime": "2026-01-02T03:58:55Z",
        "endTime": None,
        "stdout": "/home/alice/o",
        "stderr": "/home/alice/e",
        "trainJob": {},
    }
    base.update(over)
    return base  # type: ignore[return-value]


HEADER = "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)"


def test_queue_table_like_squeue() -> None:
    jobs = [
        view(),
        view(
            id=13,
            state="Pending",
            reason="Resources",
            nodes=None,
            startTime=None,
            numNodes=2,
            jobName="a-very-long-job-name",
            user="bartholomew",
            partition=None,
        ),
        view(id=14, state="Submitted", reason=None, nodes=[], startTime=None, numNodes=1),
        view(
            id=15,
            state="Succeeded",
            startTime="2026-01-01T00:00:00Z",
            endTime="2026-01-02T01:02:03Z",
            nodes=["gpu1"],
            numNodes=1,
        ),
        view(id=16, state="Suspended", reason="Held", nodes=None, startTime=None),
        view(id=17, state="Failed", reason="BackendError", nodes=None, startTime=None, numNodes=1),
    ]
    assert format_queue(jobs, now=NOW).split("\n") == [
        HEADER,
        "                12       gpu train.sh    alice  R       1:05      3 n[01-03]",
        "                13           a-very-l bartholo PD       0:00      2 (Resources)",
        "                14       gpu train.sh    alice PD       0:00      1 (None)",
        "                15       gpu train.sh    alice CD 1-01:02:03      1 gpu1",
        "                16       gpu train.sh    alice  S       0:00      3 (Held)",
        "                17       gpu train.sh    alice  F       0:00      1 (BackendError)",
        "",
    ]


def test_queue_without_header_and_empty() -> None:
    assert format_queue([view()], header=False, now=NOW).startswith("                12 ")
    assert format_queue([], now=NOW) == HEADER + "\n"
    assert format_queue([], header=False) == ""


def test_queue_cluster_column() -> None:
    text = format_queue([view(backend="slurm2411"), view(id=13, backend=None)], now=NOW,
                        cluster=True)
    assert text.split("\n") == [
        "     CLUSTER " + HEADER,
        "   slurm2411                 12       gpu train.sh    alice  R       1:05      3 n[01-03]",
        "                             13       gpu train.sh    alice  R       1:05      3 n[01-03]",
        "",
    ]


def test_queue_escapes_terminal_control_characters() -> None:
    text = format_queue([view(state="Pending", reason="\x1b]0;pwned\x07\nX")], now=NOW)
    assert "\x1b" not in text and "\x07" not in text
    assert text.endswith("(\\x1b]0;pwned\\x07\\nX)\n")


def _items(*jobs: JobView) -> Handler:
    return lambda request: Reply(200, json={"items": list(jobs)})


def test_tqueue_default(daemon: Daemon, capsys: pytest.CaptureFixture[str]) -> None:
    daemon.on("GET", "/v1/jobs", _items(view(id=3), view(id=1)))
    assert tqueue_main([]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == HEADER
    assert [line.split()[0] for line in out[1:]] == ["1", "3"]  # sorted by id
    assert daemon.requests[0].params == {}


def test_tqueue_prints_the_daemons_table_as_it_arrives(
        daemon: Daemon, capsys: pytest.CaptureFixture[str]) -> None:
    line = "                 1     debug    train    alice PD       0:00      1 (None)\n"
    # A piece may end inside a character: it is decoded across pieces.
    daemon.on("GET", "/v1/jobs", lambda request: Reply(
        chunks=[line.encode(), "\u00e9".encode()[:1], "\u00e9".encode()[1:] + b"\n"],
        content_type="text/plain; charset=utf-8"))
    assert tqueue_main([]) == 0
    assert capsys.readouterr().out == HEADER + "\n" + line + "\u00e9\n"
    assert daemon.requests[-1].headers["Accept"] == "text/plain"
    assert tqueue_main(["-h", "-r", "-u", "bob"]) == 0
    assert capsys.readouterr().out == line + "\u00e9\n"
    assert daemon.requests[-1].params == {"user": "bob", "array": "1"}
    assert len(daemon.requests) == 2  # no JSON listing asked for


def test_tqueue_lists_json_where_the_daemon_has_no_table(
        daemon: Daemon, capsys: pytest.CaptureFixture[str]) -> None:
    daemon.on("GET", "/v1/jobs", _items(view(id=3)))
    assert tqueue_main(["-u", "alice"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == ["JOBID", "3"]
    accepts = [r.headers.get("Accept") for r in daemon.requests]
    assert accepts[0] == "text/plain" and accepts[1] != "text/plain"


def test_tqueue_r_lists_json_where_the_daemon_refuses_the_tables_array(
        daemon: Daemon, capsys: pytest.CaptureFixture[str]) -> None:
    def older(request: Request) -> Reply:  # as the daemon before the table answered
        if "array" in request.params:
            return Reply(400, json={"error": "unknown query parameter 'array'; known: "
                                             "backend, continue, limit, states, user"})
        return _items(view(id=3))(request)

    daemon.on("GET", "/v1/jobs", older)
    assert tqueue_main(["-r", "-h"]) == 0
    assert capsys.readouterr().out.split()[0] == "3"
    daemon.on("GET", "/v1/jobs", lambda request: Reply(400, json={"error": "bad user"}))
    assert tqueue_main(["-r"]) == 1
    assert "tqueue: error: bad user" in capsys.readouterr().err


def test_tqueue_says_why_a_table_was_cut_short(
        daemon: Daemon, capsys: pytest.CaptureFixture[str]) -> None:
    daemon.on("GET", "/v1/jobs", lambda request: Reply(
        chunks=[b"1 x\n"], cut=True, content_type="text/plain; charset=utf-8"))
    assert tqueue_main([]) == 1
    assert "tqueue: error:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "params"),
    [
        (["-t", "PD,R"], {"states": "Pending,Submitted,Suspended,Running"}),
        (["--states=running,completed"], {"states": "Running,Succeeded"}),
        (["-t", "CA,F,S"], {"states": "Cancelled,Failed,Suspended"}),
        (["-t", "all"], {"states": "all"}),
        (["-u", "bob"], {"user": "bob"}),
        (["-j", "12"], {"states": "all"}),
    ],
)
def test_tqueue_filters(argv: list[str], params: dict[str, str], daemon: Daemon) -> None:
    daemon.on("GET", "/v1/jobs", _items())
    assert tqueue_main(argv) == 0
    assert daemon.requests[0].params == params


def test_tqueue_client_side_filters(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon.on(
        "GET",
        "/v1/jobs",
        _items(
            view(id=1, user="alice"), view(id=2, user="bob"), view(id=3, user="carol", name="tj-x")
        ),
    )
    assert tqueue_main(["-h", "-u", "alice,carol"]) == 0
    assert [ln.split()[0] for ln in capsys.readouterr().out.splitlines()] == ["1", "3"]
    assert tqueue_main(["-h", "-j", "2,tj-x"]) == 0
    assert [ln.split()[0] for ln in capsys.readouterr().out.splitlines()] == ["2", "3"]
    monkeypatch.setattr("bridge.cli.tqueue._current_user", lambda: "bob")
    assert tqueue_main(["--noheader", "--me"]) == 0
    assert [ln.split()[0] for ln in capsys.readouterr().out.splitlines()] == ["2"]
    assert daemon.requests[-1].params == {"user": "bob"}


def test_tqueue_json(daemon: Daemon, capsys: pytest.CaptureFixture[str]) -> None:
    daemon.on("GET", "/v1/jobs", _items(view()))
    assert tqueue_main(["--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"items": [view()]}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-t", "XX"], "tqueue: error: Invalid job state specified: XX\n"),
        (["--bogus"], "tqueue: error: unrecognized arguments: --bogus\n"),
    ],
)
def test_tqueue_errors(
    argv: list[str], message: str, daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    assert tqueue_main(argv) == 1
    assert capsys.readouterr().err == message


def test_tqueue_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert tqueue_main(["--help"]) == 0
    assert "--noheader" in capsys.readouterr().out


# ------------------------------------------------------------------------ tshow


def test_show_format() -> None:
    job = view(
        state="Failed",
        reason="NonZeroExitCode",
        message="exit 3",
        exitCode=3,
        endTime="2026-01-02T04:00:00Z",
        trainJob={
            "metadata": {
                "annotations": {
                    ANN_BATCH_SCRIPT: "#!/bin/sh\n",
                    ANN_SCHEDULING: json.dumps(
                        {"account": "proj", "chdir": "/home/alice", "ntasks": 6, "exclusive": True}
                    ),
                }
            },
            "spec": {
                "trainer": {
                    "numProcPerNode": 2,
                    "args": ["--lr", "0.1"],
                    "resourcesPerNode": {"requests": {"cpu": 4}},
                }
            },
        },
        transitions=[
            {
                "from": None,
                "to": "Pending",
                "reason": "Admitted",
                "message": None,
                "at": "2026-01-02T03:00:00Z",
            },
            {
                "from": "Running",
                "to": "Failed",
                "reason": "NonZeroExitCode",
                "message": "exit\n3",
                "at": "2026-01-02T04:00:00Z",
            },
        ],
    )
    assert format_show(job).split("\n") == [
        "JobId=12 JobName=train.sh",
        "   UserId=alice(1000) Namespace=default Name=tj-12 Uid=u-12",
        "   JobState=Failed Reason=NonZeroExitCode Message=exit 3",
        "   Backend=slurm BackendJobId=9001",
        "   Dependency=None KillOInvalidDependent=No",
        "   Runtime=plain NumNodes=3 NumProcPerNode=2 NumTasks=6 CPUs/Task=None",
        "   Partition=gpu Account=proj QOS=None TimeLimit=1:00:00",
        "   TRES/Node=cpu=4 Exclusive=Yes Features=None ReqNodeList=None ExcNodeList=None",
        "   SubmitTime=2026-01-02T03:00:00 StartTime=2026-01-02T03:58:55 "
        "EndTime=2026-01-02T04:00:00",
        "   NodeList=n[01-03] ExitCode=3",
        "   Command=(batch script) Args=--lr 0.1 Image=None",
        "   WorkDir=/home/alice",
        "   StdOut=/home/alice/o",
        "   StdErr=/home/alice/e",
        "   Transitions:",
        "     2026-01-02T03:00:00 - -> Pending Reason=Admitted Message=None",
        "     2026-01-02T04:00:00 Running -> Failed Reason=NonZeroExitCode Message=exit\\n3",
        "",
    ]


def test_show_minimal_job() -> None:
    text = format_show(view(timeLimitMinutes=None, startTime=None, nodes=None))
    assert "TimeLimit=Partition_Limit" in text
    assert "StartTime=Unknown" in text
    assert "NodeList=None" in text


def test_show_placement() -> None:
    placement = {"hosts": ["node1", "node2"], "units": [1, 1], "score": "leaf:1,level1:1",
                 "levels": [{"level": "leaf", "domains": ["leaf1"]},
                            {"level": "level1", "domains": ["spine"]}],
                 "mode": "constraints", "pinned": False, "waiting": False, "note": ""}
    lines = format_show(view(placement=placement)).split("\n")
    assert "   Placement=node[1-2] Switches=leaf1 Score=leaf:1,level1:1 "\
        "Mode=constraints(predicted)" in lines
    pinned = format_show(view(placement={**placement, "mode": "nodelist", "pinned": True}))
    assert "Mode=nodelist(pinned)" in pinned
    waiting = {**placement, "hosts": [], "levels": [], "score": "", "waiting": True,
               "note": "--switches=1: does not fit"}
    text = format_show(view(placement=waiting))
    assert "   Placement=None Switches=None Score=None Mode=constraints(waiting)" in text
    assert "   PlacementNote=--switches=1: does not fit" in text
    assert "Placement=" not in format_show(view())


def test_tshow(daemon: Daemon, capsys: pytest.CaptureFixture[str]) -> None:
    daemon.on("GET", "/v1/jobs/12", lambda r: Reply(200, json=view()))
    assert tshow_main(["12"]) == 0
    assert capsys.readouterr().out.startswith("JobId=12 JobName=train.sh\n")
    assert tshow_main(["12", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == view()
    assert tshow_main(["--yaml", "12"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == view()
    assert tshow_main(["99"]) == 1
    assert capsys.readouterr().err == "tshow: error: job /v1/jobs/99 not found\n"
    assert tshow_main([]) == 1
    assert "the following arguments are required: job" in capsys.readouterr().err


# ---------------------------------------------------------------------- tcancel


def test_tcancel(daemon: Daemon, capsys: pytest.CaptureFixture[str]) -> None:
    daemon.on("POST", "/v1/jobs/12/cancel", lambda r: Reply(202, json=view()))
    daemon.on(
        "POST", "/v1/jobs/13/cancel", lambda r: Reply(403, json={"error": "not yours"})
    )
    daemon.on(
        "POST",
        "/v1/jobs/15/cancel",
        lambda r: Reply(409, json={"error": "job 15 has already finished"}),
    )
    assert tcancel_main(["12"]) == 0
    assert capsys.readouterr() == ("", "")
    assert tcancel_main(["12", "13", "14", "15"]) == 1
    assert capsys.readouterr().err == (
        "tcancel: error: Kill job error on job id 13: Access/permission denied\n"
        "tcancel: error: Kill job error on job id 14: Invalid job id specified\n"
        "tcancel: error: Kill job error on job id 15: job 15 has already finished\n"
    )
    assert [r.path for r in daemon.requests] == [
        "/v1/jobs/12/cancel",
        "/v1/jobs/12/cancel",
        "/v1/jobs/13/cancel",
        "/v1/jobs/14/cancel",
        "/v1/jobs/15/cancel",
    ]


def test_tcancel_needs_a_job(capsys: pytest.CaptureFixture[str]) -> None:
    assert tcancel_main([]) == 1
    assert capsys.readouterr().err.startswith("tcancel: error: ")


def test_tcancel_daemon_down_is_one_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HPC_BRIDGE_SOCKET", str(tmp_path / "s"))
    monkeypatch.delenv("HPC_BRIDGE_URL", raising=False)
    assert tcancel_main(["1", "2"]) == 1
    assert capsys.readouterr().err.count("cannot reach hpc-bridge") == 1


# ------------------------------------------------------------------------- tlog


def test_tlog(daemon: Daemon, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    daemon.on("GET", "/v1/jobs/12/log", lambda r: Reply(chunks=[b"out\n", b"\xff\n"]))
    assert tlog_main(["12"]) == 0
    assert capfdbinary.readouterr().out == b"out\n\xff\n"
    assert tlog_main(["-f", "-e", "12"]) == 0
    assert daemon.requests[-1].params == {
        "stream": "stderr",
        "offset": "0",
        "follow": "1",
    }
    assert daemon.requests[0].params == {"stream": "stdout", "offset": "0", "follow": "0"}


def test_tlog_errors(daemon: Daemon, capsys: pytest.CaptureFixture[str]) -> None:
    daemon.on(
        "GET",
        "/v1/jobs/12/log",
        lambda r: Reply(
            403,
            json={"error": "Access/permission denied: only the job's owner may read its output"},
        ),
    )
    assert tlog_main(["12"]) == 1
    assert capsys.readouterr().err == (
        "tlog: error: Access/permission denied: only the job's owner may read its output\n"
    )


def test_tlog_follow_resumes_after_a_dropped_connection(
    daemon: Daemon,
    monkeypatch: pytest.MonkeyPatch,
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    monkeypatch.setattr("bridge.cli.tlog.time.sleep", lambda s: None)
    answers = iter(
        [
            Reply(chunks=[b"abc"], cut=True),
            Reply(content=b"def"),
        ]
    )
    daemon.on("GET", "/v1/jobs/12/log", lambda r: next(answers))
    assert tlog_main(["-f", "12"]) == 0
    assert capfdbinary.readouterr().out == b"abcdef"
    assert [r.params["offset"] for r in daemon.requests] == ["0", "3"]


def test_tlog_without_follow_does_not_retry(
    daemon: Daemon, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    daemon.on("GET", "/v1/jobs/12/log", lambda r: Reply(chunks=[b"abc"], cut=True))
    assert tlog_main(["12"]) == 1
    captured = capfdbinary.readouterr()
    assert captured.out == b"abc"
    expected = f"tlog: error: connection to hpc-bridge at {daemon.url} failed"
    assert expected.encode() in captured.err


def test_ctrl_c_is_quiet(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(self: BridgeClient, **kwargs: Any) -> list[JobView]:
        raise KeyboardInterrupt

    monkeypatch.setattr(BridgeClient, "iter_pages", interrupted)
    monkeypatch.setattr(BridgeClient, "queue_table", interrupted)
    assert tqueue_main([]) == 130  # the daemon's table
    assert tqueue_main(["--json"]) == 130  # the JSON listing
    assert capsys.readouterr().err == ""


# --------------------------------------------------------------------- start-up


def test_annotation_names_match_the_model() -> None:
    assert tshow_module._ANN_BATCH_SCRIPT == model.ANN_BATCH_SCRIPT
    assert tshow_module._ANN_SCHEDULING == model.ANN_SCHEDULING


def test_importing_the_commands_stays_light() -> None:
    """tqueue/tshow/tcancel/tlog start in tens of ms: no pydantic, PyYAML, httpx ...

    (tshow --yaml imports PyYAML when it runs, --version metadata, tbatch --help the
    option table; test_tbatch.py runs a whole submission.)
    """
    heavy = [
        "bridge.model",
        "bridge.sbatch.cmdline",
        "bridge.sbatch.parse",
        "pydantic",
        "yaml",
        "httpx",
        "hostlist",
        "importlib.metadata",
        "dataclasses",
        "http.client",
        "ssl",
    ]
    commands = ", ".join(f"bridge.cli.{c}" for c in COMMAND_MODULES)
    assert _printed(f"import sys, {commands}; "
                    f"print([m for m in {heavy!r} if m in sys.modules])") == []


def _printed(code: str) -> object:
    """What a fresh interpreter running ``code`` prints (one Python literal)."""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return ast.literal_eval(out.strip())


def test_importing_the_package_loads_no_command() -> None:
    """``bridge.cli`` re-exports the commands' names lazily: ``tqueue`` pays for no other."""
    assert _printed("import sys, bridge.cli, bridge.cli.tqueue; "
                    "print(sorted(m for m in sys.modules if m.startswith('bridge.cli.')))") == [
        "bridge.cli.args", "bridge.cli.common", "bridge.cli.queue_format", "bridge.cli.tqueue"]


def test_tbatch_imports_only_what_a_submission_needs() -> None:
    """``tbatch`` is measured against ``python -c pass`` (docs/operations.md): beyond the
    light list above, it loads neither typing nor argparse nor datetime (each 1-3 ms of
    its start), whatever the interpreter's site loaded already."""
    printed = _printed("import sys; before = set(sys.modules); import bridge.cli.tbatch; "
                       "print(sorted(set(sys.modules) - before))")
    assert isinstance(printed, list)
    loaded = set(printed)
    assert not {"typing", "argparse", "datetime", "bridge.sbatch.script",
                "bridge.cli.args"} & loaded, sorted(loaded)


def test_the_console_scripts_name_the_command_modules() -> None:
    """Each t* console script loads its command's entry point, the one bridge.cli names."""
    import importlib.metadata

    import bridge.cli

    scripts = {
        ep.name: ep for ep in importlib.metadata.entry_points(group="console_scripts")
        if ep.dist is not None and ep.dist.name == "hpc-bridge"
    }
    for command in COMMAND_MODULES:
        entry = scripts[command]
        if command in QUICK_COMMANDS:  # their quick paths hand the rest to the command
            assert entry.module == "bridge.cli.quick"
            assert entry.attr == f"{command}_main"
            continue
        assert entry.module == f"bridge.cli.{command}"
        assert entry.load() is getattr(bridge.cli, f"{command}_main")
