"""The commands on one job, tshow, tcancel and tlog (bridge/cli/tshow.py, tcancel.py,
tlog.py): tshow's format, each command's output, errors and exit codes, against the fake
daemon of cli_helpers.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bridge.cli import format_show, tcancel_main, tlog_main, tshow_main
from bridge.model import ANN_BATCH_SCRIPT, ANN_SCHEDULING
from tests.unit.cli_helpers import Daemon, Reply, view
from tests.unit.cli_helpers import daemon as daemon
from tests.unit.cli_helpers import utc as utc

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

