"""Option values: the converters from an option's text to :class:`BatchOptions` fields.

Contract: a converter takes the option's argument (``None`` when an optional argument was
not given) and returns the fields it sets, as ``{field: value}``; a value it cannot accept
raises :class:`~bridge.sbatch.errors.BadValue` saying what is wrong (the scanner adds the
option and where it was found). Numbers, node ranges, memory sizes (megabytes, K rounded
up, as Slurm), times (Slurm's forms, via :mod:`bridge.slurmtime`), ``--switches`` and
``--export`` are read as sbatch reads them; strings are data, never interpreted.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from bridge.arrays import parse as parse_array
from bridge.dependency import MAX_TEXT as MAX_DEPENDENCY_TEXT
from bridge.dependency import parse as parse_dependency
from bridge.sbatch.errors import BadValue, quote
from bridge.sbatch.request import ExportSpec
from bridge.slurm_options import PASSED
from bridge.slurmtime import SlurmTimeError, parse_minutes, parse_seconds

__all__ = [
    "ENV_NAME",
    "Converter",
    "Fields",
    "exclusive",
    "export",
    "flag",
    "gpus",
    "mem",
    "nodes",
    "object_name",
    "passed",
    "positive",
    "requeue",
    "string",
    "switches",
    "text",
    "time",
]

#: Names a job's environment variable may have (the rule of ``bridge.model.EnvVar``).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")

_MAX_COUNT = 2**31 - 1
#: The most nodes a TrainJob may ask for (``numNodes`` in bridge/model.py and the CRD):
#: refused here, where the error can name the ``#SBATCH`` line.
_MAX_NODES = 100_000
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DIGITS = re.compile(r"[0-9]+")
_OBJECT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]{0,252}")


Fields = dict[str, Any]
Converter = Callable[[str | None], Fields]


def _digits(word: str, error: str) -> int:
    """``word`` as a number: decimal digits only, at most 10 of them significant."""
    if not _DIGITS.fullmatch(word) or len(word.lstrip("0")) > 10:
        raise BadValue(error)
    return int(word.lstrip("0") or "0")  # int() refuses over 4300 digits, zeros too


def _int(word: str, *, minimum: int) -> int:
    number = _digits(word, f"must be an integer >= {minimum}")
    if number < minimum:
        raise BadValue(f"must be >= {minimum}")
    if number > _MAX_COUNT:
        raise BadValue(f"must be <= {_MAX_COUNT}")
    return number


def positive(dest: str) -> Converter:
    """An integer >= 1 (at most 2**31 - 1), into ``dest``."""

    def convert(value: str | None) -> Fields:
        assert value is not None
        return {dest: _int(value, minimum=1)}

    return convert


def text(dest: str, limit: int = 256) -> Converter:
    """A non-empty string of at most ``limit`` characters, no control characters."""

    def convert(value: str | None) -> Fields:
        assert value is not None
        if value == "":
            raise BadValue("must not be empty")
        if _CONTROL.search(value):
            raise BadValue("contains control characters (newline, tab, ...)")
        if len(value) > limit:
            raise BadValue(f"longer than {limit} characters")
        return {dest: value}

    return convert


def object_name(dest: str) -> Converter:
    """A name of letters, digits, ``.``, ``_`` and ``-`` (a runtime, a back end)."""

    def convert(value: str | None) -> Fields:
        assert value is not None
        if not _OBJECT_NAME.fullmatch(value):
            raise BadValue("must be a name of letters, digits, '.', '_' and '-'")
        return {dest: value}

    return convert


def _node_count(word: str) -> int:
    """One side of ``--nodes``: digits with an optional ``k`` (x1024) suffix, as Slurm."""
    factor = 1
    if word[-1:] in ("k", "K"):
        factor, word = 1024, word[:-1]
    number = _digits(word, "expected N or MIN-MAX (node counts)") * factor
    if number > _MAX_NODES:
        raise BadValue(f"node count must be <= {_MAX_NODES}")
    return number


def nodes(value: str | None) -> Fields:
    """``N`` (exactly N), ``MIN-MAX`` or ``MIN-`` (no maximum); ``0-4`` is ``1-4`` (Slurm)."""
    assert value is not None
    low, dash, high = value.partition("-")
    minimum = _node_count(low)
    if not dash:
        if minimum == 0:
            raise BadValue("the node count must be at least 1")
        return {"nodes_min": minimum, "nodes_max": minimum}
    minimum = max(minimum, 1)
    maximum = _node_count(high) if high else None
    if maximum is not None and maximum < minimum:
        raise BadValue(f"the maximum {maximum} is less than the minimum {minimum}")
    return {"nodes_min": minimum, "nodes_max": maximum}


_GPUS = re.compile(r"(?:([A-Za-z0-9][A-Za-z0-9._\-]*):)?([0-9]+)")


def gpus(value: str | None) -> Fields:
    """``N`` or ``TYPE:N``."""
    assert value is not None
    match = _GPUS.fullmatch(value)
    if match is None:
        raise BadValue("expected N or TYPE:N (one GPU type)")
    return {"gpus_per_node": _int(match.group(2), minimum=0), "gpu_type": match.group(1)}


_MEM = re.compile(r"([0-9]+)(?:([KkMmGgTt])[Bb]?)?")
_MEM_FACTOR = {"k": 1, "m": 1, "g": 1024, "t": 1024 * 1024}


def mem(value: str | None) -> Fields:
    """Megabytes, with an optional K/M/G/T suffix (and a trailing B), K rounded up (Slurm)."""
    assert value is not None
    match = _MEM.fullmatch(value)
    if match is None or len(match.group(1).lstrip("0")) > 12:
        raise BadValue("expected a size in megabytes, optionally with a K, M, G or T suffix")
    number, unit = int(match.group(1)), (match.group(2) or "m").lower()
    megabytes = (number + 1023) // 1024 if unit == "k" else number * _MEM_FACTOR[unit]
    if megabytes == 0:
        raise BadValue("--mem=0 (all of each node's memory) is not supported; give a size")
    if megabytes > 2**53:
        raise BadValue("too large")
    return {"mem_mb": megabytes}


_TIME_FORMS = (
    "minutes, minutes:seconds, hours:minutes:seconds, days-hours, "
    "days-hours:minutes, days-hours:minutes:seconds or UNLIMITED"
)


def time(value: str | None) -> Fields:
    """A Slurm time limit, in minutes (``UNLIMITED`` and its synonyms: no limit)."""
    assert value is not None
    try:
        minutes = parse_minutes(value)
    except SlurmTimeError as exc:
        raise BadValue(f"{exc}; expected {_TIME_FORMS}") from None
    return {"time_limit_minutes": minutes, "time_unlimited": minutes is None}


def switches(value: str | None) -> Fields:
    """``COUNT[@MAX-WAIT]``; the wait is a Slurm time, kept in minutes (rounded up)."""
    assert value is not None
    count_text, at, wait_text = value.partition("@")
    count = _int(count_text, minimum=1)
    wait: int | None = None
    if at:
        try:
            seconds = parse_seconds(wait_text)
        except SlurmTimeError as exc:
            raise BadValue(f"bad maximum wait: {exc}") from None
        wait = None if seconds is None else (seconds + 59) // 60
    return {"switches": count, "switches_wait_minutes": wait}


def _unquote(word: str) -> str:
    if len(word) >= 2 and word[0] in "'\"" and word[-1] == word[0]:
        return word[1:-1]
    return word


def _split_export(value: str) -> list[str]:
    """Split on commas outside quotes, as sbatch does, then unquote.

    sbatch strips quotes only around a whole item (``'VAR=a,b'``); here quotes around
    the value alone (``VAR='a,b'``) are stripped too, which is what such a value means.
    """
    items: list[str] = []
    start, open_quote = 0, ""
    for i, ch in enumerate(value + ","):
        if open_quote:
            if ch == open_quote:
                open_quote = ""
        elif ch in "'\"":
            open_quote = ch
        elif ch == ",":
            item = _unquote(value[start:i])
            name, eq, val = item.partition("=")
            items.append(f"{name}={_unquote(val)}" if eq else item)
            start = i + 1
    if open_quote:
        raise BadValue(f"unmatched {open_quote}")
    return items


def export(value: str | None) -> Fields:
    """``ALL`` | ``NONE`` | ``[ALL,]VAR[=value],...``."""
    assert value is not None
    items = _split_export(value)
    if len(items) == 1 and items[0].upper() in ("ALL", "NONE"):
        return {"export": ExportSpec(all=items[0].upper() == "ALL")}
    export_all = False
    named: list[tuple[str, str | None]] = []
    for item in items:
        if item.upper() == "ALL":
            export_all = True
            continue
        if item.upper() == "NONE":
            raise BadValue(
                "NONE cannot be combined with variables "
                "(--export=VAR,... exports only the variables named)"
            )
        name, eq, val = item.partition("=")
        if not ENV_NAME.fullmatch(name):
            raise BadValue(f"invalid environment variable name {quote(name)}")
        named.append((name, val if eq else None))
    return {"export": ExportSpec(all=export_all, items=tuple(named))}


def exclusive(value: str | None) -> Fields:
    """A plain ``--exclusive``; its ``=user``/``=mcs``/``=topo`` forms are refused."""
    if value is not None:
        raise BadValue("only a plain --exclusive is supported (not =user, =mcs or =topo)")
    return {"exclusive": True}


def flag(dest: str) -> Converter:
    """An option without an argument: ``dest`` is ``True``."""

    def convert(value: str | None) -> Fields:
        return {dest: True}

    return convert


def string(dest: str) -> Converter:
    """Any string, as given (``--wrap``, ``-f``: checked where they are used)."""

    def convert(value: str | None) -> Fields:
        assert value is not None
        return {dest: value}

    return convert


def passed(dest: str) -> Converter:
    """An option passed to Slurm as it is: checked by its :data:`PASSED` rule."""

    def convert(value: str | None) -> Fields:
        assert value is not None
        try:
            return {dest: PASSED[dest].check(value)}
        except ValueError as exc:
            raise BadValue(str(exc)) from None

    return convert


def requeue(on: bool) -> Converter:
    """``--requeue`` (``True``) or ``--no-requeue`` (``False``): the later one wins."""

    def convert(value: str | None) -> Fields:
        return {"requeue": on}

    return convert


def array(value: str | None) -> Fields:
    """``--array``: sbatch's index syntax (bridge/arrays.py), in its normal form."""
    assert value is not None
    try:
        return {"array": parse_array(value).text()}
    except ValueError as exc:
        raise BadValue(str(exc)) from None


def dependency(value: str | None) -> Fields:
    """``--dependency``: sbatch's syntax (bridge/dependency.py), in its normal form."""
    assert value is not None
    if len(value) > MAX_DEPENDENCY_TEXT:
        raise BadValue(f"longer than {MAX_DEPENDENCY_TEXT} characters")
    try:
        return {"dependency": parse_dependency(value).text()}
    except ValueError as exc:
        raise BadValue(str(exc)) from None


def yes_no(dest: str) -> Converter:
    """``yes`` or ``no`` (sbatch's ``--kill-on-invalid-dep``)."""

    def convert(value: str | None) -> Fields:
        if value not in ("yes", "no"):
            raise BadValue("must be yes or no")
        return {dest: value == "yes"}

    return convert
