"""The command line: a small getopt_long work-alike over :data:`~bridge.sbatch.options.OPTIONS`.

It is not argparse, because argparse cannot do what sbatch users rely on:

* options stop at the first operand (the script); everything after it, options
  included, is the script's arguments (getopt's ``+`` mode; argparse's REMAINDER is
  unreliable there);
* an option's required argument is the next word *whatever it looks like*
  (``-J -x``, ``--wrap "--help"``, ``-t -1``); argparse refuses values starting with ``-``;
* ``--exclusive`` takes an optional argument only as ``--exclusive=...``, so
  ``tbatch --exclusive job.sh`` does not swallow the script;
* errors must read like sbatch's and carry ``file:line`` for script lines, and must
  never exit the process.

Contract: :func:`scan` reads the words of the command line or of one ``#SBATCH`` line
(:class:`Where` says which) into option values by destination, raising
:class:`~bridge.sbatch.errors.SbatchError` for anything it cannot accept;
:func:`parse_command_line` is tbatch's own arguments, checked for combinations that
cannot go together (``--wrap`` with a script, ``-f`` with job options); the sbatch
options it refuses are not raised but kept in ``CommandLine.refusals``, for
:func:`~bridge.sbatch.parse.parse_tbatch` to report with the script's in one error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.sbatch.errors import BadValue, SbatchError, combined, quote
from bridge.sbatch.options import (
    BY_LONG,
    BY_SHORT,
    OPTIONS,
    OptionSpec,
    refused_long,
    refused_short,
    unknown_long,
    unknown_short,
)
from bridge.sbatch.request import CommandLine
from bridge.sbatch.script import first_surrogate

__all__ = ["MAX_REFUSALS", "Where", "parse_command_line", "scan"]

#: Refused options reported in one error; the rest are summed up in one line.
MAX_REFUSALS = 20


@dataclass(frozen=True)
class Where:
    """Where words come from, for error messages."""

    source: str | None = None
    lineno: int | None = None
    in_script: bool = False

    def error(self, message: str) -> SbatchError:
        """The error ``message``, located here."""
        return SbatchError(message, source=self.source, lineno=self.lineno)

    def label(self) -> str:
        """``file:line``, or ``command line``."""
        if self.source is not None and self.lineno is not None:
            return f"{self.source}:{self.lineno}"
        return "command line"


def _apply(
    spec: OptionSpec, raw: str | None, where: Where, out: dict[str, Mapping[str, Any]],
    origins: dict[str, str] | None,
) -> None:
    if where.in_script and spec.cli_only:
        raise where.error(f"option '--{spec.long}' is only allowed on the command line")
    if origins is not None:
        origins[spec.dest] = where.label()
    try:
        out[spec.dest] = spec.convert(raw)
    except BadValue as exc:
        shown = "" if raw is None else f" {quote(raw)}"
        raise where.error(f"invalid --{spec.long} value{shown}: {exc}") from None


def scan(
    argv: Sequence[str], where: Where, refusals: list[SbatchError] | None = None,
    origins: dict[str, str] | None = None,
) -> tuple[dict[str, Mapping[str, Any]], int]:
    """getopt_long in ``+`` mode over ``argv``.

    Returns the option values (by destination; a later option replaces an earlier one)
    and the index of the first operand (``len(argv)`` if none). An sbatch option that
    tbatch refuses (``--wait``) is appended to ``refusals`` and skipped with its
    argument, so that every one is reported at once; without ``refusals`` it is raised.
    Any other error is raised at once (what follows it cannot be read reliably).
    ``origins``, when given, gets each destination's :meth:`Where.label`.
    """
    values: dict[str, Mapping[str, Any]] = {}
    refused: list[SbatchError] = [] if refusals is None else refusals

    def refuse(message: str) -> None:
        if refusals is None:
            raise where.error(message)
        # Bounded: a word of a million refused letters (-HHHH...) must cost the
        # daemon, which parses for every user, one line per letter only up to here.
        if len(refused) < MAX_REFUSALS:
            refused.append(where.error(message))
        elif len(refused) == MAX_REFUSALS:
            refused.append(where.error(f"... more refused options follow (the first "
                                       f"{MAX_REFUSALS} are listed)"))

    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return values, i + 1
        if word.startswith("--"):
            name, eq, inline = word[2:].partition("=")
            spec = BY_LONG.get(name)
            kind = refused_long(name) if spec is None else None
            if kind is not None:
                if kind == "required" and not eq:
                    i += 1  # its argument
                refuse(unknown_long(name, word))
                i += 1
                continue
            if spec is None:
                raise where.error(unknown_long(name, word))
            raw: str | None
            if spec.arg == "none":
                if eq:
                    raise where.error(f"option '--{name}' doesn't allow an argument")
                raw = None
            elif spec.arg == "optional":
                raw = inline if eq else None
            elif eq:
                raw = inline
            elif i + 1 < len(argv):
                i += 1
                raw = argv[i]
            else:
                raise where.error(f"option '--{name}' requires an argument")
            _apply(spec, raw, where, values, origins)
            i += 1
            continue
        if word.startswith("-") and word != "-":
            j = 1
            while j < len(word):
                letter = word[j]
                spec = BY_SHORT.get(letter)
                kind = refused_short(letter) if spec is None else None
                if kind is not None:
                    refuse(unknown_short(letter))
                    if kind == "none":
                        j += 1
                        continue
                    if j + 1 >= len(word):
                        i += 1  # its argument is the next word
                    break
                if spec is None:
                    raise where.error(unknown_short(letter))
                if spec.arg == "none":
                    _apply(spec, None, where, values, origins)
                    j += 1
                    continue
                if j + 1 < len(word):
                    raw = word[j + 1 :]
                elif i + 1 < len(argv):
                    i += 1
                    raw = argv[i]
                else:
                    raise where.error(f"option requires an argument -- {quote(letter)}")
                _apply(spec, raw, where, values, origins)
                break
            i += 1
            continue
        return values, i
    return values, i


def parse_command_line(argv: Sequence[str]) -> CommandLine:
    """Parse tbatch's own arguments (not the script's ``#SBATCH`` lines)."""
    argv = list(argv)
    bad = next((word for word in argv if first_surrogate(word) >= 0), None)
    if bad is not None:
        raise SbatchError(f"argument is not valid UTF-8: {bad!r}")
    refusals: list[SbatchError] = []
    try:
        values, first = scan(argv, Where(), refusals)
    except SbatchError as exc:
        raise combined([*refusals, exc]) from None
    operands = tuple(argv[first:])
    wrap = values.get("wrap", {}).get("wrap")
    trainjob_file = values.get("file", {}).get("file")
    if wrap is not None and trainjob_file is not None:
        raise SbatchError("--wrap and -f/--file cannot be used together")
    if wrap is not None and operands:
        raise SbatchError("Script arguments are not permitted with the --wrap option.")
    if trainjob_file is not None:
        if operands:
            raise SbatchError("a batch script cannot be given with -f/--file")
        allowed = {"file", "backend", "parsable", "test_only", "help", "version"}
        extra = sorted(set(values) - allowed)
        if extra:
            spec = next(s for s in OPTIONS if s.dest == extra[0])
            raise SbatchError(
                f"option '--{spec.long}' cannot be used with -f/--file: write it into the TrainJob"
            )
    return CommandLine(
        script_path=operands[0] if operands else None,
        script_args=operands[1:],
        wrap=wrap,
        trainjob_file=trainjob_file,
        help="help" in values,
        version="version" in values,
        option_values=values,
        refusals=tuple(refusals),
    )
