"""A batch script as bytes: carried losslessly whatever its encoding.

Researchers' scripts are bytes: a Latin-1 comment is not UTF-8, and sbatch runs such a
script unchanged. The TrainJob travels as JSON (API, store, Kubernetes), which holds only
text, so a script that is not UTF-8 goes in the ``hpc-bridge.io/batch-script``
annotation as base64, marked by ``hpc-bridge.io/batch-script-encoding: base64``; a UTF-8
script (every job stored before) stays plain text there.

Contract: :func:`script_annotations` is the annotations for a script's bytes;
:func:`script_of` the script of a job as ``str`` in which every byte that is not UTF-8
is a lone surrogate (Python's ``surrogateescape``), so :func:`script_bytes` gives back the
exact bytes; it raises :class:`bridge.model.ValidationError` naming the annotation for a
bad encoding or base64. :func:`is_utf8` says whether such a ``str`` is plain text (what
JSON-based back ends can carry).
"""

from __future__ import annotations

import base64
import binascii

from bridge.model import ANN_BATCH_SCRIPT, ANNOTATION_PREFIX, TrainJob, ValidationError

__all__ = ["ANN_BATCH_SCRIPT_ENCODING", "is_utf8", "script_annotations", "script_bytes",
           "script_of"]

#: ``base64`` when ``hpc-bridge.io/batch-script`` holds the script's bytes in base64.
ANN_BATCH_SCRIPT_ENCODING = ANNOTATION_PREFIX + "batch-script-encoding"


def script_bytes(text: str) -> bytes:
    """The bytes of a script held as ``str`` (lone surrogates: the bytes that were not
    UTF-8)."""
    return text.encode("utf-8", "surrogateescape")


def is_utf8(text: str) -> bool:
    """Whether ``text`` is plain text (no byte that was not UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def script_annotations(text: str) -> dict[str, str]:
    """The annotations carrying the script ``text`` (as :func:`script_of` gives it)."""
    if is_utf8(text):
        return {ANN_BATCH_SCRIPT: text}
    return {ANN_BATCH_SCRIPT: base64.b64encode(script_bytes(text)).decode("ascii"),
            ANN_BATCH_SCRIPT_ENCODING: "base64"}


def script_of(job: TrainJob) -> str | None:
    """The job's batch script (``None``: it has none); see the module docstring."""
    annotations = job.metadata.annotations
    raw = annotations.get(ANN_BATCH_SCRIPT)
    encoding = annotations.get(ANN_BATCH_SCRIPT_ENCODING)
    if encoding is None or raw is None:
        return raw
    where = f"metadata.annotations[{ANN_BATCH_SCRIPT_ENCODING}]"
    if encoding != "base64":
        raise ValidationError([(where, f"unknown encoding {encoding!r}; only 'base64'")])
    try:
        data = base64.b64decode(raw.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise ValidationError([(f"metadata.annotations[{ANN_BATCH_SCRIPT}]",
                                "not base64 (as its encoding annotation says)")]) from None
    return data.decode("utf-8", "surrogateescape")
