"""Slurm hostlist expressions (``node[01-04,07]``, ``a[1-2]b[3-4]``, ``n1,n2``).

A thin typed layer over the ``python-hostlist`` library, shaped to agree with
Slurm itself (checked against ``scontrol show hostnames`` / ``show hostlist``):

* :func:`expand` keeps the order of the expression and its duplicates, as Slurm
  does (``n[3,1,1]`` gives ``n3 n1 n1``); spaces, tabs and newlines separate
  names like commas.
* :func:`compress` with ``sort=False`` (the default) writes what
  ``scontrol show hostlist`` writes: adjacent names with the same prefix share one
  bracket, runs become ranges, order and duplicates are kept, so
  ``expand(compress(hosts)) == hosts``. With ``sort=True`` it first sorts the
  names numerically (``n2`` before ``n10``) and drops duplicates, as Slurm does for
  a job's node list. Either form is one Slurm itself parses.
* Malformed input raises :class:`HostlistError` naming the expression and what is
  wrong with it (unclosed bracket, reversed range, ...); nothing else is raised.

Known difference: Slurm rejects text after the last bracket (``n[1-2]x``); this
module accepts it (``n1x n2x``), as pdsh and ``python-hostlist`` do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import hostlist as _hl

from bridge.errors import BridgeError

__all__ = ["HostlistError", "compress", "count", "expand"]

_WHITESPACE = re.compile(r"\s+")
_BRACKETS = re.compile(r"\[([^\[\]]*)\]")
_TAIL_NUMBER = re.compile(r"^(.*?)(\d+)$")
_FORBIDDEN = re.compile(r"[\[\],\s]")


class HostlistError(BridgeError, ValueError):
    """A malformed hostlist expression or host name. ``str(err)`` names both."""

    def __init__(self, expression: str, reason: str):
        self.expression = expression
        self.reason = reason
        super().__init__(f"invalid hostlist {expression!r}: {reason}")


def _explain(expression: str, library_reason: str) -> str:
    """Turn python-hostlist's terse reason into one that points at the culprit."""
    if "unbalanced" in library_reason:
        return "unbalanced brackets (a '[' without its ']' or a ']' without its '[')"
    if "nested" in library_reason:
        return "nested brackets"
    for inner in _BRACKETS.findall(expression):
        for item in inner.split(","):
            low_high = re.fullmatch(r"(\d+)-(\d+)", item)
            if low_high and int(low_high.group(1)) > int(low_high.group(2)):
                return f"reversed range {item!r} (start > end)"
            if not low_high and not re.fullmatch(r"\d+", item):
                return f"bad range {item!r} (expected N or N-M)"
    if "too large" in library_reason:
        return f"{library_reason} (more than {_hl.MAX_SIZE} names)"
    return library_reason


def expand(expression: str) -> list[str]:
    """The host names of ``expression``, in order, duplicates kept (as Slurm does).

    An empty or blank expression gives ``[]``. Raises :class:`HostlistError`.
    """
    text = _WHITESPACE.sub(",", expression.strip())
    try:
        names: list[str] = _hl.expand_hostlist(text, allow_duplicates=True)
    except _hl.BadHostlist as exc:
        raise HostlistError(expression, _explain(text, str(exc))) from None
    return names


_RANGE = re.compile(r"(\d+)-(\d+)")
_TOP_LEVEL_COMMA = re.compile(r",(?![^\[]*\])")


def count(expression: str) -> int:
    """How many names :func:`expand` would give, without making them (so that a short
    expression naming millions of hosts is refused cheaply); for a malformed one, an
    estimate that :func:`expand` then refuses."""
    total = 0
    for part in _TOP_LEVEL_COMMA.split(_WHITESPACE.sub(",", expression.strip())):
        if not part:
            continue
        names = 1
        for inner in _BRACKETS.findall(part):
            size = 0
            for item in inner.split(","):
                bounds = _RANGE.fullmatch(item)
                size += int(bounds[2]) - int(bounds[1]) + 1 if bounds else 1
            names *= max(size, 1)
        total += names
    return total


def _check_name(name: str) -> None:
    if not name or _FORBIDDEN.search(name):
        raise HostlistError(name, "a host name must be non-empty and contain no '[', ']', "
                                  "',' or white space")


def _compress_ordered(hosts: list[str]) -> str:
    """``scontrol show hostlist``: adjacent same-prefix names share a bracket."""
    # Each group: (prefix, [(low, high, width)]) or (name, None) for a name
    # without a trailing number.
    groups: list[tuple[str, list[tuple[int, int, int]] | None]] = []
    for name in hosts:
        m = _TAIL_NUMBER.match(name)
        if m is None:
            groups.append((name, None))
            continue
        prefix, digits = m.group(1), m.group(2)
        number, width = int(digits), len(digits)
        last = groups[-1] if groups else None
        if last is not None and last[0] == prefix and last[1] is not None:
            ranges = last[1]
            low, high, w = ranges[-1]
            if number == high + 1 and f"{number:0{w}d}" == digits:
                ranges[-1] = (low, number, w)
            else:
                ranges.append((number, number, width))
        else:
            groups.append((prefix, [(number, number, width)]))
    parts: list[str] = []
    for prefix, group in groups:
        if group is None:
            parts.append(prefix)
        elif len(group) == 1 and group[0][0] == group[0][1]:
            low, _, w = group[0]
            parts.append(f"{prefix}{low:0{w}d}")
        else:
            parts.append(prefix + "[" + ",".join(_hl.format_range(lo, hi, w)
                                                 for lo, hi, w in group) + "]")
    return ",".join(parts)


def compress(hosts: Iterable[str], *, sort: bool = False) -> str:
    """A hostlist expression for ``hosts``.

    ``sort=False``: Slurm's order-preserving form (``n[3,1-2,10]``), duplicates
    kept. ``sort=True``: numerically sorted, de-duplicated (``n[1-3,10]``). Raises
    :class:`HostlistError` for a name holding ``[``, ``]``, ``,`` or white space.
    """
    names = list(hosts)
    for name in names:
        _check_name(name)
    if not names:
        return ""
    if sort:
        names = _hl.remove_duplicates(_hl.numerically_sorted(names))
    return _compress_ordered(names)
