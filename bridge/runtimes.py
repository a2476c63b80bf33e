"""Training runtimes: the built-in catalog and resolution of a TrainJob into a launch plan.

A TrainJob names its runtime (``spec.runtimeRef``); the runtime's ``mlPolicy`` says
which framework launches the ranks (torch, MPI, JAX, XGBoost, or none for a plain
batch job) and gives defaults (``numNodes``, ``numProcPerNode``) that the TrainJob
may override, exactly as Kubeflow Trainer merges them.

Each runtime also carries a JobSet template shaped as Trainer's own (``spec.template``:
replicated jobs, the one labelled ``trainer.kubeflow.org/trainjob-ancestor-step:
trainer`` holding the trainer container ``node``), so the Kubeflow SDK reads the
bridge's runtimes as it reads Trainer's. The trainer container gives the job's image
and, when the TrainJob has none, its command (see :meth:`RuntimeCatalog.resolve`).

Where runtimes come from: the Kubernetes clusters the TrainJob front doors follow
(their ``ClusterTrainingRuntime`` and ``TrainingRuntime`` objects, one layer per door:
:meth:`RuntimeCatalog.set_layer`, k8s_adapter/runtime_source.py), the admin's files
(``[runtimes] paths``), the built-in catalog. A TrainJob that came through a door
(origin ``kubernetes``, the door in :data:`bridge.model.ANN_FRONTDOOR`) looks in that
door's cluster first, then the files, then the built-ins; it never sees another
cluster's runtimes. A job submitted through the daemon's API looks in the files, then
the clusters' ClusterTrainingRuntimes (doors in name order), then the built-ins: the
daemon's admin outranks whoever may write runtimes in a cluster, and a cluster's
namespaced ``TrainingRuntime`` never serves it (such a job names a namespace of its own
choosing, and must not borrow another team's runtime with it). A cluster's copy of a
built-in runtime (the chart installs them: same ``spec`` and framework label) is left
out of its layer, so the admin's file, or the built-in one, serves that name as before.

Contract: :meth:`RuntimeCatalog.resolve` returns a :class:`LaunchPlan` or raises
:class:`bridge.model.ValidationError` naming ``spec.runtimeRef.name`` (unknown
runtime, or a trainer container whose image/command has the wrong type) or the field
that makes the job impossible.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import yaml

from bridge import runtime_steps, torchtune
from bridge.batchscript import script_of
from bridge.dataset import DataCacheSpec, data_cache_of
from bridge.model import (
    ANN_FRONTDOOR,
    ClusterTrainingRuntime,
    MLPolicy,
    ObjectMeta,
    TrainingRuntime,
    TrainingRuntimeSpec,
    TrainJob,
    ValidationError,
    load_document,
)
from bridge.runtime_steps import trainer_container


class Framework(StrEnum):
    PLAIN = "plain"
    TORCH = "torch"
    MPI = "mpi"
    JAX = "jax"
    XGBOOST = "xgboost"


FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
#: Where a runtime names its MPI implementation (what an admission error names).
MPI_FIELD = "mlPolicy.mpi.mpiImplementation"


class MpiImplementation(StrEnum):
    """The MPI implementations a job may name (Kubeflow Trainer's names; ``IntelMPI`` is
    accepted for ``Intel``). :attr:`flavour` is ``mpi-launch --mpi``'s name for it."""

    OPENMPI = "OpenMPI"
    MPICH = "MPICH"
    INTEL = "Intel"

    @property
    def flavour(self) -> str:
        """``mpi-launch --mpi`` value: ``openmpi``, ``mpich`` or ``intel``."""
        return {"OpenMPI": "openmpi", "MPICH": "mpich", "Intel": "intel"}[self.value]

    @classmethod
    def parse(cls, value: object, where: str = MPI_FIELD) -> MpiImplementation:
        """``value`` as an implementation (``IntelMPI`` = ``Intel``; case as Kubeflow
        spells it). Raises :class:`ValidationError` naming ``where`` for anything else."""
        if isinstance(value, str):
            name = "Intel" if value == "IntelMPI" else value
            for member in cls:
                if member.value == name:
                    return member
        known = ", ".join([m.value for m in cls] + ["IntelMPI"])
        raise ValidationError([(where, f"unknown MPI implementation {value!r}; known: {known}")])


