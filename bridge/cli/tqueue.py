"""``tqueue``: list jobs, like squeue.

::

    tqueue [-u USERS] [--me] [-t STATES] [-j JOBS] [-h] [--json] [-M CLUSTERS|all]

Prints squeue's default table (:func:`format_queue`: ``JOBID PARTITION NAME USER ST
TIME NODES NODELIST(REASON)``), a page at a time as the daemon sends them (oldest
first). ``-u/--user`` and ``--me`` keep those users' jobs, ``-t/--states`` those
states (compact codes, Slurm's long names or the bridge's; ``all``; an unknown word is
an error naming it), ``-j/--jobs`` those ids, TrainJob names or uids (then in any
state, like ``squeue -j``), ``-M/--clusters`` those back ends' jobs with a first
CLUSTER column (the back end's name). ``-h/--noheader`` drops the header line;
``--json`` prints ``{"items": [...]}`` instead. Errors and exit statuses as every
command (:mod:`bridge.cli.common`). Values from the daemon are shown with control
characters escaped.
"""

from __future__ import annotations

import json
import os
import pwd
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from bridge.cli.common import ArgumentParser, UserError, clean, connect, nodelist, parse_time, run
from bridge.client import JobView
from bridge.slurmtime import format_seconds

__all__ = ["COMPACT_STATES", "format_queue", "tqueue_main"]

#: squeue's compact state codes for the bridge's job states.
COMPACT_STATES = {
    "Pending": "PD",
    "Submitted": "PD",
    "Running": "R",
    "Suspended": "S",
    "Succeeded": "CD",
    "Failed": "F",
    "Cancelled": "CA",
}
_NOT_STARTED = frozenset({"Pending", "Submitted", "Suspended"})
#: ``-t`` words (compact codes, Slurm's long names, the bridge's names) -> bridge states.
_STATE_WORDS: dict[str, tuple[str, ...]] = {
    "PD": ("Pending", "Submitted"),
    "PENDING": ("Pending", "Submitted"),
    "SUBMITTED": ("Submitted",),
    "R": ("Running",),
    "RUNNING": ("Running",),
    "S": ("Suspended",),
    "SUSPENDED": ("Suspended",),
    "CD": ("Succeeded",),
    "COMPLETED": ("Succeeded",),
    "SUCCEEDED": ("Succeeded",),
    "F": ("Failed",),
    "FAILED": ("Failed",),
    "CA": ("Cancelled",),
    "CANCELLED": ("Cancelled",),
}


def _elapsed(job: JobView, now: datetime) -> str:
    start = parse_time(job.get("startTime"))
    if start is None:
        return format_seconds(0)
    end = parse_time(job.get("endTime")) or now
    return format_seconds(max(0, int((end - start).total_seconds())))


def _nodes_or_reason(job: JobView) -> str:
    state = job.get("state") or ""
    reason = job.get("reason")
    nodes = nodelist(job.get("nodes"))
    if state in _NOT_STARTED:
        return f"({reason or 'None'})"
    if not nodes and reason:
        return f"({reason})"
    return nodes


def _compact(state: str | None) -> str:
    return COMPACT_STATES.get(state or "", (state or "?")[:2].upper())


def _cell(value: object, width: int) -> str:
    """squeue's ``%.Nx``: right-justified, cut to ``width``."""
    return clean(value)[:width].rjust(width)


_QUEUE_COLUMNS = (
    (18, "JOBID"),
    (9, "PARTITION"),
    (8, "NAME"),
    (8, "USER"),
    (2, "ST"),
    (10, "TIME"),
    (6, "NODES"),
)


_CLUSTER_WIDTH = 12


