"""Slurm hostlist expressions: ``node[01-04,07]`` to host names and back.

Written here instead of imported (python-hostlist, Slurm's own C code) because
``mpi_launch`` runs on compute nodes inside any image and uses the standard library
only.

:func:`expand` accepts (a superset of what Slurm 22.05's ``scontrol`` accepts)::

    list   := item ( ("," | whitespace)+ item )*     empty items are skipped
    item   := ( text | "[" ranges "]" )+             text: no "[", "]", "," or whitespace
    ranges := range ( "," range )*
    range  := digits [ "-" digits ]                  lo <= hi

The width of ``lo`` sets the zero padding of the whole range, as in Slurm
(``n[08-10]`` gives n08 n09 n10, ``n[9-011]`` gives n9 n10 n11). Several bracket
groups in one item give their product in Slurm's order: ``rack[1-2]-n[1-3]`` gives
rack1-n1 rack1-n2 rack1-n3 rack2-n1 ...; with three or more groups the last varies
fastest, then the first, the second, ... (``x[1-2]y[3-4]z[5-6]``: x1y3z5 x1y3z6 x2y3z5
x2y3z6 x1y4z5 ...), as ``scontrol show hostnames`` prints them. Order and duplicates
are kept.

:func:`compress` ranges the trailing digits of each name and merges neighbours only,
like ``scontrol show hostlist``, so ``expand(compress(hosts)) == hosts`` for any list
of valid names. It splits runs longer than :data:`SLURM_MAX_RANGE` because Slurm
rejects such a range ("Too many hosts in range").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from itertools import product

from mpi_launch.errors import MpiLaunchError

__all__ = ["MAX_HOSTS", "SLURM_MAX_RANGE", "HostlistError", "compress", "expand"]

MAX_HOSTS = 1 << 22
"""Most names one expression may expand to (a typo like ``n[1-999999999]`` fails fast)."""

SLURM_MAX_RANGE = 65536
"""Most names Slurm 22.05 accepts in one ``lo-hi`` range (its ``MAX_RANGE``)."""

_TOKEN = re.compile(r"(?P<text>[^\[\],\s]+)|(?P<group>\[[^\[\]]*\])|(?P<sep>[,\s]+)|(?P<bad>.)",
                    re.S)
_RANGE = re.compile(r"([0-9]{1,18})(?:-([0-9]{1,18}))?")  # 18 digits: far past any cluster
_NOT_A_NAME = re.compile(r"[\[\],\s]")
_DIGITS = "0123456789"
_SHOW_MAX = 120


class HostlistError(MpiLaunchError, ValueError):
    """A hostlist expression (or host name) that cannot be parsed.

    ``str()`` names where the value came from: ``SLURM_JOB_NODELIST='node[1-': unclosed
    bracket``.
    """

    def __init__(self, source: str, value: str, reason: str) -> None:
        self.source = source
        self.value = value
        self.reason = reason
        super().__init__(f"{source}={_show(value)}: {reason}")


def _show(value: str) -> str:
    """``repr`` of a value, shortened for very long hostlists."""
    if len(value) <= _SHOW_MAX:
        return repr(value)
    return repr(value[:_SHOW_MAX]) + f"... ({len(value)} characters)"


def expand(expr: str, *, source: str = "hostlist") -> list[str]:
    """Every host name of ``expr``, in order; ``source`` names the input in errors.

    Raises :class:`HostlistError` for unclosed, unmatched, nested or empty brackets,
    ranges that are not ``lo[-hi]`` with ``lo <= hi``, and more than :data:`MAX_HOSTS`
    names.
    """
    hosts: list[str] = []
    parts: list[str | list[tuple[int, int, int]]] = []
    for m in _TOKEN.finditer(expr):
        kind = m.lastgroup
        if kind == "text":
            parts.append(m.group())
        elif kind == "group":
            parts.append(_parse_ranges(expr, m.group()[1:-1], m.start(), source))
        elif kind == "sep":
            _expand_item(expr, parts, hosts, source)
            parts = []
        else:
            raise HostlistError(source, expr, _bracket_problem(expr, m.start()))
    _expand_item(expr, parts, hosts, source)
    return hosts


def _bracket_problem(expr: str, pos: int) -> str:
    if expr[pos] == "]":
        return f"unmatched ']' at position {pos}"
    close = expr.find("]", pos)
    nested = expr.find("[", pos + 1)
    if close == -1:
        return f"unclosed bracket at position {pos}"
    if nested != -1 and nested < close:
        return f"nested '[' at position {nested}"
    raise AssertionError("unreachable: a complete bracket group is a token")


def _parse_ranges(expr: str, body: str, pos: int, source: str) -> list[tuple[int, int, int]]:
    """``lo[-hi]`` pieces of one bracket group as (lo, hi, width) triples."""
    if not body:
        raise HostlistError(source, expr, f"empty brackets at position {pos}")
    ranges = []
    for piece in body.split(","):
        m = _RANGE.fullmatch(piece)
        if m is None:
            raise HostlistError(source, expr, f"bad range {piece!r} at position {pos}")
        lo_s, hi_s = m.groups()
        lo = int(lo_s)
        hi = lo if hi_s is None else int(hi_s)
        if hi < lo:
            raise HostlistError(source, expr, f"range {piece!r} goes backwards")
        ranges.append((lo, hi, len(lo_s)))
    return ranges


def _expand_item(expr: str, parts: Sequence[str | list[tuple[int, int, int]]],
                 hosts: list[str], source: str) -> None:
    """Append the names of one item (text and bracket groups) to ``hosts``."""
    if not parts:
        return
    groups = [p for p in parts if not isinstance(p, str)]
    count = 1
    for g in groups:
        count *= sum(hi - lo + 1 for lo, hi, _ in g)
    if len(hosts) + count > MAX_HOSTS:
        raise HostlistError(source, expr, f"more than {MAX_HOSTS} hosts")
    if not groups:
        hosts.append("".join(p for p in parts if isinstance(p, str)))
        return
    if len(groups) == 1:
        i = next(n for n, p in enumerate(parts) if not isinstance(p, str))
        prefix = "".join(p for p in parts[:i] if isinstance(p, str))
        suffix = "".join(p for p in parts[i + 1:] if isinstance(p, str))
        for lo, hi, width in groups[0]:
            _format_range(prefix, lo, hi, width, suffix, hosts)
        return
    # Slurm's order: the last group varies fastest, then the first, the second, ...;
    # the group before the last varies slowest (for two groups: leftmost slowest).
    texts: list[str] = []
    columns: list[list[str]] = []
    pending = ""
    for p in parts:
        if isinstance(p, str):
            pending += p
            continue
        texts.append(pending)
        pending = ""
        column: list[str] = []
        for lo, hi, width in p:
            _format_range("", lo, hi, width, "", column)
        columns.append(column)
    texts.append(pending)
    k = len(columns)
    order = [*range(k - 2, -1, -1), k - 1]
    values = [""] * k
    for combo in product(*(columns[i] for i in order)):
        for i, value in zip(order, combo, strict=True):
            values[i] = value
        hosts.append("".join(t + v for t, v in zip(texts, values, strict=False)) + texts[-1])


_BLOCK = 3
_BLOCK_SIZE = 10**_BLOCK


@lru_cache(maxsize=64)
def _last_digits(suffix: str) -> tuple[str, ...]:
    """``000<suffix>`` … ``999<suffix>``."""
    return tuple(f"{j:0{_BLOCK}d}{suffix}" for j in range(_BLOCK_SIZE))


def _format_range(prefix: str, lo: int, hi: int, width: int, suffix: str,
                  out: list[str]) -> None:
    """Append ``prefix + number (zero-padded to width) + suffix`` for lo..hi to ``out``.

    Names of one printed length are a head (prefix and leading digits) plus a cached
    table of the last three digits: one string concatenation per name, 3x faster than
    formatting each number.
    """
    n = lo
    while n <= hi:
        digits = max(width, len(str(n)))
        last = min(hi, 10**digits - 1)  # the last number printed with `digits` digits
        if digits <= _BLOCK:
            out.extend(f"{prefix}{i:0{width}d}{suffix}" for i in range(n, last + 1))
        else:
            table = _last_digits(suffix)
            for high in range(n // _BLOCK_SIZE, last // _BLOCK_SIZE + 1):
                base = high * _BLOCK_SIZE
                head = f"{prefix}{high:0{digits - _BLOCK}d}"
                out.extend(map(head.__add__,
                               table[max(n - base, 0):min(last - base, _BLOCK_SIZE - 1) + 1]))
        n = last + 1


def compress(hosts: Iterable[str], *, source: str = "hosts",
             max_range: int = SLURM_MAX_RANGE) -> str:
    """The shortest Slurm-readable expression for ``hosts`` that keeps their order.

    Neighbours sharing a prefix and consecutive trailing numbers (same zero padding)
    become one range; ranges of one prefix that follow each other share brackets:
    ``n1,n2,n5,m1`` gives ``n[1-2,5],m1``. Raises :class:`HostlistError` for an empty
    name or one containing ``[``, ``]``, ``,`` or whitespace.
    """
    names = list(hosts)
    if "" in names:
        raise HostlistError(source, ",".join(names), "empty host name")
    bad = _NOT_A_NAME.search("".join(names))
    if bad is not None:
        culprit = next(n for n in names if _NOT_A_NAME.search(n))
        raise HostlistError(source, culprit, f"host name contains {bad.group()!r}")
    out: list[str] = []
    prefix: str | None = None
    runs: list[list[int]] = []  # [lo, hi, width]
    for name in names:
        head = name.rstrip(_DIGITS)
        if len(head) == len(name) or len(name) - len(head) > 18:
            if prefix is not None:
                out.append(_render(prefix, runs))
                prefix = None
            out.append(name)
            continue
        digits = name[len(head):]
        value = int(digits)
        if head == prefix:
            run = runs[-1]
            if (value == run[1] + 1 and value - run[0] < max_range
                    and (len(digits) == run[2] or (len(digits) > run[2] and digits[0] != "0"))):
                run[1] = value
            else:
                runs.append([value, value, len(digits)])
            continue
        if prefix is not None:
            out.append(_render(prefix, runs))
        prefix = head
        runs = [[value, value, len(digits)]]
    if prefix is not None:
        out.append(_render(prefix, runs))
    return ",".join(out)


def _render(prefix: str, runs: list[list[int]]) -> str:
    pieces = []
    for lo, hi, width in runs:
        if lo == hi:
            pieces.append(f"{lo:0{width}d}")
        else:
            pieces.append(f"{lo:0{width}d}-{hi:0{width}d}")
    if len(pieces) == 1 and runs[0][0] == runs[0][1]:
        return prefix + pieces[0]
    return f"{prefix}[{','.join(pieces)}]"
