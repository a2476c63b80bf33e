"""``tlog``: print a job's standard output or error.

::

    tlog [-f] [-e] REF

Writes the job's output (``-e``: its standard error) to stdout as bytes, unchanged, as
the daemon streams it (only the job's owner may read it: the daemon's 403 otherwise).
``-f`` follows until the job has ended; a connection dropped while following (a daemon
restart) is resumed at the byte reached, after 2, 4, 8, 10, 10 s, at most
:data:`_LOG_RETRIES` times in a row. Without ``-f`` a dropped connection is an error.
Errors and exit statuses as every command (:mod:`bridge.cli.common`); a closed pipe
(``tlog REF | head``) exits 1 quietly.
"""

from __future__ import annotations

import sys
import time

from bridge.cli.args import ArgumentParser
from bridge.cli.common import connect, run
from bridge.client import BridgeClientError

__all__ = ["tlog_main"]

_LOG_RETRIES = 5


def _tlog(argv: list[str]) -> int:
    parser = ArgumentParser(prog="tlog", description="Print a job's output.")
    parser.add_argument(
        "-f", "--follow", action="store_true", help="keep printing until the job has ended"
    )
    parser.add_argument(
        "-e",
        "--stderr",
        action="store_true",
        help="the standard error stream instead of standard output",
    )
    parser.add_argument("job", help="job id, TrainJob uid or name")
    args = parser.parse_args(argv)
    stream = "stderr" if args.stderr else "stdout"
    out = sys.stdout.buffer
    offset, retries = 0, 0
    with connect() as client:
        while True:
            try:
                for chunk in client.stream_log(
                    args.job, stream=stream, offset=offset, follow=args.follow
                ):
                    out.write(chunk)
                    out.flush()
                    offset += len(chunk)
                    retries = 0
                return 0
            except BridgeClientError as exc:
                # A dropped connection while following (daemon restart): resume.
                if not args.follow or exc.status is not None or retries >= _LOG_RETRIES:
                    raise
                retries += 1
                time.sleep(min(2.0**retries, 10.0))


def tlog_main(argv: list[str] | None = None) -> int:
    """``tlog``: print (``-f``: follow) a job's standard output or error (``argv``
    ``None``: ``sys.argv``); returns the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    return run("tlog", lambda: _tlog(args))
