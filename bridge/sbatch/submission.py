"""``tbatch``'s request as the daemon receives it, turned into the TrainJob there.

``tbatch`` sends what the user typed and had, not a TrainJob: building one needs the
model (pydantic), most of a command's start-up time, and the daemon's answer names the
option and ``#SBATCH`` line as the local parser did. ``POST /v1/sbatch`` carries a JSON
object:

* ``argv``: tbatch's arguments, as typed (a list);
* ``cwd``: the working directory; ``environ``: the submitting environment (an object);
* ``script``: the batch script (``null`` with ``--wrap`` and ``-f``, and when tbatch
  could not read it: then ``scriptProblem`` is ``"unreadable"`` or ``"too-large"``);
* ``file``: the text of ``-f FILE`` (``null`` otherwise).

Text that is not valid UTF-8 (an argument, a variable's value, a Latin-1 script) is
sent as ``{"base64": ...}`` of its bytes instead of a string, and decoded here as the
client's own ``surrogateescape`` strings, so the parser sees exactly what tbatch saw.

Contract: :func:`trainjob_of_submission` returns a :class:`Submission`: the TrainJob,
whether the answer is to be printed ``--parsable``, where each option came from, and,
when the only trouble was options tbatch refuses, that refusal (the TrainJob is then the
one the other options make, for the daemon to add its back end's refusals to the same
answer; it is never admitted); it reads no file and no environment of the daemon (the
parser is pure). A body of the wrong shape raises
:class:`bridge.model.ValidationError` naming the field; everything the user wrote
raises :class:`~bridge.sbatch.errors.SbatchError`, worded as tbatch prints it, with the
command line's own errors first (as before: an unknown option is reported before an
unreadable script).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.errors import BridgeError
from bridge.model import ANN_SCHEDULING, TrainJob, ValidationError
from bridge.option_support import FIELD_FLAGS
from bridge.sbatch.cmdline import parse_command_line
from bridge.sbatch.errors import PROG, SbatchError
from bridge.sbatch.options import BY_LONG
from bridge.sbatch.parse import parse_tbatch
from bridge.sbatch.request import RefusedOptions
from bridge.sbatch.script import MAX_SCRIPT_BYTES, first_surrogate
from bridge.sbatch.trainjob import to_trainjob, trainjob_from_file

__all__ = ["FIELDS", "MAX_ARG_CHARS", "MAX_PATH_CHARS", "SCRIPT_PROBLEMS", "Submission",
           "refusal_text", "trainjob_of_submission"]


@dataclass(frozen=True)
class Submission:
    """What tbatch asked for (module docstring)."""

    job: TrainJob
    parsable: bool
    test_only: bool
    #: Destination -> ``file:line``, ``command line`` or a variable's name.
    origins: Mapping[str, str] = field(default_factory=dict)
    #: The options tbatch refuses, when that was all: ``job`` is never admitted.
    refused: SbatchError | None = None

#: The fields of a submission.
FIELDS = frozenset({"argv", "cwd", "environ", "script", "scriptProblem", "file"})
#: Why tbatch sent no script although the command line names one.
SCRIPT_PROBLEMS = frozenset({"unreadable", "too-large"})
#: The longest argument or environment string (Linux's MAX_ARG_STRLEN: the kernel
#: refuses a longer one at exec, so no command line or environment holds one).
MAX_ARG_CHARS = 128 * 1024
#: The longest working directory (PATH_MAX).
MAX_PATH_CHARS = 4096


def _text(value: Any, field: str, limit: int | None = None) -> str:
    """A string, or ``{"base64": ...}`` of bytes that are not UTF-8 (kept as lone
    surrogates, as ``os.fsdecode`` keeps them); at most ``limit`` characters."""
    if isinstance(value, str):
        text = value
    elif (isinstance(value, dict) and set(value) == {"base64"}
          and isinstance(value["base64"], str)):
        try:
            raw = base64.b64decode(value["base64"], validate=True)
        except (binascii.Error, ValueError):
            raise ValidationError([(field, "base64 is not valid")]) from None
        text = raw.decode("utf-8", "surrogateescape")
    else:
        raise ValidationError([(field, 'must be a string or {"base64": string}')])
    if limit is not None and len(text) > limit:
        raise ValidationError([(field, f"longer than {limit} characters")])
    return text


def _optional_text(body: Mapping[str, Any], field: str) -> str | None:
    value = body.get(field)
    return None if value is None else _text(value, field)


def _decode(body: Mapping[str, Any]) -> tuple[list[str], str, dict[str, str]]:
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise ValidationError([(unknown[0], "unknown field")])
    argv = body.get("argv")
    if not isinstance(argv, list):
        raise ValidationError([("argv", "must be a list of the arguments")])
    environ = body.get("environ", {})
    if not isinstance(environ, dict):
        raise ValidationError([("environ", "must be an object of the variables")])
    if body.get("cwd") is None:
        raise ValidationError([("cwd", "required: the working directory")])
    cwd = _text(body["cwd"], "cwd", MAX_PATH_CHARS)
    if not cwd.startswith("/") or first_surrogate(cwd) >= 0 or "\0" in cwd:
        raise ValidationError([("cwd", "the working directory must be an absolute path of "
                                       "UTF-8 text (use --chdir to name another)")])
    return (
        [_text(word, f"argv[{i}]", MAX_ARG_CHARS) for i, word in enumerate(argv)],
        cwd,
        {name: _text(value, f"environ.{name}", MAX_ARG_CHARS)
         for name, value in environ.items()},
    )


def trainjob_of_submission(body: Mapping[str, Any]) -> Submission:
    """What ``tbatch`` asked for in ``body`` (see the module)."""
    argv, cwd, environ = _decode(body)
    script = _optional_text(body, "script")
    trainjob_text = _optional_text(body, "file")
    problem = body.get("scriptProblem")
    if problem is not None and (not isinstance(problem, str) or problem not in SCRIPT_PROBLEMS):
        raise ValidationError([("scriptProblem", f"one of {', '.join(sorted(SCRIPT_PROBLEMS))}")])
    cmd = parse_command_line(argv)  # the command line's own errors first
    if problem == "unreadable":
        raise SbatchError(f"Unable to open file {cmd.trainjob_file or cmd.script_path or '-'}")
    if problem == "too-large":
        raise SbatchError(f"Batch script is too large (more than {MAX_SCRIPT_BYTES} bytes)")
    if cmd.trainjob_file is not None:
        request = parse_tbatch(argv)
        if trainjob_text is None:
            raise ValidationError([("file", "required with -f/--file: the file's text")])
        return Submission(trainjob_from_file(request, trainjob_text, cwd=cwd,
                                             environ=environ),
                          request.parsable, request.options.test_only)
    refused: SbatchError | None = None
    try:
        request = parse_tbatch(argv, script, environ=environ)
    except RefusedOptions as exc:
        refused, request = exc, exc.partial
    try:
        job = to_trainjob(request, cwd=cwd, environ=environ)
    except SbatchError:
        if refused is None:
            raise
        raise refused from None  # the other options do not make a job: those refusals
    return Submission(job, request.parsable, request.options.test_only, request.origins,
                      refused)


_SCHEDULING_FIELD = f"metadata.annotations[{ANN_SCHEDULING}]"


def _origin(origins: Mapping[str, str], loc: str, message: str) -> str | None:
    """Where the option a refusal is about was given, if known: the option its field
    names (``...scheduling].partition``), or that its message starts with (``--flag``
    or ``--flag=...``, on the scheduling annotation)."""
    if loc.startswith(f"{_SCHEDULING_FIELD}."):
        word = FIELD_FLAGS.get(loc.removeprefix(f"{_SCHEDULING_FIELD}.").split(".")[0], "")
    elif loc == _SCHEDULING_FIELD:
        word = message.split(" ", 1)[0].split("=", 1)[0]
    else:
        return None
    spec = BY_LONG.get(word[2:]) if word.startswith("--") else None
    return origins.get(spec.dest) if spec is not None else None


def refusal_text(submission: Submission, error: BridgeError | None) -> str:
    """The 400's text for a submission refused by tbatch (``submission.refused``) and/or
    at admission (``error``), one line per refusal without tbatch's prefix: tbatch's
    first, then the admission's, each option the job's back end refuses with where it
    was given (``job.sh:3: --mail-type is not supported by back end 'flux': ...``)."""
    lines = [] if submission.refused is None else [
        line.removeprefix(f"{PROG}: error: ") for line in str(submission.refused).split("\n")]
    if isinstance(error, ValidationError):
        for loc, message in error.errors:
            where = _origin(submission.origins, loc, message)
            lines.append(f"{where or loc}: {message}" if where or loc else message)
    elif error is not None:
        lines.append(str(error))
    return "\n".join(lines)