def format_queue(
    jobs: Sequence[JobView], *, header: bool = True, now: datetime | None = None,
    cluster: bool = False,
) -> str:
    """The squeue-like table (``%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R``); with
    ``cluster``, a first CLUSTER column (the job's back end), as ``squeue -M``."""
    now = now or datetime.now(UTC)
    lines = []

    def prefix(value: object) -> str:
        return _cell(value, _CLUSTER_WIDTH) + " " if cluster else ""

    if header:
        lines.append(prefix("CLUSTER")
                     + " ".join(title.rjust(w) for w, title in _QUEUE_COLUMNS)
                     + " NODELIST(REASON)")
    for job in jobs:
        nodes = job.get("nodes") or []
        row = (
            job.get("id"),
            job.get("partition") or "",
            job.get("jobName") or job.get("name"),
            job.get("user"),
            _compact(job.get("state")),
            _elapsed(job, now),
            len(nodes) if nodes else job.get("numNodes", 1),
        )
        cells = [_cell(v, w) for (w, _), v in zip(_QUEUE_COLUMNS, row, strict=True)]
        lines.append(prefix(job.get("backend") or "") + " ".join(cells) + " "
                     + clean(_nodes_or_reason(job)))
    return "\n".join(lines) + ("\n" if lines else "")


def _states(words: str) -> tuple[list[str], bool]:
    """``-t`` words -> (bridge states, all)."""
    states: list[str] = []
    for word in (w.strip() for w in words.split(",")):
        if not word:
            continue
        if word.upper() == "ALL":
            return [], True
        mapped = _STATE_WORDS.get(word.upper())
        if mapped is None:
            raise UserError(f"Invalid job state specified: {word}")
        states += [s for s in mapped if s not in states]
    return states, False


def _current_user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def _tqueue(argv: list[str]) -> int:
    parser = ArgumentParser(
        prog="tqueue", add_help=False, description="Show jobs known to hpc-bridge (like squeue)."
    )
    parser.add_argument("-u", "--user", help="only these users' jobs (comma-separated)")
    parser.add_argument("--me", action="store_true", help="only my jobs")
    parser.add_argument("-t", "--states", help="states: PD,R,S,CD,F,CA,... or all")
    parser.add_argument("-j", "--jobs", help="only these jobs (comma-separated ids/names)")
    parser.add_argument("-h", "--noheader", action="store_true", help="no header line")
    parser.add_argument("--json", action="store_true", help="print the jobs as JSON")
    parser.add_argument("-M", "--clusters",
                        help="only these back ends' jobs (comma-separated, or all), "
                             "with a CLUSTER column")
    parser.add_argument("--help", action="help", help="show this help")
    args = parser.parse_args(argv)
    clusters = {c for c in (args.clusters or "").split(",") if c}
    users = [u for u in (args.user or "").split(",") if u]
    if args.me:
        users.append(_current_user())
    states, all_states = _states(args.states) if args.states else ([], False)
    wanted = [j for j in (args.jobs or "").split(",") if j]
    if wanted and not args.states:
        all_states = True  # like squeue -j: show the job whatever its state
    collected: list[JobView] = []
    header = not args.noheader and not args.json
    with connect() as client:
        # The daemon pages oldest first: each page is printed as it arrives.
        for page in client.iter_pages(
            states=states or None,
            all_states=all_states,
            user=users[0] if len(set(users)) == 1 else None,
        ):
            jobs = sorted(page, key=lambda j: j.get("id") or 0)  # pages come in id order
            if users:
                jobs = [j for j in jobs if j.get("user") in users]
            if wanted:
                jobs = [j for j in jobs
                        if {str(j.get("id")), j.get("name"), j.get("uid")} & set(wanted)]
            if clusters and "all" not in clusters:
                jobs = [j for j in jobs if j.get("backend") in clusters]
            if args.json:
                collected += jobs
            elif jobs or header:
                sys.stdout.write(format_queue(jobs, header=header, cluster=bool(clusters)))
                header = False
    if args.json:
        print(json.dumps({"items": collected}, indent=2, ensure_ascii=False))
    return 0


def tqueue_main(argv: list[str] | None = None) -> int:
    """``tqueue``: list jobs, like squeue (``argv`` ``None``: ``sys.argv``); returns the
    exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    return run("tqueue", lambda: _tqueue(args))
