"""``tcontrol``: act on jobs, like ``scontrol hold|release|suspend|resume``.

::

    tcontrol hold JOB[,JOB...] [JOB...]      # a pending job waits (JobHeldUser)
    tcontrol release JOB...                  # ... until released (tbatch --hold too)
    tcontrol suspend JOB...                  # a job leaves its back end's nodes
    tcontrol resume JOB...                   # (Kubernetes: pods deleted; Slurm:
                                             #  requeued and held, then released)

``JOB`` is a job id, TrainJob uid or name; several may be given, comma- or space-
separated, as scontrol takes them. ``hold`` works on a job that has not started, before
its back end or waiting in Slurm's queue (else ``Job is no longer pending
execution``); ``release`` on a held one. Each
refusal prints one line naming the job (``Invalid job id specified`` for 404, else the
daemon's message: ``Access/permission denied`` …) and the other jobs are still
tried; the exit status is 1 if any failed. Other errors as every command
(:mod:`bridge.cli.common`).
"""

from __future__ import annotations

import sys

from bridge.cli.args import ArgumentParser
from bridge.cli.common import clean, connect, err, run
from bridge.client import BridgeClientError

__all__ = ["ACTIONS", "tcontrol_main"]

#: What tcontrol does, as scontrol spells it.
ACTIONS = ("hold", "release", "suspend", "resume")


def _tcontrol(argv: list[str]) -> int:
    parser = ArgumentParser(prog="tcontrol",
                            description="Hold, release, suspend or resume jobs (like scontrol).")
    parser.add_argument("action", choices=ACTIONS, help="what to do")
    parser.add_argument("jobs", nargs="+", metavar="job",
                        help="job ids, uids or names (comma- or space-separated)")
    args = parser.parse_args(argv)
    refs = [ref for word in args.jobs for ref in word.split(",") if ref]
    failed = False
    with connect() as client:
        for ref in refs:
            try:
                client.control(ref, args.action)
            except BridgeClientError as exc:
                if exc.status is None:
                    raise  # the daemon is unreachable: say so once
                reason = ("Invalid job id specified" if exc.status == 404
                          else exc.message or "Access/permission denied")
                err("tcontrol", f"{args.action} job {clean(ref)}: {reason}")
                failed = True
    return 1 if failed else 0


def tcontrol_main(argv: list[str] | None = None) -> int:
    """``tcontrol``: hold, release, suspend or resume jobs (``argv`` ``None``:
    ``sys.argv``); exit status 1 when any failed."""
    args = sys.argv[1:] if argv is None else list(argv)
    return run("tcontrol", lambda: _tcontrol(args))
