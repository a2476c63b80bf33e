"""Which Slurm errors are outages and which are refusals.

Slurm reports both through the same channels (slurmrestd answers HTTP 500 for an
invalid partition *and* for an unreachable controller; ``squeue --json`` exits 0
with an ``errors`` list when the controller is down), so the adapter decides by
Slurm's error number, falling back to the message text:

* transient (:class:`bridge.backend.BackendUnavailable`): communication errors
  (1000-1099), controller communication errors (1800-1899), socket errors
  (5000-5099), messages such as "Unable to contact slurm controller" / "Socket
  timed out", and any failure of a read (slurmrestd answers ``-1`` "Unspecified
  error" when it cannot load jobs, whether the controller is down or the token bad);
* everything else from a submission (``2000`` "Invalid partition name
  specified", ``2029`` "Invalid feature specification", ``9001`` "Failure during
  parsing" …) is a refusal (:class:`bridge.backend.BackendRejected`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from bridge.backend import BackendError, BackendRejected, BackendUnavailable

__all__ = ["classify", "error_messages", "is_transient_code", "is_transient_message"]

_TRANSIENT_RANGES = (range(1000, 1100), range(1800, 1900), range(5000, 5100))
_TRANSIENT_TEXT = (
    "unable to contact slurm controller",
    "socket timed out",
    "zero bytes were transmitted",
    "connection refused",
    "communication connection failure",
    "slurm backup controller in standby mode",
    "slurmctld is shutting down",
    "resource temporarily unavailable",
    "transport endpoint is not connected",
    "unable to connect",
)


def is_transient_code(code: int | None) -> bool:
    """Whether a Slurm error number means "cannot reach Slurm now"."""
    return code is not None and any(code in r for r in _TRANSIENT_RANGES)


def is_transient_message(message: str) -> bool:
    """Whether Slurm's message text means "cannot reach Slurm now"."""
    text = message.lower()
    return any(t in text for t in _TRANSIENT_TEXT)


def _code(entry: Mapping[str, Any]) -> int | None:
    for key in ("error_number", "error_code", "errno"):
        value = entry.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def error_messages(errors: Iterable[Any]) -> list[tuple[int | None, str]]:
    """``(number, message)`` of each entry of a Slurm ``errors`` list.

    The message joins ``error`` and ``description`` where both say something.
    """
    out: list[tuple[int | None, str]] = []
    for entry in errors:
        if not isinstance(entry, dict):
            out.append((None, str(entry)))
            continue
        parts = [str(entry[k]) for k in ("error", "description")
                 if isinstance(entry.get(k), str) and entry[k]]
        if len(parts) == 2 and parts[0] in parts[1]:
            parts = parts[1:]
        out.append((_code(entry), ": ".join(parts) or "unknown Slurm error"))
    return out


def classify(errors: Iterable[Any], *, context: str, read: bool = False) -> BackendError:
    """The back-end error for Slurm's ``errors`` list.

    ``read=True`` (listing jobs or nodes): every failure is transient, since a read
    cannot be refused for good. Otherwise transient numbers/messages give
    :class:`BackendUnavailable` and the rest :class:`BackendRejected` carrying
    Slurm's own messages (parsing noise such as "Failure during parsing" last).
    """
    items = error_messages(errors)
    if not items:
        items = [(None, "no details from Slurm")]
    useful = [m for c, m in items if c != 9001] or [m for _, m in items]
    message = f"{context}: " + "; ".join(dict.fromkeys(useful))
    transient = read or any(is_transient_code(c) or is_transient_message(m) for c, m in items)
    return BackendUnavailable(message) if transient else BackendRejected(message)
