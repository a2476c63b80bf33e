"""``tqueue``'s output formats, as squeue's: ``-o/--format`` and ``-O/--Format``.

* ``-o "%.18i %.9P %.8j"``: literal text and fields ``%[.][SIZE]LETTER``. SIZE is the
  field's width (values are cut to it and padded; without it, neither), ``.`` right-
  justifies. Letters: squeue's for what the bridge knows (:data:`LETTERS`).
* ``-O "JobID:10,Name:.20,BackendJobId"``: fields by name (case-insensitive),
  ``NAME[:[.][SIZE][SUFFIX]]``, each 20 wide unless SIZE says otherwise, SUFFIX printed
  after it (squeue's rules). Names: squeue's, plus the bridge's ``Backend`` and
  ``BackendJobId`` (the back end's own id beside the bridge's: squeue has no such field).

An unknown letter or name is a :class:`UserError` naming it, as squeue refuses one.
:data:`DEFAULT_FORMAT` is squeue's default table. Values are shown with control
characters escaped (:func:`bridge.cli.common.clean`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import NamedTuple, cast

from bridge.cli.common import UserError
from bridge.client_types import JobView
from bridge.queue_cells import (
    COMPACT_STATES,
    DEFAULT_FORMAT,
    HELD_REASONS,
    LONG_STATES,
    NOT_STARTED,
    clean,
    compact_state,
    nodelist,
)
from bridge.ranges import compress
from bridge.slurmtime import format_seconds

__all__ = ["COMPACT_STATES", "DEFAULT_FORMAT", "Column", "is_held", "parse_fields",
           "parse_format", "render"]


def parse_time(value: str | None) -> datetime | None:
    """An ISO 8601 time from the daemon (UTC when it names no zone); ``None`` when
    there is none or it does not parse."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _elapsed(job: JobView, now: datetime) -> str:
    start = parse_time(job.get("startTime"))
    if start is None:
        return format_seconds(0)
    end = parse_time(job.get("endTime")) or now
    return format_seconds(max(0, int((end - start).total_seconds())))


def _limit(job: JobView, now: datetime) -> str:
    minutes = job.get("timeLimitMinutes")
    return "N/A" if minutes is None else format_seconds(int(minutes) * 60)


def _nodes_or_reason(job: JobView, now: datetime) -> str:
    state = job.get("state") or ""
    reason = job.get("reason")
    nodes = nodelist(job.get("nodes"))
    if state in NOT_STARTED:
        return f"({reason or 'None'})"
    if not nodes and reason:
        return f"({reason})"
    return nodes


def _num_nodes(job: JobView, now: datetime) -> object:
    nodes = job.get("nodes") or []
    return len(nodes) if nodes else job.get("numNodes", 1)


def _get(job: JobView, key: str) -> object:
    """``job[key]`` for a key chosen at run time (a TypedDict's ``get`` wants literals)."""
    return cast("Mapping[str, object]", job).get(key)


def _time(key: str) -> Callable[[JobView, datetime], str]:
    def value(job: JobView, now: datetime) -> str:
        raw = _get(job, key)
        at = parse_time(raw) if isinstance(raw, str) else None
        return at.astimezone().strftime("%Y-%m-%dT%H:%M:%S") if at else "N/A"
    return value


def _key(key: str, default: object = "") -> Callable[[JobView, datetime], object]:
    def value(job: JobView, now: datetime) -> object:
        got = _get(job, key)
        return default if got is None else got
    return value


def is_held(job: JobView) -> bool:
    """Held before its back end saw it (``tbatch --hold``, ``tcontrol hold``): squeue
    shows such a job pending, with its reason."""
    return job.get("state") == "Suspended" and job.get("reason") in HELD_REASONS


def _compact(job: JobView, now: datetime) -> str:
    return compact_state(job.get("state"), job.get("reason"))


def _long(job: JobView, now: datetime) -> str:
    state = job.get("state")
    if is_held(job):
        return "PENDING"
    return LONG_STATES.get(state or "", (state or "UNKNOWN").upper())


class Field(NamedTuple):
    """One thing a column can show: its header and how to read it from a job.
    (NamedTuples, not dataclasses: importing ``dataclasses`` costs tqueue's start.)"""

    title: str
    value: Callable[[JobView, datetime], object]


