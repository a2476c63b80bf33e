"""One job id for the user: the bridge's, in output file names and in the job's environment.

A job has two ids: the bridge's (what ``tbatch`` prints and ``tqueue``, ``tshow``,
``tcancel`` and ``tlog`` take) and the back end's (Slurm's job id, Flux's, a JobSet's
name). Only the first is the user's. So that a file name or a variable inside the job
never shows the other one, every back end, before it submits:

* :func:`pin_job_id` writes the bridge's id into an sbatch ``--output``/``--error``
  pattern in place of ``%j``, ``%J`` and ``%A`` (with sbatch's zero padding, ``%4j``),
  and, for a task of an array (bridge/arrays.py: one bridge job per task), the array's
  id for ``%A`` and the task's index for ``%a``. The world then expands what is left
  (``%x %u %N %n %t %%``, and ``%a`` of a plain job) itself, exactly as sbatch would
  have. Pinning before submission is the one design that holds on every
  back end: the id is known at admission, before the world assigns its own, and the
  world needs no help to expand the rest.
* :func:`identity_env` is the job's ``HPC_BRIDGE_JOB_ID`` and ``HPC_BRIDGE_JOB_UID``
  (the TrainJob uid), and a task's ``SLURM_ARRAY_*`` (:func:`bridge.arrays.task_env`);
  set after the user's own environment, so they cannot be forged.

The world's own id stays visible beside it (``tshow`` ``BackendJobId=``, ``tqueue -O
BackendJobId``), and ``SLURM_JOB_ID`` inside a Slurm job is Slurm's, as Slurm sets it.
"""

from __future__ import annotations

from bridge.arrays import ArrayTask, task_env

__all__ = ["ID_VARIABLE", "UID_VARIABLE", "identity_env", "pin_job_id"]

#: Variables every job gets (on every back end): the bridge's id and the TrainJob uid.
ID_VARIABLE = "HPC_BRIDGE_JOB_ID"
UID_VARIABLE = "HPC_BRIDGE_JOB_UID"

#: Pattern letters sbatch expands (a width before any other letter is a quirk: below).
_WILDCARDS = frozenset("AaJjNnstuxb")
#: sbatch's widest zero padding (``%12j`` pads to 10).
_MAX_WIDTH = 10


def pin_job_id(pattern: str, job_id: int, array: ArrayTask | None = None) -> str:
    """``pattern`` with ``%j``, ``%J`` and ``%A`` replaced by ``job_id``, zero padded as
    sbatch pads (``%4j`` -> ``0042``, at most 10 digits); the result, expanded by
    Slurm, names the file the original would have named if Slurm's id were ``job_id``.
    For a task of an ``array``, ``%A`` is the array's job id and ``%a`` the task's index.

    Everything else stays for the world to expand, except where a replacement would
    change how Slurm reads what comes before it: a width before a letter Slurm does
    not know (``%12q``, which Slurm writes as ``2q``) and a width at the very end
    (``%12``, written ``2``) are written as Slurm writes them. A pattern holding a
    backslash is returned as it is: Slurm expands nothing in it.
    """
    if "\\" in pattern or "%" not in pattern:
        return pattern
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c != "%":
            out.append(c)
            i += 1
            continue
        if i + 1 >= n:  # a lone trailing "%": Slurm drops it; so may we
            break
        if pattern[i + 1] == "%":
            out.append("%%")
            i += 2
            continue
        k = i + 1
        while k < n and pattern[k].isdigit():
            k += 1
        digits = pattern[i + 1:k]
        if digits and (k >= n or pattern[k] not in _WILDCARDS):
            out.append(digits[-1])  # Slurm's quirk, written out
            i = k
            continue
        number = _number(pattern[k] if k < n else "", job_id, array)
        if number is not None:
            width = min(int(digits), _MAX_WIDTH) if digits else 0
            out.append(f"{number:0{width}d}")
        else:
            out.append(pattern[i:k + 1])
        i = k + 1
    return "".join(out)


def _number(letter: str, job_id: int, array: ArrayTask | None) -> int | None:
    """The number the bridge writes for ``%<letter>``, or None: left to the world."""
    if letter and letter in "jJ":
        return job_id
    if letter == "A":
        return array.job_id if array is not None else job_id
    if letter == "a" and array is not None:
        return array.index
    return None


def names_own_id(pattern: str) -> bool:
    """Whether an output pattern names the job's own id (``%j``, ``%J``, with or without
    a width; ``%%j`` is a literal ``%j``): one pattern cannot name each task's own id
    for every task of a native array at once."""
    i, n = 0, len(pattern)
    while i < n:
        if pattern[i] != "%":
            i += 1
            continue
        if i + 1 < n and pattern[i + 1] == "%":
            i += 2
            continue
        i += 1
        while i < n and pattern[i].isdigit():
            i += 1
        if i < n and pattern[i] in "jJ":
            return True
    return False


def identity_env(job_id: int, job_uid: str, array: ArrayTask | None = None
                 ) -> dict[str, str]:
    """The variables naming the job to itself (see the module docstring)."""
    env = {ID_VARIABLE: str(job_id), UID_VARIABLE: job_uid}
    if array is not None:
        env.update(task_env(array))
    return env
