"""JSON for the commands' quick paths (:mod:`bridge.cli.quick`) without :mod:`json`,
whose import loads :mod:`re` (with :mod:`enum`, ~3 ms of a command's start).

It drives the C accelerator :mod:`json` itself uses, ``_json``, with the settings of
``json.dumps(value, separators=(",", ":"))`` (ASCII, so a lone surrogate is escaped,
as the full client sends it) and of ``json.loads``; where ``_json`` is missing (not
CPython) it is :mod:`json`. A unit test checks both against :mod:`json` on generated
values.

Contract: :func:`dumps` gives exactly what that ``json.dumps`` gives (``TypeError`` for
what is not JSON; a value that contains itself is not looked for); :func:`loads` what
``json.loads`` gives for UTF-8 text (what the daemon sends), or raises ``ValueError``
where it would, and for bytes that are not UTF-8 (a BOM, UTF-16 or UTF-32, which
``json.loads`` would read: the quick path then hands the answer to the full client).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~2 ms of start-up
if TYPE_CHECKING:
    from typing import Any

__all__ = ["dumps", "loads"]

_WHITESPACE = " \t\n\r"


def _not_json(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class _Reading:
    """The settings ``json.loads`` hands its scanner (read once, by ``make_scanner``)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float  # NaN, Infinity, -Infinity, as json.loads reads them
    memo: dict[str, str] = {}


try:
    from _json import encode_basestring_ascii, make_encoder, make_scanner
except ImportError:  # pragma: no cover -- not CPython
    import json

    def dumps(value: Any) -> str:
        """``value`` as compact ASCII JSON."""
        return json.dumps(value, separators=(",", ":"))

    def loads(data: bytes) -> Any:
        """The value of the JSON text ``data`` (UTF-8)."""
        return json.loads(data.decode("utf-8"))
else:
    _encode = make_encoder(None, _not_json, encode_basestring_ascii, None, ":", ",",
                           False, False, True)
    # typeshed types the context as a scanner; the C code reads only the attributes.
    _scan = make_scanner(_Reading())  # type: ignore[arg-type]

    def dumps(value: Any) -> str:
        """``value`` as compact ASCII JSON."""
        return "".join(_encode(value, 0))

    def loads(data: bytes) -> Any:
        """The value of the JSON text ``data`` (UTF-8)."""
        text = data.decode("utf-8")
        start = len(text) - len(text.lstrip(_WHITESPACE))
        try:
            value, end = _scan(text, start)
        except StopIteration:
            raise ValueError("Expecting value") from None
        if text[end:].strip(_WHITESPACE):
            raise ValueError("Extra data")
        return value
