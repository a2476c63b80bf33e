"""squeue's default table rendered in the daemon (bridge/queue_table.py) is, line for
line, what tqueue's own formatter prints from the JSON listing of the same jobs."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.cli.queue_format import fold_pending
from bridge.cli.tqueue import format_queue
from bridge.client_types import JobView
from bridge.queue_cells import HEADER, nodelist
from bridge.queue_table import TABLE_COLUMNS, render
from bridge.states import JobState
from bridge.store_listing import LIST_COLUMNS, ListRow
from bridge.views import list_view_of_row

NOW = 1_780_000_000.25

_words = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_odd = st.sampled_from(["", "gpu", "a-very-long-partition", "x\x1b[2Jy", "tab\there",
                        "\u00e9t\u00e9", "\x9bC1", "ok"])
_text = st.one_of(_odd, _words)
_reason = st.one_of(st.none(), st.sampled_from(
    ["", "JobHeldUser", "JobHeldAdmin", "Suspended", "Priority", "Dependency",
     "JobArrayTaskLimit", "bad\nreason"]), _words)
_node = st.one_of(st.sampled_from(["n01", "n02", "n03", "node10", "gpu-a1", "", "x[", "b,c"]),
                  _words)
# Pending often: an array's pending tasks fold when their back end has not seen them.
_state = st.one_of(st.just("Pending"), st.sampled_from([s.value for s in JobState]))
_time = st.one_of(st.none(), st.just(0.0),
                  st.floats(1_700_000_000, NOW + 100, allow_nan=False))


@st.composite
def _row(draw: st.DrawFn, job_id: int) -> ListRow:
    summary: dict[str, Any] = {}
    for key, value in (("jobName", st.one_of(st.none(), _text)),
                       ("partition", st.one_of(st.none(), _text)),
                       ("numNodes", st.one_of(st.none(), st.integers(1, 2_000_000))),
                       ("array", st.one_of(st.none(), st.sampled_from(
                           ["0-31%4", "1,3,5", "0-15:4", "2%1"])))):
        if draw(st.booleans()):
            summary[key] = draw(value)
    array_job = draw(st.one_of(st.none(), st.sampled_from([1, 5, 900])))
    return ListRow(
        id=job_id, uid=f"u-{job_id}", namespace="default", name=draw(_text),
        owner_uid=1000, owner_user=draw(_text),
        backend=draw(st.sampled_from([None, "slurm", "k8s"])),
        backend_id=draw(st.sampled_from([None, "", "4242"])),
        state=draw(_state), reason=draw(st.one_of(st.just("JobArrayTaskLimit"), _reason)),
        message=None, exit_code=None,
        nodes=json.dumps(draw(st.lists(_node, max_size=4))),
        stdout_path=None, stderr_path=None, queue=draw(st.one_of(st.none(), _text)),
        attempts=0, cancel_requested=0, created_at=None, started_at=draw(_time),
        finished_at=draw(_time), placement=None,
        summary=json.dumps(summary) if draw(st.booleans()) else None,
        array_job_id=array_job,
        array_task_id=None if array_job is None else draw(st.integers(0, 40)))


@st.composite
def _rows(draw: st.DrawFn) -> list[ListRow]:
    count = draw(st.integers(0, 12))
    return [draw(_row(job_id)) for job_id in range(1, count + 1)]


def _both(rows: list[ListRow]) -> tuple[list[tuple[Any, ...]], list[JobView]]:
    """The rows read back through SQLite as the table reads them and as the JSON
    listing's views."""
    db = sqlite3.connect(":memory:")
    db.execute(f"CREATE TABLE jobs ({LIST_COLUMNS})")
    db.executemany(f"INSERT INTO jobs VALUES ({','.join('?' * len(ListRow._fields))})", rows)
    table = db.execute(f"SELECT {TABLE_COLUMNS} FROM jobs ORDER BY id").fetchall()
    listed = [ListRow._make(r) for r in
              db.execute(f"SELECT {LIST_COLUMNS} FROM jobs ORDER BY id")]
    views: list[JobView] = [list_view_of_row(r) for r in listed]  # type: ignore[misc]
    return table, views


@settings(max_examples=300, deadline=None)
@given(_rows(), st.booleans())
def test_the_daemons_table_is_what_tqueue_formats(rows: list[ListRow], fold: bool) -> None:
    table, views = _both(rows)
    now = datetime.fromtimestamp(NOW, UTC)
    expected = format_queue(fold_pending(views) if fold else views, header=False, now=now)
    assert render(table, NOW, fold=fold) == expected


def test_a_folded_array_and_the_header() -> None:
    summary = json.dumps({"jobName": "sweep", "array": "0-31%4", "numNodes": 1})
    base = dict(uid="u", namespace="default", name="tj", owner_uid=1000, owner_user="alice",
                backend="slurm", message=None, exit_code=None, nodes="[]", stdout_path=None,
                stderr_path=None, queue="debug", attempts=0, cancel_requested=0,
                created_at=None, started_at=None, finished_at=None, placement=None,
                summary=summary, array_job_id=10)
    rows = [ListRow(id=10 + i, backend_id=None, state="Pending", reason="JobArrayTaskLimit",
                    array_task_id=i, **base) for i in range(4, 8)]
    rows.insert(0, ListRow(id=9, backend_id="77", state="Running", reason=None,
                           array_task_id=3, **{**base, "nodes": '["n1", "n2"]',
                                               "started_at": NOW - 65}))
    table, _views = _both(rows)
    assert render(table, NOW).splitlines() == [
        "              10_3     debug    sweep    alice  R       1:05      2 n[1-2]",
        "        10_[4-7%4]     debug    sweep    alice PD       0:00      1 "
        "(JobArrayTaskLimit)",
    ]
    assert len(render(table, NOW, fold=False).splitlines()) == 5
    assert format_queue([], header=True) == HEADER


def test_node_names_hostlist_cannot_fold_are_listed_as_they_are() -> None:
    # python-hostlist raised AttributeError on a name with a newline (tqueue crashed).
    assert nodelist(["n01", "n02"]) == "n[01-02]"
    assert nodelist(["n01", "bad\nname", "x[1"]) == "n01,bad\nname,x[1"
    assert nodelist(["", None]) == ""  # type: ignore[list-item]
