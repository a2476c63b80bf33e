"""What a cell of squeue's table shows of a job, for ``tqueue``'s formatter
(:mod:`bridge.cli.queue_format`) and the daemon's rendering of the default table
(:mod:`bridge.queue_table`): the same text whichever side renders it.

Standard library only at module level (the t* commands import it at start-up;
python-hostlist is imported by :func:`nodelist` when it has names to fold).

Contract: :func:`clean` escapes control characters (C0, DEL, C1) as Python writes them
and returns any other text unchanged; :func:`nodelist` folds node names into a Slurm
hostlist (``node[1-3]``), or joins them with commas when they do not fold (a name of
other characters than letters, digits, ``.``, ``_`` and ``-``);
:func:`compact_state` is squeue's ``%t`` for a bridge state and reason (a job held
before its back end saw it is ``PD``, as squeue shows a held job).
"""

from __future__ import annotations

import re

from bridge.queue_header import HEADER  # the header line of DEFAULT_FORMAT's table

TYPE_CHECKING = False  # typing costs every command ~2 ms of start-up (bridge.client_types)
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["COMPACT_STATES", "DEFAULT_FORMAT", "HEADER", "HELD_REASONS", "LONG_STATES",
           "NOT_STARTED", "clean", "compact_state", "nodelist"]

#: squeue's default ``-o``.
DEFAULT_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"


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
#: Slurm's long state names (``%T``) for the bridge's job states.
LONG_STATES = {
    "Pending": "PENDING",
    "Submitted": "PENDING",
    "Running": "RUNNING",
    "Suspended": "SUSPENDED",
    "Succeeded": "COMPLETED",
    "Failed": "FAILED",
    "Cancelled": "CANCELLED",
}
#: States of a job that has not started: ``%R`` shows its reason, not nodes.
NOT_STARTED = frozenset({"Pending", "Submitted", "Suspended"})
#: Reasons of a Suspended job held before its back end saw it (``tbatch --hold``,
#: ``tcontrol hold``): squeue shows such a job pending.
HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin"})

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: A node name hostlist folds: Slurm's and Kubernetes' (DNS) names are of these.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9._-]+")


def clean(value: object) -> str:
    """A value for a terminal: control characters (ESC, newline ...) shown escaped."""
    text = "" if value is None else str(value)
    if text.isprintable():  # no control character (the common case: no regex)
        return text
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def nodelist(nodes: Iterable[str] | None) -> str:
    """Node names folded into a Slurm hostlist (``node[1-3]``); ``""`` for none."""
    names = [str(n) for n in nodes or [] if n]
    if not names:
        return ""
    if not all(map(_PLAIN_NAME.fullmatch, names)):
        return ",".join(names)  # python-hostlist fails on some (a newline: AttributeError)
    import hostlist  # python-hostlist: sorts and folds like Slurm's own hostlist

    try:
        return str(hostlist.collect_hostlist(names))
    except (hostlist.BadHostlist, ValueError):  # a name it cannot compress is still shown
        return ",".join(names)


def compact_state(state: str | None, reason: str | None) -> str:
    """squeue's ``%t`` of a job in bridge ``state`` with ``reason``."""
    if state == "Suspended" and reason in HELD_REASONS:
        return "PD"
    return COMPACT_STATES.get(state or "", (state or "?")[:2].upper())
