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

import sys

from bridge.cli.args import ArgumentParser
from bridge.cli.common import clean, connect, err, expand_tasks, run
from bridge.client import BridgeClientError

__all__ = ["tcancel_main"]

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
