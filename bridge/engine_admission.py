"""What admission checks before the engine stores a job, as functions of configuration.

:func:`prepare` is :meth:`bridge.engine.Engine.prepare`'s work: validation, the back
end (annotation, partition route, default), the options the back end refuses
(:mod:`bridge.option_support`), the back end's admission of the caller, identity,
runtime, whether a :class:`~bridge.backend.Validating` back end could submit the job,
and the stored forms. :func:`check_capacity` refuses a job asking for more
nodes than the back end has. Both read only configuration and an inventory, never the
store or the loop's state, so they are safe in a worker thread; errors are
:class:`bridge.model.ValidationError` (400) naming the field or
:class:`~bridge.errors.PermissionDenied` (403).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from typing import Any

from bridge.arrays import (
    ANN_NATIVE,
    MAX_ARRAY_BYTES,
    THROTTLED,
    ArraySpec,
    ArrayTask,
    array_key,
    task_uid,
)
from bridge.arrays import parse as parse_array
from bridge.backend import (
    AdmissionDenied,
    Admitting,
    Backend,
    BackendRejected,
    Inventory,
    Owner,
    SubmitRequest,
    Validating,
)
from bridge.begin_time import ANN_BEGIN_AT, begin_epoch
from bridge.dataset import DATA_CACHE_ATTR, DATASET_FIELD
from bridge.engine_native_array import native_mode
from bridge.engine_settings import Admission, EngineSettings
from bridge.errors import PermissionDenied
from bridge.job_summary import job_summary
from bridge.model import (
    ANN_ADOPT_ONLY,
    ANN_BACKEND,
    ANN_SCHEDULING,
    KUEUE_PATCH_MANAGER,
    TrainJob,
    ValidationError,
    ensure_identity,
    validate_trainjob,
)
from bridge.option_support import AdmitContext, check_backend_options
from bridge.placement_decision import DEFAULT_PLACEMENT_MODE
from bridge.runtimes import LaunchPlan, RuntimeCatalog
from bridge.scheduling import SchedulingOptions, scheduling_of
from bridge.shape import ranks_per_node, resolve_shape
from bridge.store_arrays import ArrayTaskRow

__all__ = ["backend_name", "check_capacity", "prepare"]


def backend_name(job: TrainJob, options: SchedulingOptions, settings: EngineSettings) -> str:
    """The back end ``job`` goes to: its annotation, else its partition's route, else
    the default (not checked: admission refuses an unknown one, naming the field)."""
    return (job.metadata.annotations.get(ANN_BACKEND)
            or settings.partition_routes.get(options.partition or "")
            or settings.default_backend)


def prepare(job: TrainJob, owner: Owner, origin: str, *, backends: Mapping[str, Backend],
            catalog: RuntimeCatalog, settings: EngineSettings,
            taken_before: bool = False) -> Admission:
    """The checks and stored forms of admitting ``job`` for ``owner`` (module docstring).

    ``taken_before`` (a TrainJob a bridge may have submitted already: bridge.service):
    what the back end refuses today does not refuse the job, which may be running under
    the rules it was admitted by; the refusal goes in :data:`ANN_ADOPT_ONLY`, so that the
    engine adopts the job if its back end has it and fails it, never submitting it, if
    not (a user who sets the door's finalizer on a new TrainJob gains nothing)."""
    validate_trainjob(job)
    job.metadata.annotations.pop(ANN_ADOPT_ONLY, None)  # the engine's word, never a client's
    job.metadata.annotations.pop(ANN_NATIVE, None)  # the same
    job.metadata.annotations.pop(ANN_BEGIN_AT, None)  # the same
    options = scheduling_of(job)
    backend = backend_name(job, options, settings)
    if backend not in backends:
        raise ValidationError([(
            f"metadata.annotations[{ANN_BACKEND}]",
            f"unknown back end {backend!r}; configured: {', '.join(sorted(backends))}",
        )])
    plan = catalog.resolve(job, origin)
    chosen = backends[backend]
    routed = frozenset(p for p, b in settings.partition_routes.items() if b == backend)
    queue_places = getattr(chosen, "queue_places", None)
    handed = getattr(chosen, "topology_handed", None)
    context = AdmitContext(routed_partitions=routed, nodes=plan.num_nodes,
                           framework=plan.framework.value,
                           queue_places=bool(queue_places and queue_places(job)),
                           topology_labels=tuple(getattr(chosen, "topology_labels", ())),
                           topology_handed=bool(handed and handed(job)),
                           tasks_per_node=ranks_per_node(plan, options) or 1)
    refusal: ValidationError | None = None
    try:
        check_backend_options(options, backend, getattr(chosen, "option_support", None),
                              context, getattr(chosen, "accepts_script_bytes", False),
                              plan.batch_script)
    except ValidationError as exc:
        refusal = exc
    # Kueue's webhook gives its entry to every TrainJob CR Kueue may queue; its pod
    # fields are Kueue's decision, meaningless (and left aside) where no pods run. Only
    # on a CR: through the API it is the caller's own patch.
    users_patches = [p for p in job.spec.runtime_patches or []
                     if not (origin == "kubernetes" and isinstance(p, dict)
                             and p.get("manager") == KUEUE_PATCH_MANAGER)]
    pod_fields = [f for f, v in (("spec.podSpecOverrides", job.spec.pod_spec_overrides),
                                 ("spec.runtimePatches", users_patches)) if v]
    if pod_fields and not getattr(chosen, "runs_pods", False) and refusal is None:
        refusal = ValidationError([(f, f"back end {backend!r} runs no pods: a pod's fields "
                                       f"have no meaning there (send the job to a Kubernetes "
                                       f"back end, or drop them)") for f in pod_fields])
    if refusal is None and not getattr(chosen, "runs_pods", False):
        refusal = image_refusal(job, plan, backend, chosen)
    if plan.initializers and not getattr(chosen, "runs_pods", False) and refusal is None:
        refusal = ValidationError([("spec.runtimeRef.name", (
            f"runtime {plan.runtime!r} has initializer steps ({', '.join(plan.initializers)}) "
            f"that run as containers before the trainer, and back end {backend!r} runs no "
            f"pods: send the job to a Kubernetes back end, or use a runtime without them"))])
    if (plan.data_cache is not None and not getattr(chosen, DATA_CACHE_ATTR, False)
            and refusal is None):
        refusal = ValidationError([(DATASET_FIELD, f"back end {backend!r} does not start a "
                                    "data cache (the Slurm, Flux and Kubernetes back ends do)")])
    if isinstance(chosen, Admitting):  # before defaults: it may fill the namespace
        try:
            chosen.check_admission(job, plan, owner, origin)
        except AdmissionDenied as exc:
            raise PermissionDenied(str(exc)) from exc
    spec = parse_array(options.array) if options.array else None
    if spec is not None and origin != "api":
        raise ValidationError([(f"metadata.annotations[{ANN_SCHEDULING}].array",
                                "a job array is submitted with tbatch or POST /v1/sbatch "
                                "(or /v1/jobs); a TrainJob object is one job")])
    ensure_identity(job, settings.default_namespace)
    shape = resolve_shape(job, plan, options)
    if refusal is None and isinstance(chosen, Validating):
        request = SubmitRequest(job_uid=job.metadata.uid or "", job_id=0, job=job,
                                plan=plan, options=options, owner=owner, shape=shape,
                                array=ArrayTask(0, spec.indexes[0], spec) if spec else None)
        try:
            chosen.validate(request)
        except BackendRejected as exc:
            refusal = ValidationError([("spec", str(exc))])
    if refusal is not None:
        if not taken_before:
            raise refusal
        job.metadata.annotations[ANN_ADOPT_ONLY] = str(refusal)[:4096]
    if options.begin and not getattr(chosen, "native_begin", False):
        # Held by the bridge until then (bridge/engine_dependency.py): a relative time
        # counts from now, as from sbatch's submission. The option table checked it.
        try:
            at = begin_epoch(options.begin, time.time())
        except ValueError as exc:  # a back end whose table does not check it
            raise ValidationError([(f"metadata.annotations[{ANN_SCHEDULING}].begin",
                                    str(exc))]) from None
        job.metadata.annotations[ANN_BEGIN_AT] = repr(at)
    native = spec is not None and native_mode(
        chosen, options, settings.placement.get(backend, DEFAULT_PLACEMENT_MODE))
    if native and spec is not None:  # in the document: every rewrite of it keeps it
        job.metadata.annotations[ANN_NATIVE] = array_key(job.metadata.uid or "",
                                                         spec.indexes[0])
    document = job.to_dict()
    text = json.dumps(document)
    if spec is not None and len(text) * len(spec.indexes) > MAX_ARRAY_BYTES:
        raise ValidationError([(
            f"metadata.annotations[{ANN_SCHEDULING}].array",
            f"{len(spec.indexes)} tasks of a {len(text) // 1024} KiB job would store "
            f"{len(text) * len(spec.indexes) // 2**20} MiB, more than the "
            f"{MAX_ARRAY_BYTES // 2**20} MiB an array may (each task keeps its own copy of "
            f"the job and its script): shorten the script or split the array")])
    return Admission(job, backend, plan.num_nodes, options.partition, text, job_summary(job),
                     shape.to_json(),
                     task_rows(document, spec, native) if spec is not None else ())


def task_rows(document: dict[str, Any], spec: ArraySpec, native: bool = False
              ) -> tuple[ArrayTaskRow, ...]:
    """The stored rows of an array's tasks: each the job's ``document`` with its own
    name (``NAME-INDEX``) and uid (the first task keeps the job's, the others'
    follow from it: :func:`bridge.arrays.task_uid`); those past the throttle (``%N``)
    wait (:data:`bridge.engine_array.THROTTLED`), unless the array is ``native``
    (bridge/engine_native_array.py: its back end throttles it)."""
    meta = document["metadata"]
    rows = []
    for k, index in enumerate(spec.indexes):
        uid = meta["uid"] if k == 0 else task_uid(meta["uid"], index)
        suffix = f"-{index}"
        name = meta["name"][:63 - len(suffix)].rstrip("-.") + suffix  # a valid name
        task = {**document, "metadata": {**meta, "uid": uid, "name": name}}
        waiting = (THROTTLED if spec.limit is not None and k >= spec.limit and not native
                   else None)
        rows.append(ArrayTaskRow(index, uid, name, json.dumps(task), waiting))
    return tuple(rows)


def check_capacity(inventory: Inventory | None, backend: str, chosen: Backend,
                   num_nodes: int, partition: str | None) -> None:
    """Refuse a job that asks for more nodes than back end ``backend`` (``chosen``) has
    at all (in the partition, if named): Slurm would queue it forever
    (``PartitionNodeLimit``). An unknown inventory (back end not reached yet), and back
    ends whose job nodes are pods sharing hosts (Kubernetes), refuse nothing."""
    if inventory is None or not inventory.nodes:
        return
    if getattr(chosen, "packs_units", False):
        return  # pods share hosts: any count may fit (the scheduler queues the rest)
    # A node that names no partition (or queue) is taken to be in every one.
    nodes = [n for n in inventory.nodes
             if partition is None or not n.partitions or partition in n.partitions]
    if partition is not None and not nodes:  # as sbatch: "invalid partition specified"
        known = sorted({p for n in inventory.nodes for p in n.partitions})
        raise ValidationError([(f"metadata.annotations[{ANN_SCHEDULING}].partition",
                                f"invalid partition specified: {partition!r} (back end "
                                f"{backend!r} has {', '.join(known) or 'none'})")])
    if num_nodes > len(nodes):
        where = f"partition {partition!r} of back end {backend!r}" if partition else (
            f"back end {backend!r}")
        raise ValidationError([("spec.trainer.numNodes",
                                f"{num_nodes} nodes requested but {where} has "
                                f"{len(nodes)}")])


def image_refusal(job: TrainJob, plan: LaunchPlan, backend: str, chosen: object
                  ) -> ValidationError | None:
    """The refusal of ``job``'s ``spec.trainer.image`` on a back end that runs no pods
    (bridge/backend.py): none without an image; with one, unless the back end has a
    ``container_command`` and the job is not a batch script (which runs on the nodes
    themselves). The runtime's own image is Kubernetes' default, not a request: only
    the job's is looked at (docs/slurm.md, "Container images")."""
    image = job.spec.trainer.image if job.spec.trainer is not None else None
    if not image:
        return None
    setting = getattr(chosen, "container_setting", None)
    if not getattr(chosen, "container_command", ()):
        how = (f"an admin sets {setting} (the container runtime's command, e.g. "
               '["apptainer", "exec", "docker://{image}"]) to run images there, or '
               if setting else "")
        return ValidationError([("spec.trainer.image", (
            f"back end {backend!r} runs no container images: {how}drop the image to run "
            "on the nodes' own software"))])
    if plan.batch_script:
        return ValidationError([("spec.trainer.image", (
            f"a batch script runs on the nodes of back end {backend!r} themselves: call "
            "the container runtime in the script, or drop the image"))])
    if not _IMAGE.fullmatch(image):  # a word of the runtime's command: never an option
        return ValidationError([("spec.trainer.image", (
            f"{image[:64]!r} is not an image reference (REGISTRY/NAME[:TAG][@DIGEST]: "
            "letters, digits and ._-/:@+, not starting with '-')"))])
    return None


#: An image reference as a container runtime reads one (OCI's characters), at most 512.
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-/:@+]{0,511}")
