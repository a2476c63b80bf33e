"""Slurm time limits: parse them as ``sbatch --time`` does, print them as ``squeue`` does.

Accepted forms (Slurm's ``time_str2secs``), all fields non-negative decimal integers
with no range checks (``90`` minutes and ``0:90`` are both fine, as in Slurm)::

    minutes                 minutes:seconds          hours:minutes:seconds
    days-hours              days-hours:minutes       days-hours:minutes:seconds
    UNLIMITED / INFINITE / -1   (any case)  -> no limit

Contract:

* :func:`parse_minutes` returns whole minutes, rounding seconds **up** (``0:30`` is 1
  minute, like Slurm), or ``None`` for no limit. ``0`` (or any spelling of zero time)
  also means no limit: "a time limit of zero requests that no time limit be imposed"
  (sbatch(1)).
* :func:`parse_seconds` returns seconds (``None`` for UNLIMITED); zero stays zero.
  It is the reading Slurm uses for durations such as ``--switches=N@wait``.
* :func:`format_minutes` / :func:`format_seconds` print like squeue's ``%l`` / ``%M``:
  ``D-HH:MM:SS`` with days, ``H:MM:SS`` with hours, else ``M:SS``; ``None`` prints as
  ``UNLIMITED``. ``parse_minutes(format_minutes(m)) == m`` for every ``m >= 1``.
* Bad input raises :class:`SlurmTimeError` (a :class:`ValueError`) whose message quotes
  the input: ``invalid time specification '1:2:3:4'``. Nothing else is raised.

Slurm is more lenient than this module in a few corner cases that are almost
certainly typos (``2-`` for two days, a leading ``-5``); those are refused here.
"""

from __future__ import annotations

import re

from bridge.errors import BridgeError

__all__ = [
    "MAX_SECONDS",
    "SlurmTimeError",
    "format_minutes",
    "format_seconds",
    "parse_minutes",
    "parse_seconds",
]

#: Largest duration accepted: Slurm computes seconds in a signed 32-bit int.
MAX_SECONDS = 2**31 - 1

_UNLIMITED = frozenset({"unlimited", "infinite", "-1"})
_D = r"([0-9]+)"
# One pattern per accepted form; group names say which field each number is.
_FORMS: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = (
    (re.compile(rf"{_D}"), ("m",)),
    (re.compile(rf"{_D}:{_D}"), ("m", "s")),
    (re.compile(rf"{_D}:{_D}:{_D}"), ("h", "m", "s")),
    (re.compile(rf"{_D}-{_D}"), ("d", "h")),
    (re.compile(rf"{_D}-{_D}:{_D}"), ("d", "h", "m")),
    (re.compile(rf"{_D}-{_D}:{_D}:{_D}"), ("d", "h", "m", "s")),
)
_SECONDS_PER = {"d": 86400, "h": 3600, "m": 60, "s": 1}


class SlurmTimeError(BridgeError, ValueError):
    """A time specification that sbatch would not accept."""


def parse_seconds(text: str) -> int | None:
    """Seconds in a Slurm time specification; ``None`` for UNLIMITED/INFINITE/-1."""
    if not isinstance(text, str):
        raise SlurmTimeError(f"invalid time specification {text!r}")
    if text.lower() in _UNLIMITED:
        return None
    for pattern, fields in _FORMS:
        match = pattern.fullmatch(text)
        if match is None:
            continue
        if any(len(group.lstrip("0")) > 12 for group in match.groups()):
            break  # absurdly long numbers: refuse before doing arithmetic on them
        total = sum(
            int(group.lstrip("0") or "0") * _SECONDS_PER[f]  # int() refuses 4300+ digits
            for group, f in zip(match.groups(), fields, strict=True)
        )
        if total > MAX_SECONDS:
            raise SlurmTimeError(
                f"time specification {text!r} is too large (at most {format_seconds(MAX_SECONDS)})"
            )
        return total
    raise SlurmTimeError(f"invalid time specification {text!r}")


def parse_minutes(text: str) -> int | None:
    """Whole minutes (seconds rounded up) in a time limit; ``None`` means no limit.

    ``UNLIMITED``, ``INFINITE``, ``-1`` and a zero time (``0``, ``0:00``, ...) all mean
    no limit, as in sbatch.
    """
    seconds = parse_seconds(text)
    if seconds is None or seconds == 0:
        return None
    return (seconds + 59) // 60


def format_seconds(seconds: int | None) -> str:
    """``squeue``'s rendering of a duration: ``1-02:03:04``, ``2:03:04``, ``3:04``."""
    if seconds is None:
        return "UNLIMITED"
    if seconds < 0:
        raise ValueError(f"negative duration {seconds}")
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def format_minutes(minutes: int | None) -> str:
    """``squeue``'s TIME_LIMIT rendering: ``30:00``, ``1:00:00``, ``2-00:00:00``, ``UNLIMITED``."""
    if minutes is None:
        return "UNLIMITED"
    if minutes < 0:
        raise ValueError(f"negative time limit {minutes}")
    return format_seconds(minutes * 60)
