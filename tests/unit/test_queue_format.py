"""tqueue's ``-o``/``-O`` formats, as squeue's (bridge/cli/queue_format.py)."""

from __future__ import annotations

import pytest

from bridge.cli import tqueue_main
from bridge.cli.common import UserError
from bridge.cli.queue_format import DEFAULT_FORMAT, parse_fields, parse_format, render
from tests.unit.cli_helpers import NOW, Daemon, _items, view
from tests.unit.cli_helpers import daemon as daemon


def table(spec: str, *jobs: object, header: bool = True, named: bool = False) -> list[str]:
    columns = parse_fields(spec) if named else parse_format(spec)
    return render(columns, list(jobs), header=header, now=NOW).split("\n")  # type: ignore[arg-type]


def test_letters_widths_and_justification() -> None:
    assert table("%.5i|%6j|%6u|%T|%l|%%|%D", view()) == [
        "JOBID|NAME  |USER  |STATE|TIME_LIMIT|%|NODES",
        "   12|train.|alice |RUNNING|1:00:00|%|3",
        "",
    ]


def test_every_letter_has_a_value_for_a_sparse_job() -> None:
    sparse = view(state="Pending", nodes=None, startTime=None, partition=None, reason=None,
                  timeLimitMinutes=None, backendId=None)
    line = table("%i %A %j %u %U %P %t %T %M %l %D %N %R %r %V %S %e", sparse,
                 header=False)[0]
    words = line.split(" ")
    assert words[:2] == ["12", "12"] and words[6:8] == ["PD", "PENDING"]
    assert words[9] == "N/A" and words[12:14] == ["(None)", "None"]
    assert words[15:] == ["N/A", "N/A"]  # never started, never ended


def test_named_fields_with_backend_id() -> None:
    lines = table("JobID:6,BackendJobId:.14,state:.10 ,Name", view(), named=True)
    assert lines[0] == "JOBID  BACKEND_JOBID     STATE NAME" + " " * 16
    assert lines[1] == "12              9001   RUNNING train.sh" + " " * 12


def test_default_format_is_squeues() -> None:
    assert DEFAULT_FORMAT == "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"


@pytest.mark.parametrize(("spec", "named", "words"), [
    ("%i %z", False, "%z"),
    ("%i %", False, "%"),
    ("JobID,Nope", True, "Nope"),
    (",", True, "no field"),
])
def test_unknown_fields_are_named(spec: str, named: bool, words: str) -> None:
    with pytest.raises(UserError, match=words):
        parse_fields(spec) if named else parse_format(spec)


def test_values_are_escaped() -> None:
    line = table("%j", view(jobName="x\x1b[2Jy"), header=False)[0]
    assert line == "x\\x1b[2Jy"


def test_tqueue_format_options(daemon: Daemon, capsys: pytest.CaptureFixture[str]) -> None:
    daemon.on("GET", "/v1/jobs", _items(view(id=3, backendId="77"), view(id=1)))
    assert tqueue_main(["-h", "-o", "%i:%T"]) == 0
    assert capsys.readouterr().out == "1:RUNNING\n3:RUNNING\n"
    assert tqueue_main(["-O", "jobid:4,backendjobid:6"]) == 0
    assert capsys.readouterr().out == "JOBIBACKEN\n1   9001  \n3   77    \n"
    assert tqueue_main(["-o", "%i", "-O", "JobID"]) == 1
    assert "cannot be used together" in capsys.readouterr().err
    assert tqueue_main(["-o", "%i %Q"]) == 1
    assert "Invalid job format specification: %Q" in capsys.readouterr().err


def test_widths_zero_means_unlimited_and_huge_ones_are_cut() -> None:
    assert table("%0j|%.0i", view(), header=False)[0] == "train.sh|12"
    wide = table("%99999999999999999999i", view(), header=False)[0]
    assert len(wide) == 1024 and wide.startswith("12 ")
