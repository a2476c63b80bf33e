"""sbatch's ``--begin`` times, read as Slurm reads them, for the back ends where the
bridge holds a job until then (Kubernetes, Flux; Slurm reads them itself).

Forms (sbatch(1), ``--begin``), case-insensitive, in the daemon's local time zone (sbatch
reads them in the submitter's; on one cluster they are normally the same)::

    now[+COUNT[UNIT]]      UNIT: s/sec/seconds (the default), m/min/minutes,
                           h/hour(s), d/day(s), w/week(s)
    HH:MM[:SS][AM|PM]      today at that time, tomorrow when it has passed
    midnight noon elevenses fika teatime   (00:00 12:00 11:00 15:00 16:00, as above)
    today tomorrow         (00:00 of that day)
    YYYY-MM-DD[THH:MM[:SS]]
    MM/DD[/YY][-HH:MM[:SS]]  MMDD[YY]  MM.DD[.YY]

Contract: :func:`begin_epoch` is the time as seconds since the epoch, counted from
``now`` (the job's admission: a relative time counts from there, as from sbatch's
submission), at most :data:`LATEST` (the end of year 9999, the last that prints);
anything else raises :class:`ValueError` naming the forms. Pure.
"""

from __future__ import annotations

import re
from datetime import datetime, time, timedelta

__all__ = ["ANN_BEGIN_AT", "begin_epoch"]

#: The bridge's annotation on a job it holds until its ``--begin`` (admission sets it,
#: and drops a client's): the time, seconds since the epoch. In the document, so that a
#: hold or a release, which rewrite it, keep it (bridge/job_summary.py reads it).
ANN_BEGIN_AT = "hpc-bridge.io/begin-at"

_UNITS = {"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
          "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
          "h": 3600, "hour": 3600, "hours": 3600,
          "d": 86400, "day": 86400, "days": 86400,
          "w": 604800, "week": 604800, "weeks": 604800}
_NAMED = {"midnight": time(0), "noon": time(12), "elevenses": time(11), "fika": time(15),
          "teatime": time(16)}
_NOW = re.compile(r"now(?:\+([0-9]{1,9})([a-z]*))?")
_CLOCK = re.compile(r"([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?(am|pm)?")
_ISO = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})(?:t([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?)?")
_US = re.compile(r"([0-9]{2})([/.]?)([0-9]{2})(?:\2([0-9]{2}))?(?:-(.+))?")
#: The latest begin time read (the end of year 9999, UTC): a later one would not print.
LATEST = 253402300799.0
_FORMS = ("now[+COUNT[s|m|h|d|w]], HH:MM[:SS][AM|PM], midnight, noon, elevenses, fika, "
          "teatime, today, tomorrow, YYYY-MM-DD[THH:MM[:SS]] or MM/DD[/YY][-HH:MM[:SS]]")


def _clock(text: str) -> time | None:
    named = _NAMED.get(text)
    if named is not None:
        return named
    match = _CLOCK.fullmatch(text)
    if match is None:
        return None
    hour, minute, second = int(match[1]), int(match[2]), int(match[3] or 0)
    if match[4]:
        if not 1 <= hour <= 12:
            raise ValueError(f"hour {hour} with {match[4].upper()}")
        hour = hour % 12 + (12 if match[4] == "pm" else 0)
    return time(hour, minute, second)


def _at(day: datetime, clock: time) -> float:
    return datetime.combine(day.date(), clock).timestamp()


def begin_epoch(text: str, now: float) -> float:
    """``text`` (a ``--begin`` value) as seconds since the epoch (module docstring)."""
    when = _epoch(text, now)
    if not 0 <= when <= LATEST:
        raise ValueError(f"--begin={text}: later than the year 9999")
    return when


def _epoch(text: str, now: float) -> float:
    word = text.strip().lower()
    today = datetime.fromtimestamp(now)
    try:
        if match := _NOW.fullmatch(word):
            unit = match[2] or "s"
            if unit not in _UNITS:
                raise ValueError(f"unknown unit {match[2]!r}")
            return now + int(match[1] or 0) * _UNITS[unit]
        if word in ("today", "tomorrow"):
            return _at(today + timedelta(days=word == "tomorrow"), time(0))
        clock = _clock(word)
        if clock is not None:
            at = _at(today, clock)
            return at if at > now else _at(today + timedelta(days=1), clock)
        if match := _ISO.fullmatch(word):
            return datetime(int(match[1]), int(match[2]), int(match[3]), int(match[4] or 0),
                            int(match[5] or 0), int(match[6] or 0)).timestamp()
        if match := _US.fullmatch(word):
            year = 2000 + int(match[4]) if match[4] else today.year
            clock = _clock(match[5]) if match[5] else time(0)
            if clock is None:
                raise ValueError(f"{match[5]!r} is not HH:MM[:SS]")
            return datetime.combine(datetime(year, int(match[1]), int(match[3])).date(),
                                    clock).timestamp()
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"--begin={text}: {exc} (forms: {_FORMS})") from None
    raise ValueError(f"--begin={text}: not a time Slurm reads (forms: {_FORMS})")
