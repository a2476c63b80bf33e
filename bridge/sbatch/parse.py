"""``parse_tbatch``: the command line and the script's ``#SBATCH`` lines, as one request.

Contract: :func:`parse_tbatch` returns a frozen :class:`~bridge.sbatch.request.BatchRequest`;
options on the command line win over sbatch's input environment variables
(``SBATCH_PARTITION`` ...), which win over ``#SBATCH`` lines; within either a later option
replaces an earlier one. ``#SBATCH`` lines hold only options (no operands, no ``hetjob``)
and never command-line-only ones (``--wrap``, ``-f``, ``--help`` ...). Every user error is
a :class:`~bridge.sbatch.errors.SbatchError`; nothing else is raised for any input. Every
sbatch option tbatch refuses, on the command line and in every ``#SBATCH`` line, is
reported in one error (each on its own line with its ``file:line``, or ``command line``),
together with the first other error if there is one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from bridge.sbatch.cmdline import Where, parse_command_line, scan
from bridge.sbatch.errors import SbatchError, combined, quote
from bridge.sbatch.inputenv import environment_values
from bridge.sbatch.request import BatchOptions, BatchRequest, RefusedOptions
from bridge.sbatch.script import read_directives, wrap_script

__all__ = ["parse_tbatch"]


def _script_values(
    text: str, source: str, refusals: list[SbatchError], origins: dict[str, str]
) -> dict[str, Mapping[str, Any]]:
    """The options of the ``#SBATCH`` lines; refused sbatch options go to ``refusals``,
    any other error is raised together with those refusals."""
    try:
        return _directive_values(text, source, refusals, origins)
    except SbatchError as exc:
        raise combined([*refusals, exc]) from None


def _directive_values(
    text: str, source: str, refusals: list[SbatchError], origins: dict[str, str]
) -> dict[str, Mapping[str, Any]]:
    values: dict[str, Mapping[str, Any]] = {}
    for lineno, words in read_directives(text, source):
        where = Where(source=source, lineno=lineno, in_script=True)
        line_values, first = scan(words, where, refusals, origins)
        if first < len(words):
            word = words[first]
            if word.lower() in ("hetjob", "packjob"):
                raise where.error("heterogeneous jobs (#SBATCH hetjob) are not supported")
            raise where.error(f"invalid directive {quote(word)}: #SBATCH lines hold only options")
        values.update(line_values)
    return values


def _options(values: Mapping[str, Mapping[str, Any]]) -> BatchOptions:
    known = {f.name for f in fields(BatchOptions)}
    merged: dict[str, Any] = {}
    for dest_values in values.values():
        merged.update({k: v for k, v in dest_values.items() if k in known})
    return BatchOptions(**merged)


def parse_tbatch(
    argv: Sequence[str],
    script_text: str | None = None,
    *,
    script_source: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> BatchRequest:
    """Parse ``tbatch`` arguments and the script's ``#SBATCH`` lines.

    ``script_text`` is the script named in ``argv`` (or read from stdin when ``argv``
    names none); it must be ``None`` with ``--wrap`` (the script is generated) and with
    ``-f`` (no script). ``script_source`` names it in errors (default: the path given,
    or ``<stdin>``). ``environ`` is the submitter's environment, for sbatch's input
    variables (:mod:`~bridge.sbatch.inputenv`; ``None``: none are read; not with ``-f``).
    The command line wins over the environment, which wins over ``#SBATCH`` lines.
    """
    cmd = parse_command_line(argv)
    cli = cmd.option_values
    parsable = "parsable" in cli
    if cmd.help or cmd.version:
        return BatchRequest(
            options=BatchOptions(),
            script_path=None,
            script_text=None,
            help=cmd.help,
            version=cmd.version,
            parsable=parsable,
        )
    if cmd.trainjob_file is not None:
        if cmd.refusals:
            raise combined(list(cmd.refusals))
        if script_text is not None:
            raise SbatchError("a batch script cannot be given with -f/--file")
        return BatchRequest(
            options=_options(cli),
            script_path=None,
            script_text=None,
            trainjob_file=cmd.trainjob_file,
            parsable=parsable,
        )
    if cmd.wrap is not None:
        if script_text is not None:
            raise SbatchError("--wrap generates the batch script; no other script may be given")
        text = wrap_script(cmd.wrap)
        source = script_source or "--wrap"
    elif script_text is None:
        raise SbatchError("no batch script: give a script file, --wrap COMMAND or -f FILE")
    else:
        text = script_text
        source = script_source or cmd.script_path or "<stdin>"
    refusals = list(cmd.refusals)
    origins: dict[str, str] = {}
    env_origins: dict[str, str] = {}
    try:
        env_values = environment_values(environ or {}, refusals, env_origins)
    except SbatchError as exc:
        raise combined([*refusals, exc]) from None
    values = {**_script_values(text, source, refusals, origins), **env_values, **cli}
    origins.update(env_origins)
    origins.update({dest: "command line" for dest in cli})
    request = BatchRequest(
        options=_options(values),
        script_path=cmd.script_path,
        script_text=text,
        script_args=cmd.script_args,
        wrap=cmd.wrap,
        parsable="parsable" in values,
        origins=origins,
    )
    if refusals:  # with what the other options make: the back end's refusals join them
        raise RefusedOptions(combined(refusals), request)
    return request
