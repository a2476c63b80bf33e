"""``tcancel``: cancel jobs, like scancel.

::

    tcancel REF...

Each ``REF`` (job id, TrainJob uid or name) is cancelled in turn. A job array is ``A``
(every task), ``A_I`` (one task) or ``A_[1-3,7]`` (those tasks, as scancel reads it).
A refusal prints one scancel-like line for that job (``tcancel: error: Kill job error on job id REF:
Access/permission denied`` for 403, ``Invalid job id specified`` for 404, else the
daemon's message) and the others are still tried; the exit status is 1 if any failed,
else 0. An unreachable daemon is said once (exit 1). Other errors as every command
(:mod:`bridge.cli.common`).
"""

from __future__ import annotations

import re
import sys

from bridge.cli.common import ArgumentParser, clean, connect, err, run
from bridge.client import BridgeClientError

__all__ = ["expand_tasks", "tcancel_main"]

_TASKS = re.compile(r"([1-9][0-9]{0,17})_\[([0-9,\-:]{1,4096})\]")
#: The most task references one ``A_[...]`` expands to (a job array's tasks are fewer).
MAX_TASKS = 100_000


def expand_tasks(ref: str) -> list[str]:
    """``A_[1-3,7]`` (scancel's task list, ``N-M:STEP`` too) as ``A_1 A_2 A_3 A_7``;
    any other reference as itself (one that does not read as a list is sent as it is,
    and the daemon answers that no such job exists)."""
    m = _TASKS.fullmatch(ref)
    if m is None:
        return [ref]
    out: list[str] = []
    for part in m.group(2).split(","):
        span, _, step = part.partition(":")
        first, _, last = span.partition("-")
        if not (first.isdigit() and (last or first).isdigit() and (step or "1").isdigit()):
            return [ref]
        lo, hi, by = int(first), int(last or first), int(step or "1")
        if by < 1 or hi < lo or len(out) + (hi - lo) // by >= MAX_TASKS:
            return [ref]
        out += [f"{m.group(1)}_{i}" for i in range(lo, hi + 1, by)]
    return out


def _tcancel(argv: list[str]) -> int:
    parser = ArgumentParser(prog="tcancel", description="Cancel jobs (like scancel).")
    parser.add_argument("jobs", nargs="+", metavar="job", help="job ids, uids or names")
    args = parser.parse_args(argv)
    failed = False
    with connect() as client:
        for ref in [r for given in args.jobs for r in expand_tasks(given)]:
            try:
                client.cancel(ref)
            except BridgeClientError as exc:
                if exc.status is None:
                    raise  # the daemon is unreachable: say so once
                reason = {403: "Access/permission denied", 404: "Invalid job id specified"}.get(
                    exc.status, exc.message
                )
                err("tcancel", f"Kill job error on job id {clean(ref)}: {reason}")
                failed = True
    return 1 if failed else 0


def tcancel_main(argv: list[str] | None = None) -> int:
    """``tcancel``: cancel jobs (``argv`` ``None``: ``sys.argv``); exit status 1 when any
    cancellation failed."""
    args = sys.argv[1:] if argv is None else list(argv)
    return run("tcancel", lambda: _tcancel(args))
