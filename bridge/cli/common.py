"""What every t* command shares: error reporting, exit statuses, the client, and the
few helpers more than one command's output needs.

Contract of every command built on :func:`run`: user errors (bad options, unreachable
daemon, refused request -- :class:`UserError` or
:class:`bridge.client.BridgeClientError`) print ``<prog>: error: <message>`` on stderr
(one line per line of the message) and give exit status 1, never a traceback; Ctrl-C
gives 130; argparse's ``--help`` gives its own status (0); a closed stdout pipe
(``tlog ... | head``) gives 1 quietly.

Standard library, :mod:`bridge.client` and :mod:`bridge.slurmtime` only at module level
(start-up time, see :mod:`bridge.cli`); python-hostlist and importlib.metadata are
imported by the helpers that need them, when they run.
"""

from __future__ import annotations

import os
import re
import sys

from bridge.client import BridgeClient, BridgeClientError
from bridge.errors import BridgeError
from bridge.queue_cells import clean, nodelist

TYPE_CHECKING = False  # typing costs every command ~2 ms of start-up (bridge.client_types)
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "UserError",
    "clean",
    "connect",
    "err",
    "expand_tasks",
    "nodelist",
    "run",
    "version",
]

class UserError(BridgeError):
    """A user error to print as ``prog: error: message`` (exit 1)."""


def err(prog: str, message: str) -> None:
    """Print ``message`` on stderr, each of its lines as ``prog: error: line``."""
    for line in message.split("\n"):
        print(f"{prog}: error: {line}", file=sys.stderr)


def run(prog: str, body: Callable[[], int]) -> int:
    """Run a command body, turning user errors into messages and exit statuses."""
    try:
        return body()
    except (BridgeClientError, UserError) as exc:
        err(prog, str(exc))
    except KeyboardInterrupt:
        return 130
    except SystemExit as exc:  # argparse's --help
        return exc.code if isinstance(exc.code, int) else 0
    except BrokenPipeError:
        # Output consumer went away (``| head``); keep Python quiet at shutdown.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 1


def connect() -> BridgeClient:
    """The client for the daemon the environment names (:meth:`BridgeClient.from_env`)."""
    return BridgeClient.from_env()


def version() -> str:
    """The installed hpc-bridge's version (``unknown`` when it is not installed)."""
    from importlib import metadata

    try:
        return metadata.version("hpc-bridge")
    except metadata.PackageNotFoundError:
        return "unknown"


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
