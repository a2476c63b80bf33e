"""The batch script: sbatch's checks on it, its ``#SBATCH`` lines, and ``--wrap``.

Contract: :func:`check_script` refuses what sbatch refuses (empty, blank, no ``#!`` first
line, NUL bytes, DOS line breaks) and what the bridge cannot carry (over
:data:`MAX_SCRIPT_BYTES`; bytes that are not UTF-8 are kept, as lone surrogates, except
in ``#SBATCH`` lines); :func:`read_directives` returns the ``#SBATCH`` lines of the
leading comment block as ``[(lineno, argv)]``, split as sbatch splits them (quotes,
backslashes and ``#`` comments; nothing is expanded); :func:`wrap_script` is the script
``--wrap`` generates. Errors are :class:`~bridge.sbatch.errors.SbatchError`.
"""

from __future__ import annotations

from bridge.sbatch.errors import SbatchError
from bridge.sbatch.locate import MAX_SCRIPT_BYTES

__all__ = [
    "MAX_SCRIPT_BYTES",
    "WRAP_HEADER",
    "check_script",
    "first_surrogate",
    "read_directives",
    "wrap_script",
]

#: What precedes the command of ``--wrap`` (sbatch's text, naming this tool).
WRAP_HEADER = "#!/bin/sh\n# This script was created by tbatch --wrap.\n\n"

_C_SPACE = " \t\n\v\f\r"  # C isspace() in the "C" locale, as sbatch uses


def wrap_script(command: str) -> str:
    """The script ``--wrap COMMAND`` runs: sbatch's ``#!/bin/sh`` wrapper around it."""
    return f"{WRAP_HEADER}{command}\n"


def check_script(text: str) -> None:
    """Refuse what sbatch refuses: empty, blank, no ``#!``, NUL bytes, DOS line breaks.

    Also refuses scripts over :data:`MAX_SCRIPT_BYTES`. Bytes that are not UTF-8 (lone
    surrogates, as ``surrogateescape`` decodes them) are accepted: the script runs
    unchanged; :func:`read_directives` refuses them only in ``#SBATCH`` lines.
    """
    try:
        size = len(text.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError as exc:  # a surrogate no bytes decode to
        line = text.count("\n", 0, exc.start) + 1
        raise SbatchError(f"Batch script has a character that is not text (line {line})"
                          ) from None
    if size > MAX_SCRIPT_BYTES:
        raise SbatchError(f"Batch script is too large ({size} bytes; at most {MAX_SCRIPT_BYTES})")
    if text == "":
        raise SbatchError("Batch script is empty!")
    if text.strip(_C_SPACE) == "":
        raise SbatchError("Batch script contains only whitespace!")
    if not text.startswith("#!"):
        raise SbatchError(
            "This does not look like a batch script.  The first\n"
            "line must start with #! followed by the path to an interpreter.\n"
            "For instance: #!/bin/sh"
        )
    if "\x00" in text:
        raise SbatchError(
            "hpc-bridge does not allow scripts that\ncontain a NULL character '\\0' "
            f"(line {_line_of(text, text.index(chr(0)))})."
        )
    if "\r\n" in text:
        raise SbatchError(
            "Batch script contains DOS line breaks (\\r\\n)\n"
            "instead of expected UNIX line breaks (\\n)."
        )


def first_surrogate(text: str) -> int:
    """The index of the first character UTF-8 cannot encode (a lone surrogate), or -1."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return -1


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _directive_words(rest: str, source: str, lineno: int) -> list[str]:
    """Split what follows ``#SBATCH`` the way sbatch's ``_get_argument`` does.

    Words are separated by whitespace; ``'...'`` and ``"..."`` group (quotes removed);
    a backslash takes the next character literally, inside quotes too, but (as in
    sbatch) cannot join words: ``a\\ b`` is two words. An unquoted, unescaped ``#``
    ends the line (a comment). ``""`` is an empty word (sbatch would stop reading the
    line there).
    """
    words: list[str] = []
    i, n = 0, len(rest)
    while i < n:
        while i < n and rest[i] in _C_SPACE:
            i += 1
        if i >= n:
            break
        chars: list[str] = []
        quote = ""
        escaped = grouped = comment = False
        while i < n and (quote or rest[i] not in _C_SPACE):
            ch = rest[i]
            i += 1
            if escaped:
                escaped = False
                chars.append(ch)
            elif ch == "\\":
                escaped = True
            elif quote:
                if ch == quote:
                    quote = ""
                else:
                    chars.append(ch)
            elif ch in "'\"":
                quote, grouped = ch, True
            elif ch == "#":
                comment = True
                break
            else:
                chars.append(ch)
        if quote:
            raise SbatchError(f"unmatched {quote} in #SBATCH line", source=source, lineno=lineno)
        if chars or grouped:
            words.append("".join(chars))
        if comment:
            break
    return words


def read_directives(text: str, source: str = "<stdin>") -> list[tuple[int, list[str]]]:
    """The ``#SBATCH`` lines of a batch script, as ``[(lineno, argv)]``.

    The script is first checked with :func:`check_script`. Like sbatch, directives are
    lines starting with exactly ``#SBATCH`` (column 1, that case), read until the first
    line that is neither blank nor a comment; later ``#SBATCH`` lines are ignored.
    Lines with no words are left out.
    """
    check_script(text)
    found: list[tuple[int, list[str]]] = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if line.startswith("#SBATCH"):
            if first_surrogate(line) >= 0:
                raise SbatchError("#SBATCH line is not UTF-8 text", source=source, lineno=lineno)
            words = _directive_words(line[len("#SBATCH") :], source, lineno)
            if words:
                found.append((lineno, words))
            continue
        stripped = line.lstrip(_C_SPACE)
        if stripped and not stripped.startswith("#"):
            break
    return found
