"""What a runtime's JobSet template says beyond its trainer container (pure).

Kubeflow Trainer's runtimes may carry, besides the trainer's replicated job:

* **initializer steps**: replicated jobs labelled ``trainer.kubeflow.org/
  trainjob-ancestor-step: dataset-initializer`` or ``model-initializer`` (Trainer's
  torchtune runtimes download the dataset and the model into a volume before the
  trainer starts). A TrainJob's ``spec.initializer.dataset`` / ``.model`` configure
  them (their ``STORAGE_URI``, ``env``, ``secretRef``): that is Trainer's meaning of
  the field, and the bridge keeps it whenever the runtime has the step. A runtime
  without a dataset step leaves ``spec.initializer.dataset`` to the bridge's data
  cache (bridge/dataset.py). The steps run as containers: only a back end that runs
  pods can run them (bridge/engine_admission.py refuses the job elsewhere);
* **the trainer's resources**: the trainer container's ``resources``, which Trainer
  uses (``ExtractResourcePerNodeFromRuntime``) where the TrainJob gives no
  ``resourcesPerNode``: for the pods, for ``PET_NPROC_PER_NODE`` and for torchtune's
  recipe. The bridge does the same (:func:`trainer_resources`), and its job shape
  counts them (bridge/shape.py);
* **a torchtune job** (``spec.trainer.command: [tune, run]``): its command is
  completed here (:func:`builtin_trainer`, bridge/torchtune.py).

Contract: :func:`trainer_container` finds the trainer's container (as Trainer and the
SDK do); :func:`initializer_steps` lists the steps of a template in its order;
:func:`check_initializer` raises :class:`ValidationError` naming the field for an
initializer entry a step would have to ignore; :func:`builtin_trainer` returns the
command and the plan's extra entries, or raises ValidationError with every error
Trainer's webhook would give.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from bridge import torchtune
from bridge.model import TrainJob, ValidationError
from bridge.topology import cpu_millis

__all__ = [
    "ANCESTOR_LABEL",
    "DATASET_STEP",
    "MODEL_STEP",
    "NAMESPACED_RUNTIME",
    "NODE",
    "SSH_AUTH_MOUNT_PATH",
    "STEP_CONTAINERS",
    "TORCHTUNE",
    "TORCHTUNE_RDZV",
    "TRAINER_STEP",
    "builtin_trainer",
    "check_initializer",
    "cpu_count",
    "given_resources",
    "gpu_count",
    "initializer_steps",
    "ssh_auth_mount_path",
    "sub_mapping",
    "trainer_container",
    "trainer_resources",
]

ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_STEP = "trainer"
DATASET_STEP = "dataset-initializer"
MODEL_STEP = "model-initializer"
#: step -> the ``spec.initializer`` entry that configures it (its container is named
#: like the step).
STEP_CONTAINERS = {DATASET_STEP: "dataset", MODEL_STEP: "model"}
#: ``LaunchPlan.extra`` key: where an MPI runtime mounts the SSH keys (Trainer's
#: ``mlPolicy.mpi.sshAuthMountPath``; absent: the back end's default, ``/root/.ssh``).
SSH_AUTH_MOUNT_PATH = "ssh_auth_mount_path"
#: ``LaunchPlan.extra`` key: ``namespace/name`` of the job's runtime when it is a
#: namespaced TrainingRuntime (its template is a namespace user's word: checked as a
#: patch is, k8s_adapter/access.py).
NAMESPACED_RUNTIME = "namespaced_runtime"
#: ``LaunchPlan.extra`` key: a torchtune job (its pods get no ``PET_MASTER_*``).
TORCHTUNE = "torchtune"
#: ``LaunchPlan.extra`` key: the torchtune command gets ``--rdzv_endpoint`` (a back end
#: that knows its first node's name writes it: k8s_adapter/jobset.py).
TORCHTUNE_RDZV = "torchtune_rendezvous"
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://.+", re.DOTALL)
_MAX_URI = 2048
#: Trainer's limit on an initializer's ``env`` (``+kubebuilder:validation:MaxItems``).
_MAX_ENV = 128


#: The trainer container's name (Trainer's and the SDK's).
NODE = "node"


def sub_mapping(obj: Any, key: str) -> Mapping[str, Any]:
    """``obj[key]`` when both are mappings, else an empty mapping."""
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def trainer_container(template: Any) -> Mapping[str, Any] | None:
    """The trainer container of a runtime's JobSet template, found as Trainer and the
    Kubeflow SDK find it: the container named ``node`` in the first replicated job
    whose template is labelled ``trainer.kubeflow.org/trainjob-ancestor-step:
    trainer``. ``None`` when there is none (also for a template of another shape)."""
    jobs = sub_mapping(template, "spec").get("replicatedJobs")
    for rjob in jobs if isinstance(jobs, list) else []:
        job_template = sub_mapping(rjob, "template")
        if sub_mapping(sub_mapping(job_template, "metadata"), "labels").get(
                ANCESTOR_LABEL) != TRAINER_STEP:
            continue
        pod_spec = sub_mapping(sub_mapping(sub_mapping(job_template, "spec"), "template"), "spec")
        containers = pod_spec.get("containers")
        for container in containers if isinstance(containers, list) else []:
            if isinstance(container, Mapping) and container.get("name") == NODE:
                return container
    return None


def initializer_steps(template: Any) -> tuple[str, ...]:
    """The initializer steps of a runtime's ``spec.template``, in its order."""
    jobs = sub_mapping(template, "spec").get("replicatedJobs")
    steps: list[str] = []
    for rjob in jobs if isinstance(jobs, list) else []:
        step = sub_mapping(sub_mapping(sub_mapping(rjob, "template"), "metadata"), "labels").get(
            ANCESTOR_LABEL)
        if isinstance(step, str) and step in STEP_CONTAINERS and step not in steps:
            steps.append(step)
    return tuple(steps)


