"""A native Slurm array: one submission for many of the bridge's array tasks, each
still the bridge's job of its own (slurm_adapter/records.py reads them back one by one).

Contract:

* :func:`native_spec` turns the job description of the array's request into the
  array's: ``--array`` the tasks' indexes (with the throttle ``%N``), the comment
  carrying :func:`bridge.arrays.array_key` ``K+F``, ``%A`` in output names the bridge's
  array id ``A`` and ``%a`` left to Slurm (by default ``slurm-A_%a.out``, as sbatch
  names a task's file). A pattern naming ``%j``/``%J`` (each task's own id) cannot name
  every task's id at once: :class:`ValueError`, before anything is submitted.
* :func:`array_prologue` is the bash a task's batch script runs first: from
  ``SLURM_ARRAY_TASK_ID`` it exports that task's own variables (its bridge id and uid,
  ``HPC_BRIDGE_JOB_ID``/``HPC_BRIDGE_JOB_UID``, and anything else it was given) and
  ``SLURM_ARRAY_JOB_ID`` as the bridge's ``A``, as a task of one job per task is told
  (bridge/arrays.py ``task_env``); an index it does not know ends the task with exit
  status 1 before the job's own lines run. Names must be shell identifiers
  (:class:`ValueError`); values go through :func:`shlex.quote`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import replace

from bridge.arrays import NativeTask
from bridge.backend import SubmitRequest
from bridge.jobid import names_own_id, pin_job_id
from slurm_adapter.script import ARRAY_OUTPUT, COMMENT_PREFIX, JobSpec

__all__ = ["NativeTask", "array_prologue", "native_spec"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def native_spec(spec: JobSpec, request: SubmitRequest, key: str, array_id: int,
                indexes: str) -> JobSpec:
    """``spec`` (of ``request``, whose ``array`` is None) as the native array of
    ``indexes`` (sbatch's ``--array`` text) keyed ``key``, the bridge's array id
    ``array_id`` (module docstring)."""
    options = request.options
    for what, pattern in (("--output", options.output), ("--error", options.error)):
        if pattern and names_own_id(pattern):
            raise ValueError(f"{what}={pattern} names each task's own job id (%j): not "
                             f"one native array")
    return replace(
        spec,
        comment=COMMENT_PREFIX + key + (f" {options.comment}" if options.comment else ""),
        output=pin_job_id(options.output or ARRAY_OUTPUT, array_id),
        error=pin_job_id(options.error, array_id) if options.error else None,
        array=indexes,
    )


def array_prologue(array_id: int, tasks: Sequence[NativeTask]) -> str:
    """The bash lines that tell each task who it is (module docstring)."""
    lines = ["# hpc-bridge native array: this task's own variables (docs/slurm.md)",
             'case "${SLURM_ARRAY_TASK_ID:-}" in']
    for task in tasks:
        words = []
        for name, value in task.env.items():
            if _NAME.fullmatch(name) is None:
                raise ValueError(f"{name!r} is not a variable name")
            words.append(f"export {name}={shlex.quote(value)}")
        lines.append(f"  {int(task.index)}) {'; '.join(words) or ':'};;")
    lines += ['  *) echo "hpc-bridge: task ${SLURM_ARRAY_TASK_ID:-?} is not one of array '
              f'{int(array_id)}\'s" >&2; exit 1;;',
              "esac",
              f"export SLURM_ARRAY_JOB_ID={int(array_id)}"]
    return "\n".join(lines) + "\n"
