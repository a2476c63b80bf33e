"""What ``tbatch`` sends: the ``POST /v1/sbatch`` body for its command line.

tbatch does not parse its options: it finds the script (or ``-f`` file) to read with
:func:`bridge.sbatch.locate.locate` and sends its arguments, the script, the working
directory and the environment (the fields of :mod:`bridge.sbatch.submission`); the
daemon parses them as sbatch would. Shared by :mod:`bridge.cli.tbatch` and the quick
path of :mod:`bridge.cli.quick`, so it imports the standard library's C modules and
:mod:`bridge.sbatch.locate` only.

Contract of :func:`sbatch_request`: the body (strings as UTF-8, or ``{"base64": ...}``
of their bytes when they are not UTF-8; a script larger than
:data:`bridge.sbatch.locate.MAX_SCRIPT_BYTES`, or unreadable -- stdin included, so that
a read that failed half-way is never followed by another -- is reported to the daemon
as ``scriptProblem`` so that its answer words the error); it raises nothing. The script
comes from stdin when none is named (or ``-``), like sbatch; a bare name not in the
working directory is looked up on ``PATH``.
"""

from __future__ import annotations

import binascii
import os
import sys

from bridge.sbatch.locate import MAX_SCRIPT_BYTES

TYPE_CHECKING = False  # typing costs ~2 ms of tbatch's start (bridge.client_types)
if TYPE_CHECKING:
    from typing import Any

    from bridge.sbatch.locate import Located

__all__ = ["MAX_FILE_BYTES", "error_status", "sbatch_request", "submitting_environment"]

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
        try:
            if sys.stdin.isatty():
                print(
                    "tbatch: reading the batch script from standard input (end with Ctrl-D)",
                    file=sys.stderr,
                )
            return sys.stdin.buffer.read(limit + 1)
        except (OSError, ValueError, AttributeError):  # a read error; stdin closed or None
            return None
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


def submitting_environment() -> dict[str, str]:
    """The environment sent: tbatch's own, with ``SLURM_UMASK`` set to its umask when
    unset, as sbatch sets it (Slurm creates the job's output files under it, so a user
    with ``umask 077`` gets private ones, as with sbatch)."""
    environ = dict(os.environ)
    if "SLURM_UMASK" not in environ:
        mask = os.umask(0o022)
        os.umask(mask)
        environ["SLURM_UMASK"] = f"0{mask:03o}"
    return environ


def error_status(status: int) -> int:
    """tbatch's exit ``status``, with sbatch's ``SLURM_EXIT_ERROR``: an error's (1) is
    that number when it is one from 1 to 255 (sbatch ignores 0)."""
    if status != 1:
        return status
    try:
        code = int(os.environ.get("SLURM_EXIT_ERROR", ""))
    except ValueError:
        return status
    return code if 0 < code < 256 else status


def sbatch_request(argv: list[str], found: Located, cwd: str) -> dict[str, Any]:
    """The ``POST /v1/sbatch`` body for ``argv`` (``found``: :func:`locate` of it, not
    ``--help``/``--version``) run in ``cwd``; reads the script or ``-f`` file it names."""
    request: dict[str, Any] = {
        "argv": [_wire(word) for word in argv],
        "cwd": _wire(cwd),
        "environ": {name: _wire(value) for name, value in submitting_environment().items()},
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