def trainer_resources(container: Mapping[str, Any] | None) -> dict[str, dict[str, Any]] | None:
    """The trainer container's ``resources`` (``requests``/``limits`` mappings), or
    ``None`` when it sets none."""
    resources = sub_mapping(container, "resources")
    out = {k: dict(v) for k in ("requests", "limits")
           if isinstance(v := resources.get(k), Mapping)}
    return out or None


def _whole(value: Any) -> int:
    """A quantity as Kubernetes' ``Quantity.Value()`` reads it (rounded up); 0 for a
    malformed one (admission refuses it elsewhere: bridge/shape.py)."""
    try:
        return -(-cpu_millis(value) // 1000)
    except (ValueError, TypeError, OverflowError):
        return 0


def given_resources(job: TrainJob, runtime: Mapping[str, Any] | None) -> dict[str, Any]:
    """``spec.trainer.resourcesPerNode`` as the user wrote it, else the runtime
    trainer's ``resources`` (``runtime``: ``LaunchPlan.resources``), as Trainer takes
    them (``ExtractResourcePerNodeFromRuntime``); empty when neither gives any."""
    trainer = job.spec.trainer
    given = trainer.resources_per_node if trainer else None
    if given is not None:
        return given.model_dump(exclude_none=True)
    return dict(runtime or {})


def gpu_count(resources: Mapping[str, Any] | None) -> int:
    """GPUs per node as Trainer counts them (``GetNumGPUPerNode``): the first resource
    whose name contains ``gpu`` in ``requests``, else in ``limits``; 0 for none."""
    def count(values: Any) -> int:
        for name, value in (values or {}).items() if isinstance(values, Mapping) else ():
            if "gpu" in str(name).lower():
                return _whole(value)
        return 0
    resources = resources or {}
    return count(resources.get("requests")) or count(resources.get("limits"))


def cpu_count(resources: Mapping[str, Any] | None) -> int:
    """CPUs per node as Trainer counts them (``getNumCPUPerNode``): the requests' ``cpu``
    unless it is absent or zero, else the limits'; 0 for none."""
    resources = resources or {}
    for key in ("requests", "limits"):
        values = resources.get(key)
        if isinstance(values, Mapping) and _whole(values.get("cpu", 0)) > 0:
            return _whole(values["cpu"])
    return 0


def _step_env_names(template: Any, step: str) -> set[str]:
    """The ``env`` names the runtime's ``step`` container sets itself."""
    names: set[str] = set()
    jobs = sub_mapping(template, "spec").get("replicatedJobs")
    for rjob in jobs if isinstance(jobs, list) else []:
        job_template = sub_mapping(rjob, "template")
        if sub_mapping(sub_mapping(job_template, "metadata"), "labels").get(ANCESTOR_LABEL) != step:
            continue
        containers = sub_mapping(sub_mapping(sub_mapping(job_template, "spec"), "template"),
                              "spec").get("containers")
        for ctr in containers if isinstance(containers, list) else []:
            env = ctr.get("env") if isinstance(ctr, Mapping) else None
            for item in env if isinstance(env, list) else []:
                if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                    names.add(item["name"])
    return names


def check_initializer(job: TrainJob, steps: Sequence[str], template: Any = None) -> None:
    """Refuse (:class:`ValidationError`) a ``spec.initializer`` entry for one of
    ``steps`` (of the runtime's ``template``) that is not Trainer's shape:
    ``storageUri`` (empty, or ``scheme://…``), ``env`` (at most 128 ``name``/``value``
    items), ``secretRef`` (``name``); or an ``env`` item naming ``STORAGE_URI`` or a
    variable the step's container sets itself (the runtime's word: a user does not
    point the admin's downloader, and whatever token it holds, elsewhere). When the
    runtime has a dataset step (so bridge/dataset.py does not read the field), also
    an initializer that is not an object, an unknown entry, or ``model`` without a
    model step."""
    init = job.spec.initializer if job.spec.initializer is not None else {}
    if DATASET_STEP in steps:  # else bridge/dataset.py reads (and checks) the rest
        if not isinstance(init, Mapping):
            raise ValidationError([("spec.initializer", "must be an object")])
        unknown = sorted(set(init) - {"dataset", "model"})
        if unknown:
            raise ValidationError([(f"spec.initializer.{unknown[0]}", "unknown field")])
        if init.get("model") is not None and MODEL_STEP not in steps:
            raise ValidationError([("spec.initializer.model", "the job's runtime has no "
                                    "model initializer step")])
    if not isinstance(init, Mapping):
        return  # bridge/dataset.py refuses it
    for step in steps:
        key = STEP_CONTAINERS[step]
        entry, where = init.get(key), f"spec.initializer.{key}"
        if entry is None:
            continue
        if not isinstance(entry, Mapping):
            raise ValidationError([(where, "must be an object")])
        unknown = sorted(set(entry) - {"storageUri", "env", "secretRef"})
        if unknown:
            raise ValidationError([(f"{where}.{unknown[0]}", "unknown field")])
        uri = entry.get("storageUri")
        if uri is not None and not (isinstance(uri, str) and len(uri) <= _MAX_URI
                                    and (uri == "" or _URI.fullmatch(uri))
                                    and "\n" not in uri and "\x00" not in uri):
            raise ValidationError([(f"{where}.storageUri", "must be empty or a URI "
                                    f"(scheme://…) of at most {_MAX_URI} characters")])
        env = entry.get("env")
        if env is not None and not (isinstance(env, list) and len(env) <= _MAX_ENV and all(
                isinstance(e, Mapping) and isinstance(e.get("name"), str) and e["name"]
                and isinstance(e.get("value", ""), str) and set(e) <= {"name", "value"}
                for e in env)):
            raise ValidationError([(f"{where}.env", f"must be a list of at most {_MAX_ENV} "
                                    "{name, value} items with string values (valueFrom "
                                    "is not taken: docs/kubernetes.md)")])
        for i, item in enumerate(env or []):
            if item["name"] in {"STORAGE_URI", *_step_env_names(template, step)}:
                raise ValidationError([(f"{where}.env[{i}]", f"{item['name']!r} is set by "
                                        f"the runtime's {step} step (its storage URI is "
                                        f"{where}.storageUri)")])
        ref = entry.get("secretRef")
        if ref is not None and not (isinstance(ref, Mapping) and set(ref) == {"name"}
                                    and isinstance(ref["name"], str) and ref["name"]):
            raise ValidationError([(f"{where}.secretRef", "must be {name: <Secret>}")])


def builtin_trainer(runtime: str, job_nodes: int | None, num_nodes: int, procs: int | None,
                    resources: Mapping[str, Any] | None, args: Sequence[str],
                    runtime_command: Sequence[str]) -> tuple[tuple[str, ...], dict[str, Any]]:
    """A torchtune job's command (bridge/torchtune.py) and the plan's extra entries.
    ``job_nodes``: ``spec.trainer.numNodes`` (what Trainer's webhook checks, default 1);
    ``num_nodes``: the job's nodes; ``procs``: ``numProcPerNode`` (``None``: ``auto``);
    ``resources``: the job's ``resourcesPerNode`` else the runtime trainer's. As in
    Trainer, ``auto`` on no GPU is the CPU count (at least 1) before the recipe is
    chosen, but not for the webhook's checks."""
    gpus = gpu_count(resources)
    errors = torchtune.check(runtime, job_nodes or 1, procs, gpus, args)
    if errors:
        raise ValidationError(errors)
    resolved = procs if procs is not None or gpus > 0 else max(1, cpu_count(resources))
    command = torchtune.command(runtime, num_nodes, resolved, gpus, args, runtime_command)
    return command, {TORCHTUNE: True,
                     TORCHTUNE_RDZV: torchtune.needs_rendezvous(num_nodes, resolved, gpus)}


def ssh_auth_mount_path(mpi_policy: Mapping[str, Any], where: str) -> dict[str, str]:
    """The plan's extra entry for an MPI runtime's ``sshAuthMountPath`` (none when it
    sets none); raises :class:`ValidationError` naming ``where`` for a path that is not
    absolute and clean (no ``..``, NUL or newline)."""
    path = mpi_policy.get("sshAuthMountPath")
    if path is None:
        return {}
    if not (isinstance(path, str) and path.startswith("/") and path.strip("/")
            and len(path) <= 4096
            and not any(c in path for c in "\x00\n") and ".." not in path.split("/")):
        raise ValidationError([(where, f"must be an absolute path below /, not {path!r}")])
    return {SSH_AUTH_MOUNT_PATH: path}
