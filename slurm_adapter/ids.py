"""Slurm job ids as the bridge stores them: ``S`` for a job, ``S_I`` for task ``I`` of
a native array ``S`` (squeue's ``%i``; scancel, scontrol and slurmrestd's
``/job/{job_id}`` take it as it is).

Contract: :func:`is_slurm_id` holds for exactly those two forms (ASCII digits, at most 10
each: Slurm's ids are 32-bit), which the commands are then given as one argument;
:func:`slurm_id_order` sorts them by job, then task.
"""

from __future__ import annotations

import re

__all__ = ["is_slurm_id", "slurm_id_order"]

_ID = re.compile(r"[0-9]{1,10}(?:_[0-9]{1,10})?")


def is_slurm_id(text: str) -> bool:
    """Whether ``text`` is ``S`` or ``S_I`` (module docstring)."""
    return _ID.fullmatch(text) is not None


def slurm_id_order(backend_id: str) -> tuple[int, int]:
    """A Slurm id as a sort key: by job, then task (a job itself before its tasks);
    anything else first."""
    if not is_slurm_id(backend_id):
        return -1, -1
    job, _, task = backend_id.partition("_")
    return int(job), int(task) if task else -1
