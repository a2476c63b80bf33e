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

tbatch does not parse its options: it finds the script (or ``-f`` file) to read with
:func:`bridge.sbatch.locate.locate` and sends its arguments, the script, the working
directory and the environment to the daemon (``POST /v1/sbatch``), which parses them
as before and answers tbatch's own message when something is wrong. So tbatch imports
the standard library and the client only, never the model (pydantic); ``--help``
imports the option table.
"""

from __future__ import annotations

import binascii
import os
import sys

from bridge.cli.common import UserError, clean, connect, run, version
from bridge.sbatch.locate import MAX_SCRIPT_BYTES, locate

TYPE_CHECKING = False  # typing costs ~2 ms of tbatch's start (bridge.client_types)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["tbatch_main"]

#: The most of a ``-f`` file read (the daemon's request limit refuses more anyway).
MAX_FILE_BYTES = 8 * 1024 * 1024


def _find_script(path: str) -> str:
    """sbatch's lookup: the path as given, else (a bare name) the first match on PATH."""
    if os.path.exists(path) or "/" in path:
        return path
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(directory or ".", path)
        if os.path.isfile(candidate) and os.access(candidate, os.R_OK):
            return candidate
    return path


def _read(path: str | None, limit: int) -> bytes | None:
    """Up to ``limit + 1`` bytes of ``path`` (stdin for None); None if unreadable."""
    if path is None:
        if sys.stdin.isatty():
            print(
                "tbatch: reading the batch script from standard input (end with Ctrl-D)",
                file=sys.stderr,
            )
        return sys.stdin.buffer.read(limit + 1)
    try:
        with open(path, "rb") as fh:
            return fh.read(limit + 1)
    except OSError:
        return None


def _wire(text: str) -> str | dict[str, str]:
    """A string as sent: itself, or ``{"base64": ...}`` of its bytes when it holds lone
    surrogates (bytes that are not UTF-8, as :func:`os.fsdecode` keeps them)."""
    return _wire_bytes(text.encode("utf-8", "surrogateescape"), text)


def _wire_bytes(data: bytes, text: str | None = None) -> str | dict[str, str]:
    try:
        return data.decode("utf-8") if text is None or not text.isascii() else text
    except UnicodeDecodeError:
        return {"base64": binascii.b2a_base64(data, newline=False).decode("ascii")}


def _request(argv: list[str]) -> dict[str, Any] | None:
    """The ``POST /v1/sbatch`` body for ``argv``; None when it was ``--help``/``--version``
    (answered here)."""
    found = locate(argv)
    if found.help:
        from bridge.sbatch import help_text

        sys.stdout.write(help_text())
        return None
    if found.version:
        print(f"tbatch (hpc-bridge {version()})")
        return None
    try:
        cwd = os.getcwd()
    except OSError as exc:
        raise UserError(f"getcwd failed: {exc.strerror}") from None
    request: dict[str, Any] = {
        "argv": [_wire(word) for word in argv],
        "cwd": _wire(cwd),
        "environ": {name: _wire(value) for name, value in os.environ.items()},
    }
    if not found.complete or found.wrap is not None:
        return request  # nothing to read (an unknown option: the daemon names it)
    if found.trainjob_file is not None:
        data = _read(found.trainjob_file, MAX_FILE_BYTES)
        try:
            request["file"] = None if data is None else data[:MAX_FILE_BYTES].decode("utf-8")
        except UnicodeDecodeError:
            request["file"] = None
        if request["file"] is None:
            request["scriptProblem"] = "unreadable"
        return request
    path = found.script_path
    data = _read(None if path in (None, "-") else _find_script(str(path)), MAX_SCRIPT_BYTES)
    if data is None:
        request["scriptProblem"] = "unreadable"
    elif len(data) > MAX_SCRIPT_BYTES:
        request["scriptProblem"] = "too-large"
    else:
        request["script"] = _wire_bytes(data)
    return request


def _tbatch(argv: list[str]) -> int:
    request = _request(argv)
    if request is None:
        return 0
    with connect() as client:
        result = client.submit_sbatch(request)
    if result.estimate is not None:  # --test-only: as sbatch, on stderr; nothing submitted
        print(f"tbatch: {clean(result.estimate)}", file=sys.stderr)
        return 0
    print(result.id if result.parsable else f"Submitted batch job {result.id}")
    return 0


def tbatch_main(argv: list[str] | None = None) -> int:
    """``tbatch``: submit a batch script, a ``--wrap`` command or a TrainJob file
    (``argv`` ``None``: ``sys.argv``); returns the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    return run("tbatch", lambda: _tbatch(args))
