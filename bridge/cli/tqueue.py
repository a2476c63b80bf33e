"""``tqueue``: list jobs, like squeue.

::

    tqueue [-u USERS] [--me] [-t STATES] [-j JOBS] [-h] [-r] [--json] [-M CLUSTERS|all]
           [-o FORMAT | -O FIELDS]

Prints squeue's default table (:func:`format_queue`: ``JOBID PARTITION NAME USER ST TIME
NODES NODELIST(REASON)``), oldest first, as the daemon sends it. Without ``-o``, ``-O``,
``--progress``, ``--json``, ``-t``, ``-j``, ``-M`` and with one user at most, the daemon
renders that table itself (bridge/queue_table.py, the same lines) and tqueue writes it
as it arrives; otherwise it formats the JSON listing a page at a time (also when the
daemon has no table to give). ``-u/--user`` and ``--me`` keep those users' jobs,
``-t/--states`` those states (compact codes, Slurm's long names or the bridge's;
``all``; an unknown word is an error naming it), ``-j/--jobs`` those ids, TrainJob names
or uids (then in any state, like ``squeue -j``), ``-M/--clusters`` those back ends' jobs
with a first CLUSTER column (the back end's name). ``-o/--format`` and ``-O/--Format``
choose the columns as squeue's do (:mod:`bridge.cli.queue_format`; ``-O BackendJobId``
is the back end's own id beside the bridge's). ``-h/--noheader`` drops the header line;
``--json`` prints ``{"items": [...]}`` instead. The pending tasks of a job array are one
line, ``A_[4-31%4]`` (:func:`bridge.cli.queue_format.fold_pending`), as squeue shows
them; ``-r/--array`` shows one line per task (``--json`` always does). Errors and exit
statuses as every command (:mod:`bridge.cli.common`). Values from the daemon are shown
with control characters escaped.
"""

from __future__ import annotations

import json
import os
import pwd
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from bridge.cli.args import ArgumentParser
from bridge.cli.common import UserError, connect, run
from bridge.cli.queue_format import (
    COMPACT_STATES,
    DEFAULT_FORMAT,
    NAMES,
    Column,
    display_id,
    fold_pending,
    is_held,
    parse_fields,
    parse_format,
    render,
)
from bridge.client import JobView
from bridge.queue_cells import HEADER

TYPE_CHECKING = False  # typing costs every command ~2 ms of start-up
if TYPE_CHECKING:
    from bridge.http11 import Response

__all__ = ["COMPACT_STATES", "format_queue", "tqueue_main"]

