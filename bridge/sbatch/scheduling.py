"""The job's scheduling options (``hpc-bridge.io/scheduling``) from a request.

Contract: :func:`scheduling_options` returns the validated
:class:`~bridge.scheduling.SchedulingOptions` of a script request: the job name defaults
as sbatch's (:func:`default_job_name`), ``--chdir`` is taken relative to the submitter's
working directory, which is kept apart as ``submit_dir`` (the working directory when
``--chdir`` is not given, where the back end can give one); a value the model refuses is a
:class:`~bridge.sbatch.errors.SbatchError` naming the option it came from.
"""

from __future__ import annotations

import posixpath
from typing import Any

import pydantic

from bridge.option_support import FIELD_FLAGS
from bridge.sbatch.errors import PROG, SbatchError
from bridge.sbatch.request import BatchRequest
from bridge.scheduling import SchedulingOptions
from bridge.slurm_options import PASSED

__all__ = ["default_job_name", "scheduling_options"]


def default_job_name(request: BatchRequest) -> str:
    """sbatch's default job name: ``wrap``, the script's file name, or the tool's name."""
    if request.wrap is not None:
        return "wrap"
    if request.script_path and request.script_path != "-":
        base = posixpath.basename(request.script_path.rstrip("/"))
        if base:
            return base
    return PROG


def scheduling_options(request: BatchRequest, cwd: str) -> SchedulingOptions:
    """The validated scheduling options of ``request``, submitted from ``cwd``."""
    o = request.options
    chdir = posixpath.join(cwd, o.chdir) if o.chdir else None
    data: dict[str, Any] = {
        "job_name": o.job_name or default_job_name(request),
        "partition": o.partition,
        "account": o.account,
        "qos": o.qos,
        "time_limit_minutes": o.time_limit_minutes,
        "ntasks": o.ntasks,
        "ntasks_per_node": o.ntasks_per_node,
        "cpus_per_task": o.cpus_per_task,
        "gpus_per_node": o.gpus_per_node,
        "mem_per_node_mb": o.mem_mb,
        "output": o.output,
        "error": o.error,
        "chdir": chdir,
        # Only where the job runs there: a -D elsewhere makes the submitting directory
        # (which may be any path the user's shell is in) irrelevant.
        "submit_dir": None if chdir else cwd,
        "exclusive": o.exclusive,
        "switches": o.switches,
        "switches_wait_minutes": o.switches_wait_minutes,
        "export": o.export.mode if o.export else None,
        "nodelist": o.nodelist,
        "exclude": o.exclude,
        "constraint": o.constraint,
        "requeue": o.requeue,
        # A range only when it is one: "-N 2" and "-N 2-2" are exactly 2 (numNodes).
        "max_nodes": (o.nodes_max if o.nodes_max is not None and o.nodes_min is not None
                      and o.nodes_max > o.nodes_min else None),
        "array": o.array,
        "dependency": o.dependency,
        "kill_on_invalid_dep": o.kill_on_invalid_dep,
        "hold": o.hold,
        **{name: getattr(o, name) for name in PASSED},
    }
    mems = [flag for flag, v in (("--mem", o.mem_mb), ("--mem-per-cpu", o.mem_per_cpu_mb),
                                 ("--mem-per-gpu", o.mem_per_gpu_mb)) if v is not None]
    if len(mems) > 1:
        raise SbatchError("--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.")
    try:
        return SchedulingOptions.model_validate(data)
    except pydantic.ValidationError as exc:
        lines = []
        for err in exc.errors(include_url=False):
            key = str(err["loc"][0]) if err["loc"] else ""
            what = FIELD_FLAGS.get(key, key)
            if key == "submit_dir":
                what = "the current directory"
            msg = str(err["msg"]).removeprefix("Value error, ")
            lines.append(f"invalid {what}: {msg}")
        raise SbatchError("\n".join(lines)) from None
