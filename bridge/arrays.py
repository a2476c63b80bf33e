"""Job arrays (``--array``): sbatch's index syntax, and what each task is told.

The bridge runs an array as one bridge job per task, on every back end (a Slurm job, a
Flux job or a JobSet per task). The tasks are stored together, in one transaction, with
consecutive ids; the first task's id is the array's job id ``A`` (as Slurm's is),
and each task is shown as ``A_I`` (``tqueue``, ``tshow``) beside its own id. Why not a
native Slurm array: the bridge must hold the throttle (``%N``) and the dependencies of
each task across back ends (a Slurm task may wait for a Kubernetes job), and give every
task the same id space and environment whatever world runs it; one job per task is the
one shape all three worlds run the same way.

Syntax, as sbatch reads it::

    --array=0-31%4      indexes 0..31, at most 4 tasks in their back end at once
    --array=1,3,5       a list
    --array=0-15:4      0, 4, 8, 12 (a step)

Indexes are 0 .. ``max_size - 1`` (Slurm's ``MaxArraySize``, 1001 by default).

Contract: :func:`parse` returns an :class:`ArraySpec` (indexes sorted, each once) or
raises :class:`ValueError` naming what is wrong; :meth:`ArraySpec.text` is its normal
form; :func:`task_env` is the ``SLURM_ARRAY_*`` variables a task gets, as Slurm sets
them for a native array.

Task uids: the first task keeps the job's uid ``K``; task ``I`` of the others is
:func:`task_uid` ``(K, I)`` (a name-based UUID: the same every time, and no other job's).
So a world that keeps one key for a whole array, a native Slurm array carrying
:func:`array_key` ``(K, F)`` (``F`` the first index) in its comment, names each task's
uid from the key and the task's index alone (:func:`uid_in_array`), with no store to ask.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from bridge.ranges import compress

__all__ = ["ANN_NATIVE", "MAX_ARRAY_BYTES", "MAX_ARRAY_SIZE", "MAX_TEXT", "THROTTLED", "ArraySpec",
           "ArrayTask", "NativeTask", "array_key", "expand_listed", "parse", "parse_array_key",
           "task_env", "task_uid", "uid_in_array"]

#: The annotation that marks a stored task of an array submitted as one native Slurm
#: array (bridge/engine_native_array.py), its value the array's :func:`array_key`: the
#: bridge's own (admission drops a client's), kept in the document so that every
#: rewrite of the document (a hold, a release) keeps it in the summary too.
ANN_NATIVE = "hpc-bridge.io/native-array"
#: The reason (squeue's) of a task that waits because its array's throttle is reached.
THROTTLED = "JobArrayTaskLimit"
#: Slurm's default ``MaxArraySize``: indexes are below it.
MAX_ARRAY_SIZE = 1001
#: The most one array may store: every task is a job with its own copy of the
#: document (script included), written in one transaction on the daemon's loop.
MAX_ARRAY_BYTES = 32 * 1024 * 1024
#: The longest ``--array`` text read.
MAX_TEXT = 4096

_RANGE = re.compile(r"(\d{1,9})(?:-(\d{1,9})(?::(\d{1,9}))?)?")


@dataclass(frozen=True)
class ArraySpec:
    """The indexes of an array (sorted, unique) and its throttle (None: none)."""

    indexes: tuple[int, ...]
    limit: int | None = None

    def text(self) -> str:
        """The normal form: ranges of consecutive indexes, then ``%N``."""
        return compress(self.indexes) + (f"%{self.limit}" if self.limit is not None else "")

    @property
    def step(self) -> int:
        """The step between indexes when they are evenly spaced, else 1 (and 1 for one
        index), as ``SLURM_ARRAY_TASK_STEP`` shows it."""
        gaps = {b - a for a, b in zip(self.indexes, self.indexes[1:], strict=False)}
        return gaps.pop() if len(gaps) == 1 else 1


@dataclass(frozen=True)
class NativeTask:
    """One task of a native array as its back end submits it: its index and the
    variables only it gets (its bridge id and uid, its progress-report settings)."""

    index: int
    env: Mapping[str, str]


@dataclass(frozen=True)
class ArrayTask:
    """One task of an array: the array's job id, the task's index, the array."""

    job_id: int
    index: int
    spec: ArraySpec


def parse(text: str, max_size: int = MAX_ARRAY_SIZE) -> ArraySpec:
    """``text`` read as sbatch reads ``--array``; :class:`ValueError` with what is wrong
    (an index at or over ``max_size``, a range that runs backwards, a zero step or
    throttle, anything else that is not the syntax)."""
    if len(text) > MAX_TEXT:
        raise ValueError(f"longer than {MAX_TEXT} characters")
    body, percent, limit_text = text.partition("%")
    limit: int | None = None
    if percent:
        if not limit_text.isascii() or not limit_text.isdigit() or len(limit_text) > 9:
            raise ValueError(f"invalid throttle %{limit_text!r}: a number of tasks "
                             f"(Invalid job array specification)")
        limit = int(limit_text)
        if limit < 1:
            raise ValueError("throttle %0: at least one task must be able to run "
                             "(Invalid job array specification)")
    indexes: set[int] = set()
    for part in body.split(","):
        m = _RANGE.fullmatch(part) if part.isascii() else None
        if m is None:
            raise ValueError(f"{part!r} is not an index, a range N-M or N-M:STEP "
                             f"(Invalid job array specification)")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        step = int(m.group(3)) if m.group(3) is not None else 1
        if last < first:
            raise ValueError(f"range {part!r} runs backwards (Invalid job array "
                             f"specification)")
        if step < 1:
            raise ValueError(f"step in {part!r} must be at least 1 (Invalid job array "
                             f"specification)")
        if last >= max_size:
            raise ValueError(f"index {last} is not below the maximum array size "
                             f"{max_size} (Invalid job array specification)")
        indexes.update(range(first, last + 1, step))
    return ArraySpec(tuple(sorted(indexes)), limit)


def task_env(task: ArrayTask) -> dict[str, str]:
    """The variables Slurm sets in a task of a native array, with the bridge's ids:
    ``SLURM_ARRAY_JOB_ID``, ``SLURM_ARRAY_TASK_ID``, ``..._COUNT``, ``..._MIN``,
    ``..._MAX``, ``..._STEP``."""
    ix = task.spec.indexes
    return {"SLURM_ARRAY_JOB_ID": str(task.job_id), "SLURM_ARRAY_TASK_ID": str(task.index),
            "SLURM_ARRAY_TASK_COUNT": str(len(ix)), "SLURM_ARRAY_TASK_MIN": str(ix[0]),
            "SLURM_ARRAY_TASK_MAX": str(ix[-1]), "SLURM_ARRAY_TASK_STEP": str(task.spec.step)}


#: The namespace of :func:`task_uid`'s name-based UUIDs (itself a fixed uuid4).
_TASK_UIDS = uuid.UUID("5d1c7f0e-3b9a-4c51-9e2f-8a6d0b4c7e21")


def task_uid(first_uid: str, index: int) -> str:
    """The uid of task ``index`` of the array whose first task's uid is ``first_uid``
    (that task keeps ``first_uid`` itself: :func:`uid_in_array`)."""
    return str(uuid.uuid5(_TASK_UIDS, f"{first_uid}/{index}"))


def array_key(first_uid: str, first_index: int) -> str:
    """The key a whole array carries in a world that keeps one per array: ``K+F``."""
    return f"{first_uid}+{first_index}"


def parse_array_key(key: str) -> tuple[str, int] | None:
    """``(K, F)`` of an :func:`array_key`, or None when ``key`` is not one (a plain
    job's uid has no ``+``)."""
    first_uid, plus, first = key.partition("+")
    if not plus or not first_uid or not first.isascii() or not first.isdigit() \
            or len(first) > 9:
        return None
    return first_uid, int(first)


def uid_in_array(key: str, index: int) -> str | None:
    """The uid of task ``index`` of the array keyed ``key`` (:func:`array_key`), or
    None when ``key`` is not an array's."""
    parsed = parse_array_key(key)
    if parsed is None:
        return None
    first_uid, first = parsed
    return first_uid if index == first else task_uid(first_uid, index)


def expand_listed(text: str, limit: int) -> tuple[tuple[int, ...], bool] | None:
    """The indexes of a task list as Slurm lists an array's pending tasks
    (``array_task_string``, e.g. ``2-9%2``, ``1-397:3``, ``2,5,8-9``: this syntax, the
    throttle ignored) and whether the list was cut short (Slurm ends a list longer than
    ``SLURM_BITSTR_LEN`` with ``...``: only the whole items before the cut are given).
    None when the text is not such a list, or lists more than ``limit`` indexes (counted
    before any is made: a forged list cannot make millions)."""
    body = text.partition("%")[0]
    cut = body.endswith("...")
    if cut:
        body = body[:-3].rpartition(",")[0]
        if not body:
            return (), True
    indexes: list[int] = []
    for part in body.split(","):
        m = _RANGE.fullmatch(part) if part.isascii() else None
        if m is None:
            return None
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        step = int(m.group(3)) if m.group(3) is not None else 1
        if last < first or step < 1:
            return None
        if len(indexes) + (last - first) // step + 1 > limit:
            return None
        indexes.extend(range(first, last + 1, step))
    return tuple(indexes), cut