#: Trainer's label marking the replicated job that runs the trainer (value ``trainer``).
ANCESTOR_LABEL = runtime_steps.ANCESTOR_LABEL
TRAINER_STEP = runtime_steps.TRAINER_STEP
#: The trainer container's name, in every replicated job (Trainer's and the SDK's).
NODE = runtime_steps.NODE
LAUNCHER = "launcher"
#: Where a runtime's trainer container is (what an admission error names).
TRAINER_CONTAINER_FIELD = (
    f"spec.template.spec.replicatedJobs[{ANCESTOR_LABEL}={TRAINER_STEP}].containers[{NODE}]")

#: The image of each built-in runtime's trainer container: the one table. A TrainJob
#: without ``spec.trainer.image`` runs in it on Kubernetes (it is also what the Kubeflow
#: SDK shows as the runtime's image). Public images, the ones upstream Trainer's own
#: runtimes name, with pinned tags (Python's slim image for ``plain``, which Trainer
#: lacks; the two MPI runtimes share Trainer's DeepSpeed image, which has Open MPI and
#: sshd). Slurm and
#: Flux run on the nodes' own software and never use it. A back end's own
#: ``default_image`` (a mirror, an offline cluster) goes before these
#: (``LaunchPlan.builtin_image``); an admin's runtime of the same name replaces one.
BUILTIN_IMAGES: dict[str, str] = {
    "plain": "python:3.12-slim",
    "torch-distributed": "pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime",
    "mpi-distributed": "ghcr.io/kubeflow/trainer/deepspeed-runtime:v2.2.0",
    "deepspeed-distributed": "ghcr.io/kubeflow/trainer/deepspeed-runtime:v2.2.0",
    "jax-distributed": "nvcr.io/nvidia/jax:25.10-py3",
    "xgboost-distributed": "ghcr.io/kubeflow/trainer/xgboost-runtime:v2.2.5",
}


def _replicated_job(name: str, image: str, *, trainer: bool) -> dict[str, Any]:
    """One replicated job of a runtime template: one Job whose pods have the container
    ``node`` in ``image``; ``trainer`` marks it as the one running the trainer."""
    template: dict[str, Any] = {}
    if trainer:
        template["metadata"] = {"labels": {ANCESTOR_LABEL: TRAINER_STEP}}
    template["spec"] = {"template": {"spec": {"containers": [{"name": NODE, "image": image}]}}}
    return {"name": name, "replicas": 1, "template": template}


def _template(framework: Framework, image: str) -> dict[str, Any]:
    """The JobSet template of a built-in runtime, laid out as the bridge's JobSets are
    (k8s_adapter/jobset.py) and as Trainer's runtimes are: MPI has a ``launcher`` (the
    trainer: it runs the command) and ``node`` (the other ranks); the rest one ``node``.
    It carries no command: a TrainJob brings its own (or is refused). An MPI runtime's
    JobSet succeeds when its launcher does (the other ranks serve ``sshd`` until
    stopped), as Trainer's own MPI runtimes say: without it, Trainer's controller (or
    any reader of the runtime) would wait for ``node`` jobs that never end."""
    if framework is Framework.MPI:
        jobs = [_replicated_job(LAUNCHER, image, trainer=True),
                _replicated_job(NODE, image, trainer=False)]
        return {"spec": {"successPolicy": {"operator": "All",
                                           "targetReplicatedJobs": [LAUNCHER]},
                         "replicatedJobs": jobs}}
    jobs = [_replicated_job(NODE, image, trainer=True)]
    return {"spec": {"replicatedJobs": jobs}}


