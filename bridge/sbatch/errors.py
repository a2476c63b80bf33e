"""How tbatch reports a user error: :class:`SbatchError`, worded like sbatch's.

Contract: every user error of the parser is a :class:`SbatchError` whose ``str()`` is what
tbatch prints (``tbatch: error: job.sh:3: unrecognized option '--foo'``). Value converters
raise :class:`BadValue` instead; the option scanner turns it into a :class:`SbatchError`
that names the option, the value and where it was found. :func:`quote` shows a
user-supplied value in a message without letting control characters reach the terminal.
"""

from __future__ import annotations

from bridge.errors import BridgeError

__all__ = ["PROG", "BadValue", "SbatchError", "combined", "quote"]

#: The tool's name, as messages and ``--help`` give it.
PROG = "tbatch"


class SbatchError(BridgeError):
    """A user error, worded like sbatch's.

    ``message`` is the bare text, ``source``/``lineno`` say where in a script it was
    found; ``str(err)`` is what tbatch prints: one ``tbatch: error: `` line per line of
    the message, the first carrying ``source:lineno: `` when known.
    """

    def __init__(
        self, message: str, *, source: str | None = None, lineno: int | None = None
    ) -> None:
        self.message = message
        self.source = source
        self.lineno = lineno
        where = f"{source}:{lineno}: " if source is not None and lineno is not None else ""
        lines = message.split("\n")
        text = "\n".join(
            f"{PROG}: error: {where if i == 0 else ''}{line}" for i, line in enumerate(lines)
        )
        super().__init__(text)


def combined(errors: list[SbatchError]) -> SbatchError:
    """One error for several: each keeps its own line(s) and location.

    A single error is returned as it is; with several, one that has no script location
    (it came from the command line) reads ``command line: ...``. ``message`` of the
    result is the whole text without the ``tbatch: error: `` prefixes.
    """
    if len(errors) == 1:
        return errors[0]
    located = [
        e if e.source is not None else SbatchError("command line: " + e.message)
        for e in errors
    ]
    err = SbatchError("\n".join(e.message for e in located))
    err.args = ("\n".join(str(e) for e in located),)
    err.message = "\n".join(str(e).removeprefix(f"{PROG}: error: ") for e in located)
    return err


class BadValue(BridgeError, ValueError):
    """Raised by converters; the parser adds the option name, value and location."""


#: The most of a value an error message repeats (a megabyte option value must not
#: become a megabyte answer).
QUOTE_LIMIT = 200


def quote(value: str) -> str:
    """Quote a value for an error message, escaping what the terminal should not see;
    a value longer than :data:`QUOTE_LIMIT` characters is cut, with ``...`` after it."""
    shown = value[:QUOTE_LIMIT]
    text = f"'{shown}'" if shown.isprintable() else repr(shown)
    return text + ("..." if len(value) > QUOTE_LIMIT else "")