def display_id(job: JobView) -> str:
    """The id squeue shows: ``A_I`` for task I of job array A, ``A_[3-5,9%2]`` for the
    pending tasks :func:`fold_pending` folded into one row, else the job's id."""
    array = job.get("arrayJobId")
    if array is None:
        return str(job.get("id"))
    folded = job.get("foldedTasks") or []
    if len(folded) > 1:
        throttle = str(job.get("arrayTasks") or "").partition("%")[2]
        return f"{array}_[{compress(folded)}{'%' + throttle if throttle else ''}]"
    return f"{array}_{job.get('arrayTaskId')}"


def fold_pending(jobs: Sequence[JobView]) -> list[JobView]:
    """squeue's default view of arrays: the pending tasks of an array that have not
    reached their back end and wait for the same reason are one row (at the place of
    the first), ``A_[4-31%4]``; every other job is as it is (``tqueue -r`` folds
    nothing)."""
    out: list[JobView] = []
    groups: dict[tuple[int, str], JobView] = {}
    for job in jobs:
        array = job.get("arrayJobId")
        if array is None or job.get("state") != "Pending" or job.get("backendId"):
            out.append(job)
            continue
        key = (array, str(job.get("reason") or ""))
        folded = groups.get(key)
        if folded is None:
            folded = groups[key] = cast(JobView, {**job, "foldedTasks": []})
            out.append(folded)
        folded["foldedTasks"].append(int(job.get("arrayTaskId") or 0))
    return out


def _progress(job: JobView, now: datetime) -> str:
    """A progress report's percentage (bridge/trainer_status.py), else ``N/A``."""
    status = job.get("trainerStatus") or {}
    value = status.get("progressPercentage")
    return "N/A" if value is None else f"{value}%"


def _eta(job: JobView, now: datetime) -> str:
    """The report's estimated remaining time, counted down since the report (never
    below 0), as squeue writes times; ``N/A`` without one."""
    status = job.get("trainerStatus") or {}
    value = status.get("estimatedRemainingSeconds")
    if value is None:
        return "N/A"
    reported = parse_time(status.get("lastUpdatedTime"))
    since = max(0.0, (now - reported).total_seconds()) if reported is not None else 0.0
    return format_seconds(max(0, int(value) - int(since)))


_ID = Field("JOBID", lambda j, now: display_id(j))
_OWN_ID = Field("JOBID", _key("id"))
_ARRAY_JOB = Field("ARRAY_JOB_ID", lambda j, now: j.get("arrayJobId") or j.get("id"))
_ARRAY_TASK = Field("ARRAY_TASK_ID", _key("arrayTaskId", "N/A"))
_NAME = Field("NAME", lambda j, now: j.get("jobName") or j.get("name") or "")
_USER = Field("USER", _key("user"))
_UID = Field("UID", _key("unixUid"))
_PARTITION = Field("PARTITION", _key("partition"))
_ST = Field("ST", _compact)
_STATE = Field("STATE", _long)
_TIME = Field("TIME", _elapsed)
_LIMIT = Field("TIME_LIMIT", _limit)
_NODES = Field("NODES", _num_nodes)
_NODELIST = Field("NODELIST", lambda j, now: nodelist(j.get("nodes")))
_REASONLIST = Field("NODELIST(REASON)", _nodes_or_reason)
_REASON = Field("REASON", _key("reason", "None"))
_SUBMIT = Field("SUBMIT_TIME", _time("submitTime"))
_START = Field("START_TIME", _time("startTime"))
_END = Field("END_TIME", _time("endTime"))
_CLUSTER = Field("CLUSTER", _key("backend"))
_BACKEND_ID = Field("BACKEND_JOBID", _key("backendId", "N/A"))
_PROGRESS = Field("PROGRESS", _progress)
_ETA = Field("ETA", _eta)