_STATE_WORDS: dict[str, tuple[str, ...]] = {
    # Held jobs (Suspended, JobHeldUser/JobHeldAdmin) are pending to squeue: PD reads
    # Suspended jobs too and keeps only the held ones (:func:`_keep`).
    "PD": ("Pending", "Submitted", "Suspended"),
    "PENDING": ("Pending", "Submitted", "Suspended"),
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

#: ``-M``'s first column: the job's back end, as ``squeue -M`` shows its cluster.
_CLUSTER_COLUMN = Column(NAMES["cluster"], " ", 12, right=True)


#: ``--progress``: squeue's default columns with PROGRESS and ETA before the last.
PROGRESS_FIELDS = ("jobid:.18 ,partition:.9 ,name:.8 ,username:.8 ,statecompact:.2 ,"
                   "timeused:.10 ,numnodes:.6 ,progress:.8 ,eta:.10 ,reasonlist:0")


def format_queue(
    jobs: Sequence[JobView], *, header: bool = True, now: datetime | None = None,
    cluster: bool = False, columns: Sequence[Column] | None = None,
) -> str:
    """The squeue-like table: ``columns`` (:mod:`bridge.cli.queue_format`), by default
    squeue's (``%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R``); with ``cluster``, a first
    CLUSTER column (the job's back end), as ``squeue -M``."""
    cols = list(columns if columns is not None else parse_format(DEFAULT_FORMAT))
    if cluster:
        cols.insert(0, _CLUSTER_COLUMN)
    return render(cols, jobs, header=header, now=now or datetime.now(UTC))


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


def _keep(job: JobView, words: str | None) -> bool:
    """Whether a Suspended job answers ``-t`` ``words``: a held one is PD, another S."""
    if not words or job.get("state") != "Suspended":
        return True
    asked = {w.strip().upper() for w in words.split(",")}
    if "ALL" in asked:
        return True
    return bool(asked & ({"PD", "PENDING"} if is_held(job) else {"S", "SUSPENDED"}))


def _current_user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def _tqueue(argv: list[str], refused: tuple[Response, bytes] | None = None) -> int:
    parser = ArgumentParser(
        prog="tqueue", add_help=False, description="Show jobs known to hpc-bridge (like squeue)."
    )
    parser.add_argument("-u", "--user", help="only these users' jobs (comma-separated)")
    parser.add_argument("--me", action="store_true", help="only my jobs")
    parser.add_argument("-t", "--states", help="states: PD,R,S,CD,F,CA,... or all")
    parser.add_argument("-j", "--jobs", help="only these jobs (comma-separated ids/names)")
    parser.add_argument("-h", "--noheader", action="store_true", help="no header line")
    parser.add_argument("-r", "--array", action="store_true",
                        help="one line per task of an array (else its pending tasks are "
                             "one line, A_[4-31%%4], as squeue shows them)")
    parser.add_argument("--json", action="store_true", help="print the jobs as JSON")
    parser.add_argument("-M", "--clusters",
                        help="only these back ends' jobs (comma-separated, or all), "
                             "with a CLUSTER column")
    parser.add_argument("-o", "--format", help='squeue\'s format, e.g. "%%.18i %%.8j %%T"')
    parser.add_argument("-O", "--Format", dest="fields",
                        help="fields by name, e.g. JobID,Name:30,BackendJobId")
    parser.add_argument("--progress", action="store_true",
                        help="add PROGRESS and ETA columns (what the job reports)")
    parser.add_argument("--help", action="help", help="show this help")
    args = parser.parse_args(argv)
    if args.format is not None and args.fields is not None:
        raise UserError("-o/--format and -O/--Format cannot be used together")
    if args.progress and (args.format is not None or args.fields is not None):
        raise UserError("--progress adds to the default columns; to choose columns use "
                        "-O, e.g. -O jobid,name,progress,eta (-o has no letters for them)")
    columns = (parse_format(args.format) if args.format is not None
               else parse_fields(args.fields) if args.fields is not None
               else parse_fields(PROGRESS_FIELDS) if args.progress else None)
    clusters = {c for c in (args.clusters or "").split(",") if c}
    users = [u for u in (args.user or "").split(",") if u]
    if args.me:
        users.append(_current_user())
    states, all_states = _states(args.states) if args.states else ([], False)
    wanted = [j for j in (args.jobs or "").split(",") if j]
    if wanted and not args.states:
        all_states = True  # like squeue -j: show the job whatever its state
    header = not args.noheader and not args.json
    if (columns is None and not (args.json or args.states or wanted or clusters)
            and len(set(users)) <= 1):
        # squeue's default view: the daemon renders it (bridge/queue_table.py).
        with connect() as client:
            text = client.queue_table(user=users[0] if users else None, array=args.array,
                                      refused=refused)
            if text is not None:
                if header:
                    sys.stdout.write(HEADER)
                for piece in text:
                    sys.stdout.write(piece)
                return 0
    collected: list[JobView] = []
    # The next page is read in a thread while this one is formatted (BridgeClient
    # .iter_pages); with the default 5 ms switch interval that thread waited for the GIL
    # at each step of its request and the two hardly overlapped.
    interval = sys.getswitchinterval()  # put back: tqueue_main may run in a caller's process
    sys.setswitchinterval(0.0002)
    try:
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
                jobs = [j for j in jobs if _keep(j, args.states)]
                if wanted:
                    jobs = [j for j in jobs
                            if {str(j.get("id")), j.get("name"), j.get("uid"), display_id(j),
                                str(j.get("arrayJobId", j.get("id")))} & set(wanted)]
                if clusters and "all" not in clusters:
                    jobs = [j for j in jobs if j.get("backend") in clusters]
                if args.json:
                    collected += jobs
                elif jobs or header:
                    shown = jobs if args.array else fold_pending(jobs)
                    sys.stdout.write(format_queue(shown, header=header, cluster=bool(clusters),
                                                  columns=columns))
                    header = False
    finally:
        sys.setswitchinterval(interval)
    if args.json:
        print(json.dumps({"items": collected}, indent=2, ensure_ascii=False))
    return 0


def tqueue_main(argv: list[str] | None = None, *,
                refused: tuple[Response, bytes] | None = None) -> int:
    """``tqueue``: list jobs, like squeue (``argv`` ``None``: ``sys.argv``); returns the
    exit status. ``refused``: the daemon's refusal of the default view's request, asked
    once already by the quick path (:mod:`bridge.cli.quick`), answered as if it had come
    here (:meth:`bridge.client.BridgeClient.queue_table`)."""
    args = sys.argv[1:] if argv is None else list(argv)
    return run("tqueue", lambda: _tqueue(args, refused))
