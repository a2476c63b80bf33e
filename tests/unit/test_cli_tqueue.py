"""tqueue's full command without a daemon of its own (bridge/cli/tqueue.py): the
squeue-like table, the daemon's table as it arrives, filters, JSON, errors and Ctrl-C,
against the fake daemon of cli_helpers.py. (Its -o/-O formats: test_queue_format.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge.cli import format_queue, tqueue_main
from bridge.client import BridgeClient, JobView
from tests.unit.cli_helpers import NOW, Daemon, Reply, Request, _items, view
from tests.unit.cli_helpers import daemon as daemon
from tests.unit.cli_helpers import utc as utc

# ----------------------------------------------------------------------- tqueue

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