def _runtime(name: str, framework: Framework, policy: dict[str, Any],
             num_nodes: int = 1) -> ClusterTrainingRuntime:
    """A runtime ``name``; its template is there when :data:`BUILTIN_IMAGES` has an
    image for it (``template: {}`` otherwise: a runtime without trainer container)."""
    ml: dict[str, Any] = {"numNodes": num_nodes}
    if framework is not Framework.PLAIN:
        ml[framework.value] = policy
    image = BUILTIN_IMAGES.get(name)
    return ClusterTrainingRuntime(
        metadata=ObjectMeta(name=name, labels={FRAMEWORK_LABEL: framework.value}),
        spec=TrainingRuntimeSpec(ml_policy=MLPolicy.model_validate(ml),
                                 template=_template(framework, image) if image else {}),
    )


def builtin_runtimes() -> list[ClusterTrainingRuntime]:
    """The runtimes every bridge knows, named as Kubeflow Trainer names its own, each
    with a Trainer-shaped template (images: :data:`BUILTIN_IMAGES`). The one source of
    both the in-process catalogue and the chart's YAML (:func:`runtimes_yaml`)."""
    return [
        _runtime("plain", Framework.PLAIN, {}),
        _runtime("torch-distributed", Framework.TORCH, {}),
        _runtime(
            "mpi-distributed",
            Framework.MPI,
            {"numProcPerNode": 1, "mpiImplementation": "OpenMPI", "runLauncherAsNode": True},
        ),
        _runtime("deepspeed-distributed", Framework.MPI,
                 {"numProcPerNode": 1, "mpiImplementation": "OpenMPI",
                  "runLauncherAsNode": True}),
        # Trainer v2.3's torch, jax and xgboost policies carry no numProcPerNode
        # (upstream's CRD refuses it; it is the TrainJob's): torch defaults to
        # ``auto`` as Trainer's plugin does, the others to one process per node.
        _runtime("jax-distributed", Framework.JAX, {}),
        _runtime("xgboost-distributed", Framework.XGBOOST, {}),
    ]


def runtimes_yaml() -> str:
    """The built-in runtimes as one multi-document YAML of ClusterTrainingRuntimes, so
    that a cluster shows what the bridge knows (charts/hpc-bridge/files/runtimes.yaml,
    regenerated with ``hpc-bridge runtimes --yaml``)."""
    header = ("# Generated by `hpc-bridge runtimes --yaml` (bridge/runtimes.py): do not edit.\n"
              "# The bridge's built-in ClusterTrainingRuntimes, installed by the Helm chart.\n")
    docs = []
    for runtime in builtin_runtimes():
        doc = runtime.to_dict()
        if not doc["metadata"].get("annotations"):
            doc["metadata"].pop("annotations", None)
        docs.append(yaml.safe_dump(doc, sort_keys=False))
    return header + "---\n".join(docs)


@dataclass(frozen=True)
class LaunchPlan:
    """What the back end must start: the runtime merged with the TrainJob's overrides."""

    runtime: str
    framework: Framework
    num_nodes: int
    #: Processes per node; ``None`` means "let the launcher decide" (torch ``auto``).
    proc_per_node: int | None
    image: str | None
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    #: A complete batch script (``tbatch``); when set, it is what runs.
    batch_script: str | None = None
    #: The MPI implementation (MPI runtimes; ``None`` for the others).
    mpi_implementation: MpiImplementation | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: The image is a built-in runtime's (:data:`BUILTIN_IMAGES`), not one the job or
    #: an admin's runtime chose: a back end's own default image goes first.
    builtin_image: bool = False
    #: The data cache the job asks for (``spec.initializer.dataset``: bridge/dataset.py).
    data_cache: DataCacheSpec | None = None
    #: The runtime's initializer steps (bridge/runtime_steps.py): run on Kubernetes only.
    initializers: tuple[str, ...] = ()
    #: The runtime's trainer container's ``resources`` (requests/limits), which stand
    #: where the TrainJob gives no ``resourcesPerNode`` (as in Trainer).
    resources: dict[str, dict[str, Any]] | None = None


