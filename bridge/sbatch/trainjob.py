"""The TrainJob of a tbatch request: from a script (or ``--wrap``), or from a ``-f`` file.

Contract: :func:`to_trainjob` maps the options onto the TrainJob (see its docstring) and
puts the script, the back end, the GPU type and the scheduling options in annotations;
:func:`trainjob_from_file` loads a ``-f`` document and applies ``--backend``. A job the
model refuses is a :class:`~bridge.sbatch.errors.SbatchError` naming the field (and the
option it came from, where one did). ``metadata.name`` is left empty: the daemon names
the job.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from bridge.batchscript import script_annotations
from bridge.model import (
    ANN_BACKEND,
    ANNOTATION_PREFIX,
    API_VERSION,
    TrainJob,
    ValidationError,
    load_trainjob,
)
from bridge.sbatch.environment import exported_environment
from bridge.sbatch.errors import SbatchError
from bridge.sbatch.request import DEFAULT_RUNTIME, BatchRequest
from bridge.sbatch.scheduling import scheduling_options
from bridge.sbatch.script import first_surrogate
from bridge.scheduling import SchedulingOptions, scheduling_of, set_scheduling

__all__ = ["ANN_GPU_TYPE", "to_trainjob", "trainjob_from_file"]

#: Annotation carrying the GPU type of ``--gpus-per-node=TYPE:N`` (SchedulingOptions has
#: no field for it yet).
ANN_GPU_TYPE = ANNOTATION_PREFIX + "gpu-type"


_HINTS = {
    "spec.trainer.numNodes": "--nodes",
    "spec.trainer.numProcPerNode": "--ntasks-per-node",
    "spec.trainer.env": "--export",
    "spec.trainer.args": "the script's arguments",
    "spec.runtimeRef": "--runtime",
}


def _job_error(exc: ValidationError) -> SbatchError:
    lines = []
    for loc, msg in exc.errors:
        hint = next((h for prefix, h in _HINTS.items() if loc.startswith(prefix)), None)
        lines.append(f"{loc}: {msg}" + (f" (from {hint})" if hint else ""))
    return SbatchError("the job is not valid:\n" + "\n".join(lines))


def to_trainjob(request: BatchRequest, *, cwd: str, environ: Mapping[str, str]) -> TrainJob:
    """The TrainJob for a script (or ``--wrap``) request.

    ``cwd`` and ``environ`` are the submitter's (``os.getcwd()``, ``os.environ``): the
    default working directory and the environment ``--export`` picks from.

    * ``spec.runtimeRef``: ``--runtime`` or ``plain`` (a ClusterTrainingRuntime);
    * ``spec.trainer.numNodes``: the minimum of ``--nodes``; without it, ``--ntasks`` over
      ``--ntasks-per-node`` rounded up when both are given (as sbatch), else 1;
    * ``numProcPerNode``: ``--ntasks-per-node``, else ``--ntasks`` / nodes when that
      divides evenly, else unset (``ntasks`` stays in the scheduling options);
    * ``resourcesPerNode`` (requests = limits): ``cpu`` = cpus per task x tasks per node
      when either is given, ``nvidia.com/gpu`` = ``--gpus-per-node``, ``memory`` =
      ``<mem>Mi``;
    * ``activeDeadlineSeconds`` = time limit x 60; ``env`` from :func:`exported_environment`;
      ``args`` = the script's arguments;
    * ``spec.suspend`` with ``--hold`` (the scheduling options say ``hold``);
    * annotations: the script text, ``--backend``, the GPU type, and every scheduling
      option (job name defaulting like sbatch, ``submit_dir`` = ``cwd``).

    ``metadata.name`` is left empty: the daemon names the job.
    """
    if request.script_text is None:
        raise SbatchError("no batch script to run (use trainjob_from_file for -f)")
    o = request.options
    nodes = o.nodes_min or 1
    if o.nodes_min is None and o.ntasks is not None and o.ntasks_per_node:
        # As sbatch: without -N, -n N --ntasks-per-node=M asks for ceil(N/M) nodes.
        nodes = math.ceil(o.ntasks / o.ntasks_per_node)
    if o.ntasks is not None and o.ntasks < nodes:
        raise SbatchError(
            f"--ntasks={o.ntasks} is less than --nodes={nodes}: every node needs at least one task"
        )
    if o.ntasks_per_node is not None:
        procs: int | None = o.ntasks_per_node
        tasks_per_node = o.ntasks_per_node
    elif o.ntasks is not None:
        procs = o.ntasks // nodes if o.ntasks % nodes == 0 else None
        tasks_per_node = math.ceil(o.ntasks / nodes)
    else:
        procs, tasks_per_node = None, 1
    resources: dict[str, str | int] = {}
    if o.cpus_per_task is not None or o.ntasks is not None or o.ntasks_per_node is not None:
        resources["cpu"] = (o.cpus_per_task or 1) * tasks_per_node
    if o.gpus_per_node:
        resources["nvidia.com/gpu"] = o.gpus_per_node
    if o.mem_mb is not None:
        resources["memory"] = f"{o.mem_mb}Mi"
    env = exported_environment(o.export, environ)
    trainer: dict[str, Any] = {"numNodes": nodes}
    if procs is not None:
        trainer["numProcPerNode"] = procs
    if resources:
        trainer["resourcesPerNode"] = {"requests": dict(resources), "limits": dict(resources)}
    if env:
        trainer["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if request.script_args:
        trainer["args"] = list(request.script_args)
    annotations = script_annotations(request.script_text)  # base64 if not UTF-8
    if o.backend:
        annotations[ANN_BACKEND] = o.backend
    if o.gpu_type:
        annotations[ANN_GPU_TYPE] = o.gpu_type
    spec: dict[str, Any] = {
        "runtimeRef": {"name": o.runtime or DEFAULT_RUNTIME, "kind": "ClusterTrainingRuntime"},
        "trainer": trainer,
    }
    if o.time_limit_minutes is not None:
        spec["activeDeadlineSeconds"] = o.time_limit_minutes * 60
    if o.hold:
        spec["suspend"] = True
    document = {
        "apiVersion": API_VERSION,
        "kind": "TrainJob",
        "metadata": {"name": "", "annotations": annotations},
        "spec": spec,
    }
    scheduling = scheduling_options(request, cwd)
    try:
        job = load_trainjob(document, "tbatch")
    except ValidationError as exc:
        raise _job_error(exc) from None
    set_scheduling(job, scheduling)
    return job


def trainjob_from_file(request: BatchRequest, text: str, *, cwd: str | None = None,
                       environ: Mapping[str, str] | None = None) -> TrainJob:
    """The TrainJob of ``tbatch -f FILE`` (``text`` is the file), with ``--backend``
    applied, and what sbatch gives a script where the file says nothing (docs/slurm.md,
    "TrainJob files"): ``submit_dir`` = ``cwd`` (the working directory on Slurm and Flux
    when it names no ``chdir``) and ``submit_path`` = ``environ``'s ``PATH`` (the job's
    ``PATH`` there when its trainer sets none). A value the model refuses (a ``PATH``
    with a newline) is a :class:`SbatchError` naming it."""
    source = request.trainjob_file or "<input>"
    try:
        job = load_trainjob(text, source)
    except ValidationError as exc:
        lines = [
            line if line.startswith(source) else f"{source}: {line}"
            for line in str(exc).split("\n")
        ]
        raise SbatchError("\n".join(lines)) from None
    if request.options.backend:
        job.metadata.annotations[ANN_BACKEND] = request.options.backend
    try:
        options = scheduling_of(job)
    except ValueError as exc:  # the file's own annotation: named as the file's
        raise SbatchError(f"{source}: {exc}") from None
    extra: dict[str, Any] = {}
    if cwd is not None and not (options.chdir or options.submit_dir):
        extra["submit_dir"] = cwd
    path = (environ or {}).get("PATH")
    if path is not None and first_surrogate(path) >= 0:
        path = None  # not UTF-8: not a TrainJob's text (as --export=ALL leaves it out)
    names = {e.name for e in (job.spec.trainer.env or [])} if job.spec.trainer else set()
    if path and "PATH" not in names and options.submit_path is None:
        extra["submit_path"] = path
    if extra:
        try:
            options = SchedulingOptions.model_validate({**options.model_dump(), **extra})
        except ValueError as exc:
            raise SbatchError(f"the current directory or PATH cannot go with the job: {exc}"
                              ) from None
        set_scheduling(job, options)
    return job
