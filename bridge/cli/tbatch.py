"""``tbatch``: submit a batch script, a ``--wrap`` command or a TrainJob file.

::

    tbatch [OPTIONS] [script.sh [ARGS]]
    tbatch [OPTIONS] --wrap CMD
    tbatch [OPTIONS] -f TRAINJOB.yaml

Options and ``#SBATCH`` lines are sbatch's (:mod:`bridge.sbatch`). The script comes
from stdin when none is named (or ``-``), like sbatch; a bare name not in the working
directory is looked up on ``PATH``. A script larger than
:data:`bridge.sbatch.MAX_SCRIPT_BYTES` is refused; one that is not UTF-8 (a Latin-1
comment) runs unchanged, its bytes carried as they are (:mod:`bridge.batchscript`), but its
``#SBATCH`` lines must be UTF-8. Prints ``Submitted batch job <id>`` or,
with ``--parsable``, ``<id>``; exit status 0. Errors of the script or options print
:class:`bridge.sbatch.SbatchError`'s message (already worded ``tbatch: error: ...``)
and exit 1; other errors as every command (:mod:`bridge.cli.common`).

Only this command imports the TrainJob model (pydantic) and the sbatch parser, and
only when it runs: importing this module stays light.
"""

from __future__ import annotations

import os
import sys

from bridge.cli.common import connect, run, version

__all__ = ["tbatch_main"]


def _find_script(path: str) -> str:
    """sbatch's lookup: the path as given, else (a bare name) the first match on PATH."""
    if os.path.exists(path) or "/" in path:
        return path
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(directory or ".", path)
        if os.path.isfile(candidate) and os.access(candidate, os.R_OK):
            return candidate
    return path


def _read_limited(path: str | None) -> bytes:
    from bridge.sbatch import MAX_SCRIPT_BYTES, SbatchError

    if path is None:
        if sys.stdin.isatty():
            print(
                "tbatch: reading the batch script from standard input (end with Ctrl-D)",
                file=sys.stderr,
            )
        return sys.stdin.buffer.read(MAX_SCRIPT_BYTES + 1)
    try:
        with open(path, "rb") as fh:
            return fh.read(MAX_SCRIPT_BYTES + 1)
    except OSError:
        raise SbatchError(f"Unable to open file {path}") from None


def _read_script(path: str | None) -> str:
    from bridge.sbatch import MAX_SCRIPT_BYTES, SbatchError

    data = _read_limited(None if path in (None, "-") else _find_script(str(path)))
    if len(data) > MAX_SCRIPT_BYTES:
        raise SbatchError(f"Batch script is too large (more than {MAX_SCRIPT_BYTES} bytes)")
    if not data.startswith(b"#!"):
        return data.decode("utf-8", "replace")  # check_script says what is wrong
    # Bytes that are not UTF-8 (a Latin-1 comment) are kept, as lone surrogates: the
    # script runs unchanged; only its #SBATCH lines must be text.
    return data.decode("utf-8", "surrogateescape")


def _getcwd() -> str:
    from bridge.sbatch import SbatchError

    try:
        return os.getcwd()
    except OSError as exc:
        raise SbatchError(f"getcwd failed: {exc.strerror}") from None


def _tbatch(argv: list[str]) -> int:
    from bridge.sbatch import SbatchError

    try:
        return _submit(argv)
    except SbatchError as exc:  # already worded "tbatch: error: ..."
        print(str(exc), file=sys.stderr)
        return 1


def _submit(argv: list[str]) -> int:
    from bridge.sbatch import (
        SbatchError,
        help_text,
        parse_command_line,
        parse_tbatch,
        to_trainjob,
        trainjob_from_file,
    )

    cmd = parse_command_line(argv)
    if cmd.help:
        sys.stdout.write(help_text())
        return 0
    if cmd.version:
        print(f"tbatch (hpc-bridge {version()})")
        return 0
    if cmd.trainjob_file is not None:
        request = parse_tbatch(argv)
        try:
            with open(cmd.trainjob_file, encoding="utf-8") as fh:
                text = fh.read(8 * 1024 * 1024)
        except (OSError, UnicodeDecodeError):
            raise SbatchError(f"Unable to open file {cmd.trainjob_file}") from None
        job = trainjob_from_file(request, text)
    else:
        script = None if cmd.wrap is not None else _read_script(cmd.script_path)
        request = parse_tbatch(argv, script, environ=os.environ)
        job = to_trainjob(request, cwd=_getcwd(), environ=os.environ)
    with connect() as client:
        result = client.submit(job)
    print(result.id if request.parsable else f"Submitted batch job {result.id}")
    return 0


def tbatch_main(argv: list[str] | None = None) -> int:
    """``tbatch``: submit a batch script, a ``--wrap`` command or a TrainJob file
    (``argv`` ``None``: ``sys.argv``); returns the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    return run("tbatch", lambda: _tbatch(args))