def load_runtime_files(patterns: list[str]) -> list[ClusterTrainingRuntime | TrainingRuntime]:
    """Every runtime document in the files matching ``patterns`` (YAML, several
    documents per file allowed). Raises :class:`bridge.model.ValidationError` naming
    the file for anything that is not a valid runtime, or for a pattern matching
    nothing (a typo in the configuration must not pass silently)."""
    found: list[ClusterTrainingRuntime | TrainingRuntime] = []
    for pattern in patterns:
        paths = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not paths or not all(os.path.isfile(p) for p in paths):
            raise ValidationError([("runtimes.paths", f"no runtime file matches {pattern!r}")])
        for path in paths:
            with open(path) as fh:
                text = fh.read()
            try:
                docs = [d for d in yaml.safe_load_all(text) if d is not None]
            except yaml.YAMLError as exc:
                raise ValidationError([("", f"{path}: malformed YAML: {exc}")]) from None
            for i, data in enumerate(docs):
                if not isinstance(data, dict):
                    raise ValidationError([("", f"{path}: document {i + 1} is not a mapping")])
                try:
                    doc = load_document(data, path)
                except ValidationError as exc:
                    raise ValidationError([(f"{path}: {loc}" if loc else path, msg)
                                           for loc, msg in exc.errors]) from None
                if isinstance(doc, TrainJob):
                    raise ValidationError([("kind", f"{path}: expected a runtime, got TrainJob")])
                if not doc.metadata.name:
                    raise ValidationError([(f"{path}: metadata.name", "required")])
                found.append(doc)
    return found


#: The origin of jobs that came from a cluster's TrainJob front door.
CLUSTER_ORIGIN = "kubernetes"


