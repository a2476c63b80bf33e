"""``twatch``: follow job events as they happen (``GET /v1/events``, a long-poll).

::

    twatch [--since SEQ] [-j JOBID]... [--once] [--json]

One line per event: ``SEQ TIME JOBID NAME USER FROM->STATE REASON MESSAGE``, or for a
progress report ``SEQ TIME JOBID NAME USER STATE progress 45% eta 1:02:05`` (or the
event's JSON with ``--json``, docs/events.md). A user sees the events of their own jobs;
root sees every job's. Without ``--since`` it starts with the events from now on;
``--since 0`` replays the history first. ``--once`` prints what there is and exits.
It follows until interrupted (Ctrl-C: exit 130) and resumes where it was when the
daemon restarts (an unreachable daemon is retried until it answers again).

Errors and exit statuses as every command (:mod:`bridge.cli.common`). Standard library
and :mod:`bridge.client` only: it starts as fast as ``tqueue``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from bridge.cli.args import ArgumentParser
from bridge.cli.common import clean, connect, run
from bridge.client import BridgeClientError
from bridge.slurmtime import format_seconds

__all__ = ["format_event", "twatch_main"]

#: Seconds between two tries while the daemon does not answer.
RETRY_DELAY = 2.0


def format_event(event: dict[str, Any]) -> str:
    """One event as a line for a terminal (control characters escaped); a progress
    report shows as ``progress 45% eta 1:02:05`` beside the job's state."""
    if event.get("type") == "progress":
        status = event.get("trainerStatus") or {}
        percent, eta = status.get("progressPercentage"), status.get("estimatedRemainingSeconds")
        fields = [event.get("id"), event.get("time"), event.get("jobId"), event.get("name"),
                  event.get("user"), event.get("state"), "progress",
                  "-" if percent is None else f"{percent}%",
                  f"eta {format_seconds(int(eta))}" if eta is not None else ""]
        return " ".join(clean(f) for f in fields if f not in (None, "")).rstrip()
    change = f"{event.get('from') or '-'}->{event.get('state')}"
    fields = [event.get("id"), event.get("time"), event.get("jobId"), event.get("name"),
              event.get("user"), change, event.get("reason") or "-", event.get("message")]
    return " ".join(clean(f) for f in fields if f not in (None, "")).rstrip()


def _twatch(argv: list[str]) -> int:
    parser = ArgumentParser(prog="twatch", description="Follow job events as they happen.")
    parser.add_argument("--since", type=int, metavar="SEQ",
                        help="start after event SEQ (0: from the first); default: now")
    parser.add_argument("-j", "--job", action="append", type=int, metavar="JOBID",
                        help="only this job's events (repeatable)")
    parser.add_argument("--once", action="store_true",
                        help="print the events there are and exit")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args(argv)
    if args.since is not None and args.since < 0:
        parser.error("--since must be 0 or more")
    jobs = set(args.job or ())
    since: int | None = args.since
    with connect() as client:
        while True:
            try:
                items, since = client.events(since=since, wait=0 if args.once else 20)
            except BridgeClientError as exc:
                if args.once or exc.status is not None or since is None:
                    raise
                time.sleep(RETRY_DELAY)  # the daemon is restarting: resume at `since`
                continue
            for event in items:
                if jobs and event.get("jobId") not in jobs:
                    continue
                print(json.dumps(event, ensure_ascii=False) if args.json
                      else format_event(event), flush=True)
            if args.once and not items:
                return 0


def twatch_main(argv: list[str] | None = None) -> int:
    """``twatch``: follow job events (``argv`` ``None``: ``sys.argv``); returns the exit
    status."""
    args = sys.argv[1:] if argv is None else list(argv)
    return run("twatch", lambda: _twatch(args))
