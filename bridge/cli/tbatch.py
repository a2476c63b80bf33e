"""``tbatch``: submit a batch script, a ``--wrap`` command or a TrainJob file.

::

    tbatch [OPTIONS] [script.sh [ARGS]]
    tbatch [OPTIONS] --wrap CMD
    tbatch [OPTIONS] -f TRAINJOB.yaml

Options and ``#SBATCH`` lines are sbatch's (:mod:`bridge.sbatch`). The script comes
from stdin when none is named (or ``-``), like sbatch; a bare name not in the working
directory is looked up on ``PATH``. A script larger than
:data:`bridge.sbatch.MAX_SCRIPT_BYTES` is refused; one that is not UTF-8 (a Latin-1
comment) runs unchanged, its bytes carried as they are (:mod:`bridge.batchscript`), but its
``#SBATCH`` lines must be UTF-8. Prints ``Submitted batch job <id>`` or,
with ``--parsable``, ``<id>``; exit status 0. Errors of the script or options print
:class:`bridge.sbatch.SbatchError`'s message (already worded ``tbatch: error: ...``)
and exit 1; other errors as every command (:mod:`bridge.cli.common`). As sbatch, an
error's exit status is ``SLURM_EXIT_ERROR`` when that is set (1 to 255), and the
environment sent carries ``SLURM_UMASK`` (tbatch's umask when unset): the job's output
files are created under it.

tbatch does not parse its options: it finds the script (or ``-f`` file) to read with
:func:`bridge.sbatch.locate.locate` and sends its arguments, the script, the working
directory and the environment to the daemon (``POST /v1/sbatch``), which parses them
as before and answers tbatch's own message when something is wrong. So tbatch imports
the standard library and the client only, never the model (pydantic); ``--help``
imports the option table.
"""

from __future__ import annotations

import os
import sys

from bridge.cli.common import UserError, clean, connect, run, version
from bridge.cli.sbatch_request import error_status, sbatch_request
from bridge.sbatch.locate import locate

TYPE_CHECKING = False  # typing costs ~2 ms of tbatch's start (bridge.client_types)
if TYPE_CHECKING:
    from typing import Any

    from bridge.http11 import Response

__all__ = ["send_main", "tbatch_main"]


def _request(argv: list[str]) -> dict[str, Any] | None:
    """The ``POST /v1/sbatch`` body for ``argv``; None when it was ``--help``/``--version``
    (answered here)."""
    found = locate(argv)
    if found.help:
        from bridge.sbatch import help_text

        sys.stdout.write(help_text())
        return None
    if found.version:
        print(f"tbatch (hpc-bridge {version()})")
        return None
    try:
        cwd = os.getcwd()
    except OSError as exc:
        raise UserError(f"getcwd failed: {exc.strerror}") from None
    return sbatch_request(argv, found, cwd)


def _send(request: dict[str, Any], idempotency_key: str | None,
          answered: tuple[Response, bytes] | None = None) -> int:
    with connect() as client:
        result = client.submit_sbatch(request, idempotency_key=idempotency_key,
                                      answered=answered)
    if result.estimate is not None:  # --test-only: as sbatch, on stderr; nothing submitted
        print(f"tbatch: {clean(result.estimate)}", file=sys.stderr)
        return 0
    print(result.id if result.parsable else f"Submitted batch job {result.id}")
    return 0


def _tbatch(argv: list[str]) -> int:
    request = _request(argv)
    return 0 if request is None else _send(request, None)


def tbatch_main(argv: list[str] | None = None) -> int:
    """``tbatch``: submit a batch script, a ``--wrap`` command or a TrainJob file
    (``argv`` ``None``: ``sys.argv``); returns the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    return error_status(run("tbatch", lambda: _tbatch(args)))


def send_main(request: dict[str, Any], idempotency_key: str,
              answered: tuple[Response, bytes] | None = None) -> int:
    """Submit a ``POST /v1/sbatch`` body already built and print as ``tbatch``; returns
    the exit status. For :mod:`bridge.cli.quick`, which sent it once with
    ``idempotency_key``: ``answered`` is the daemon's whole answer to that, read as if it
    had come here; without one (no answer came) it is sent again under the same key, and
    the daemon answers a repeat with the job the first one made."""
    return run("tbatch", lambda: _send(request, idempotency_key, answered))