class RuntimeCatalog:
    """Built-in ClusterTrainingRuntimes plus those an admin adds (by name, per namespace),
    under the runtimes of the clusters the front doors follow (module docstring).

    Thread-safe for readers: :meth:`prepare <bridge.service.JobService.prepare>` may
    resolve in a worker thread while :meth:`set_layer` runs on the loop (a layer is
    replaced whole, never changed in place)."""

    def __init__(self, extra: list[ClusterTrainingRuntime | TrainingRuntime] | None = None):
        self._cluster: dict[str, ClusterTrainingRuntime] = {
            r.metadata.name: r for r in builtin_runtimes()
        }
        #: The built-in runtimes themselves (one an admin replaces is no longer one).
        self._builtin: dict[str, ClusterTrainingRuntime] = dict(self._cluster)
        self._namespaced: dict[tuple[str, str], TrainingRuntime] = {}
        #: source (a front door) -> its cluster's runtimes, by name / (namespace, name).
        self._layers: dict[str, tuple[dict[str, ClusterTrainingRuntime],
                                      dict[tuple[str, str], TrainingRuntime]]] = {}
        for r in extra or []:
            self.add(r)

    def set_layer(self, source: str,
                  runtimes: list[ClusterTrainingRuntime | TrainingRuntime]) -> None:
        """Make ``runtimes`` all that the cluster of front door ``source`` has (an empty
        list: none); copies of built-in runtimes are left out (module docstring)."""
        cluster: dict[str, ClusterTrainingRuntime] = {}
        namespaced: dict[tuple[str, str], TrainingRuntime] = {}
        for r in runtimes:
            if isinstance(r, TrainingRuntime):
                namespaced[(r.metadata.namespace or "default", r.metadata.name)] = r
            elif not self._is_builtin_copy(r):
                cluster[r.metadata.name] = r
        layers = dict(self._layers)
        layers[source] = (cluster, namespaced)
        self._layers = layers

    def _is_builtin_copy(self, runtime: ClusterTrainingRuntime) -> bool:
        builtin = self._builtin.get(runtime.metadata.name)
        return builtin is not None and builtin.spec == runtime.spec and (
            builtin.metadata.labels.get(FRAMEWORK_LABEL)
            == runtime.metadata.labels.get(FRAMEWORK_LABEL))

    def add(self, runtime: ClusterTrainingRuntime | TrainingRuntime) -> None:
        if isinstance(runtime, TrainingRuntime):
            self._namespaced[(runtime.metadata.namespace or "default", runtime.metadata.name)] = (
                runtime
            )
        else:
            self._cluster[runtime.metadata.name] = runtime

    def names(self) -> list[str]:
        return sorted({*self._cluster, *(n for c, _ in self._layers.values() for n in c)})

    def get(self, job: TrainJob, origin: str = ""
            ) -> ClusterTrainingRuntime | TrainingRuntime:
        """``job``'s runtime (module docstring: where from, and a namespaced one only
        for a job of ``origin`` ``kubernetes``)."""
        ref = job.spec.runtime_ref
        found: ClusterTrainingRuntime | TrainingRuntime | None = None
        door = self._layers.get(job.metadata.annotations.get(ANN_FRONTDOOR, ""))
        if origin == CLUSTER_ORIGIN:
            if ref.kind == "TrainingRuntime":
                key = (job.metadata.namespace or "default", ref.name)
                found = (door[1].get(key) if door else None) or self._namespaced.get(key)
            else:
                found = (door[0].get(ref.name) if door else None) or self._cluster.get(ref.name)
        elif ref.kind == "TrainingRuntime":
            found = self._namespaced.get((job.metadata.namespace or "default", ref.name))
        else:
            found = self._cluster.get(ref.name)
            if found is None or found is self._builtin.get(ref.name):
                found = next((c[ref.name] for _, (c, _n) in sorted(self._layers.items())
                              if ref.name in c), found)
        if found is None:
            known = set(self._cluster)
            if origin == CLUSTER_ORIGIN:
                known.update(door[0] if door else ())
            else:
                known.update(n for c, _ in self._layers.values() for n in c)
            raise ValidationError([(
                "spec.runtimeRef.name",
                f"unknown {ref.kind} {ref.name!r}; known: {', '.join(sorted(known))}",
            )])
        return found

    def resolve(self, job: TrainJob, origin: str = "") -> LaunchPlan:
        """``job`` merged with its runtime, as Kubeflow Trainer merges them.

        The runtime's ``mlPolicy`` gives ``numNodes`` and ``numProcPerNode`` where the
        TrainJob has none. Its trainer container (:func:`trainer_container`) fills
        what the TrainJob leaves out, and only that: the image when
        ``spec.trainer.image`` is unset; the command (with the container's args, unless
        ``spec.trainer.args`` is set) when the job has neither ``spec.trainer.command``
        nor a batch script. A job with its own command never gets the runtime's args
        (Trainer would keep them; appending them to a user's command is never what
        was meant). On every back end the runtime's command is the job's command: on
        Slurm and Flux it runs through ``mpi-launch`` as a TrainJob's own would; the
        image is used by the Kubernetes back end only. No command from either side
        (and no script) raises :class:`ValidationError` naming ``spec.trainer.command``.
        """
        runtime = self.get(job, origin)
        policy = runtime.spec.ml_policy or MLPolicy()
        # The label when it names a framework the bridge launches; else (Trainer's
        # deepspeed, mlx, torchtune: their mlPolicy is mpi or torch) the policy's.
        label = runtime.metadata.labels.get(FRAMEWORK_LABEL)
        framework = Framework(label) if label in set(Framework) else next(
            (f for f in Framework if f is not Framework.PLAIN
             and getattr(policy, f.value, None) is not None), Framework.PLAIN)
        fw_policy: dict[str, Any] = (
            getattr(policy, framework.value, None) or {} if framework is not Framework.PLAIN
            else {}
        )
        trainer = job.spec.trainer
        num_nodes = (trainer.num_nodes if trainer and trainer.num_nodes else None) or (
            policy.num_nodes or 1
        )
        raw_procs: int | str | None = (
            trainer.num_proc_per_node if trainer and trainer.num_proc_per_node is not None
            else fw_policy.get("numProcPerNode",
                               "auto" if framework is Framework.TORCH else 1)
        )
        procs: int | None = None if raw_procs in ("auto", "cpu", "gpu", None) else int(raw_procs)
        script = script_of(job)
        container = _RuntimeContainer.of(runtime)
        command = tuple(trainer.command or ()) if trainer else ()
        args = tuple(trainer.args or ()) if trainer else ()
        if script is None and not command:
            command = container.command
            if not (trainer and trainer.args is not None):
                args = container.args
        template = runtime.spec.template
        extra: dict[str, Any] = {"template": template} if template else {}
        if isinstance(runtime, TrainingRuntime):
            extra[runtime_steps.NAMESPACED_RUNTIME] = (
                f"{runtime.metadata.namespace or 'default'}/{runtime.metadata.name}")
        steps = runtime_steps.initializer_steps(template)
        runtime_steps.check_initializer(job, steps, template)
        resources = runtime_steps.given_resources(job, container.resources)
        if (script is None and trainer and framework is Framework.TORCH
                and torchtune.is_torchtune(trainer.command)):
            command, more = runtime_steps.builtin_trainer(
                runtime.metadata.name, trainer.num_nodes, num_nodes, procs, resources, args,
                container.command)
            extra.update(more)
        if not script and not command:
            raise ValidationError([(
                "spec.trainer.command",
                "required: the job needs a command (or a batch script from tbatch); "
                f"runtime {runtime.metadata.name!r} gives none",
            )])
        env = tuple(
            (e.name, e.value or "") for e in (trainer.env or []) if e.value_from is None
        ) if trainer else ()
        mpi: MpiImplementation | None = None
        if framework is Framework.MPI:
            mpi = MpiImplementation.parse(
                fw_policy.get("mpiImplementation", MpiImplementation.OPENMPI.value),
                f"spec.runtimeRef.name: runtime {runtime.metadata.name!r} {MPI_FIELD}")
            extra.update(runtime_steps.ssh_auth_mount_path(
                fw_policy, f"spec.runtimeRef.name: runtime {runtime.metadata.name!r} "
                           f"mlPolicy.mpi.sshAuthMountPath"))
        return LaunchPlan(
            runtime=runtime.metadata.name,
            framework=framework,
            num_nodes=num_nodes,
            proc_per_node=procs,
            image=(trainer.image if trainer else None) or container.image,
            builtin_image=not (trainer and trainer.image) and bool(container.image)
            and runtime is self._builtin.get(runtime.metadata.name),
            # The runtime's JobSet template: what the Kubernetes back end keeps of it
            # (k8s_adapter/trainer_layout.py, k8s_adapter/runtime_template.py).
            extra=extra,
            initializers=steps,
            resources=container.resources,
            command=command,
            args=args,
            env=env,
            batch_script=script,
            mpi_implementation=mpi,
            data_cache=None if runtime_steps.DATASET_STEP in steps else data_cache_of(
                job, num_nodes, model_step=runtime_steps.MODEL_STEP in steps),
        )


@dataclass(frozen=True)
class _RuntimeContainer:
    """What a runtime's trainer container offers a job: image, command, args."""

    image: str | None = None
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    resources: dict[str, dict[str, Any]] | None = None

    @classmethod
    def of(cls, runtime: ClusterTrainingRuntime | TrainingRuntime) -> _RuntimeContainer:
        """The trainer container of ``runtime`` (empty when it has none). Raises
        :class:`ValidationError` naming the runtime for an image that is not a
        non-empty string or a command/args that is not a list of strings."""
        container = trainer_container(runtime.spec.template)
        if container is None:
            return cls()
        where = f"spec.runtimeRef.name: runtime {runtime.metadata.name!r} {TRAINER_CONTAINER_FIELD}"
        image = container.get("image")
        if image is not None and not (isinstance(image, str) and image):
            raise ValidationError([(f"{where}.image", "must be a non-empty string")])

        def strings(key: str) -> tuple[str, ...]:
            value = container.get(key)
            if value is None:
                return ()
            if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise ValidationError([(f"{where}.{key}", "must be a list of strings")])
            return tuple(value)

        return cls(image=image, command=strings("command"), args=strings("args"),
                   resources=runtime_steps.trainer_resources(container))