#: ``-o`` letters (squeue's meaning).
LETTERS: dict[str, Field] = {
    "i": _ID, "A": _OWN_ID, "F": _ARRAY_JOB, "K": _ARRAY_TASK, "j": _NAME, "u": _USER,
    "U": _UID, "P": _PARTITION, "t": _ST,
    "T": _STATE, "M": _TIME, "l": _LIMIT, "D": _NODES, "N": _NODELIST, "R": _REASONLIST,
    "r": _REASON, "V": _SUBMIT, "S": _START, "e": _END,
}
#: ``-O`` names, lower case (squeue's, and the bridge's Backend/BackendJobId).
NAMES: dict[str, Field] = {
    "jobid": _ID, "name": _NAME, "username": _USER, "userid": _UID, "partition": _PARTITION,
    "statecompact": _ST, "state": _STATE, "timeused": _TIME, "timelimit": _LIMIT,
    "numnodes": _NODES, "nodelist": _NODELIST, "reasonlist": _REASONLIST, "reason": _REASON,
    "submittime": _SUBMIT, "starttime": _START, "endtime": _END, "cluster": _CLUSTER,
    "backend": _CLUSTER, "backendjobid": _BACKEND_ID, "jobarrayid": _ID,
    "arrayjobid": _ARRAY_JOB, "arraytaskid": _ARRAY_TASK, "progress": _PROGRESS,
    "eta": _ETA,
}


class Column(NamedTuple):
    """A field with its width (``None``: as wide as the value), justification and the
    text after it; or, with ``field`` ``None``, literal text."""

    field: Field | None
    text: str = ""
    width: int | None = None
    right: bool = False

    def cell(self, job: JobView | None, now: datetime) -> str:
        if self.field is None:
            return self.text
        value = clean(self.field.title if job is None else self.field.value(job, now))
        if self.width is not None:
            value = value[:self.width]
            value = value.rjust(self.width) if self.right else value.ljust(self.width)
        return value + self.text


#: The widest column (a bigger SIZE is cut to it: no user can make a cell gigabytes).
MAX_WIDTH = 1024


def _width(size: str, default: int | None) -> int | None:
    """A SIZE as squeue reads it: none -> ``default``; 0 -> as wide as the value."""
    if not size:
        return default
    width = int(size[:6])
    return None if width == 0 else min(width, MAX_WIDTH)


_LETTER = re.compile(r"%(\.?)(\d*)(.?)", re.S)


def parse_format(spec: str) -> list[Column]:
    """``-o``'s columns (module docstring); :class:`UserError` for an unknown letter."""
    columns: list[Column] = []
    pos = 0
    for m in _LETTER.finditer(spec):
        if m.start() > pos:
            columns.append(Column(None, spec[pos:m.start()]))
        pos = m.end()
        dot, size, letter = m.groups()
        if letter == "%":
            columns.append(Column(None, "%"))
            continue
        field = LETTERS.get(letter)
        if field is None:
            known = "".join(sorted(LETTERS))
            raise UserError(f"Invalid job format specification: %{letter} "
                            f"(tqueue knows %{', %'.join(known)})")
        columns.append(Column(field, width=_width(size, None), right=bool(dot)))
    if pos < len(spec):
        columns.append(Column(None, spec[pos:]))
    return columns


_NAMED = re.compile(r"(\.?)(\d*)(.*)", re.S)


def parse_fields(spec: str) -> list[Column]:
    """``-O``'s columns (module docstring); :class:`UserError` for an unknown name."""
    columns: list[Column] = []
    for item in spec.split(","):
        name, _, rest = item.partition(":")
        name = name.strip()
        if not name:
            continue
        field = NAMES.get(name.lower())
        if field is None:
            raise UserError(f"Invalid job format specification: {name} "
                            f"(tqueue knows {', '.join(sorted(NAMES))}; case does not matter)")
        m = _NAMED.fullmatch(rest)
        assert m is not None  # the pattern matches any text
        dot, size, suffix = m.groups()
        columns.append(Column(field, suffix, _width(size, 20), bool(dot)))
    if not columns:
        raise UserError("-O/--Format names no field")
    return columns


def _cell_function(column: Column) -> Callable[[JobView, datetime], str]:
    """:meth:`Column.cell` for a job, with the column's choices made once, not per row."""
    text, width = column.text, column.width
    if column.field is None:
        return lambda job, now: text
    value = column.field.value
    if width is None:
        return lambda job, now: clean(value(job, now)) + text
    if column.right:
        return lambda job, now: clean(value(job, now))[:width].rjust(width) + text
    return lambda job, now: clean(value(job, now))[:width].ljust(width) + text


def render(columns: Sequence[Column], jobs: Sequence[JobView], *, header: bool,
           now: datetime) -> str:
    """The table: a header line of the fields' titles when ``header``, one line per job."""
    lines = ["".join(c.cell(None, now) for c in columns) + "\n"] if header else []
    cells = [_cell_function(c) for c in columns]
    lines += ["".join([cell(job, now) for cell in cells]) + "\n" for job in jobs]
    return "".join(lines)
