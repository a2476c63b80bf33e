"""Training runtimes: the built-in catalog and resolution of a TrainJob into a launch plan.

A TrainJob names its runtime (``spec.runtimeRef``); the runtime's ``mlPolicy`` says
which framework launches the ranks (torch, MPI, JAX, XGBoost, or none for a plain
batch job) and gives defaults (``numNodes``, ``numProcPerNode``) that the TrainJob
may override, exactly as Kubeflow Trainer merges them.

Contract: :meth:`RuntimeCatalog.resolve` returns a :class:`LaunchPlan` or raises
:class:`bridge.model.ValidationError` naming ``spec.runtimeRef.name`` (unknown
runtime) or the field that makes the job impossible.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import yaml

from bridge.model import (
    ANN_BATCH_SCRIPT,
    ClusterTrainingRuntime,
    MLPolicy,
    ObjectMeta,
    TrainingRuntime,
    TrainingRuntimeSpec,
    TrainJob,
    ValidationError,
    load_document,
)


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


def _runtime(name: str, framework: Framework, policy: dict[str, Any],
             num_nodes: int = 1) -> ClusterTrainingRuntime:
    ml: dict[str, Any] = {"numNodes": num_nodes}
    if framework is not Framework.PLAIN:
        ml[framework.value] = policy
    return ClusterTrainingRuntime(
        metadata=ObjectMeta(name=name, labels={FRAMEWORK_LABEL: framework.value}),
        spec=TrainingRuntimeSpec(ml_policy=MLPolicy.model_validate(ml)),
    )


def builtin_runtimes() -> list[ClusterTrainingRuntime]:
    """The runtimes every bridge knows, named as Kubeflow Trainer names its own."""
    return [
        _runtime("plain", Framework.PLAIN, {}),
        _runtime("torch-distributed", Framework.TORCH, {"numProcPerNode": "auto"}),
        _runtime(
            "mpi-distributed",
            Framework.MPI,
            {"numProcPerNode": 1, "mpiImplementation": "OpenMPI", "runLauncherAsNode": True},
        ),
        _runtime("deepspeed-distributed", Framework.MPI,
                 {"numProcPerNode": 1, "mpiImplementation": "OpenMPI",
                  "runLauncherAsNode": True}),
        _runtime("jax-distributed", Framework.JAX, {"numProcPerNode": 1}),
        _runtime("xgboost-distributed", Framework.XGBOOST, {"numProcPerNode": 1}),
    ]


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


class RuntimeCatalog:
    """Built-in ClusterTrainingRuntimes plus those an admin adds (by name, per namespace)."""

    def __init__(self, extra: list[ClusterTrainingRuntime | TrainingRuntime] | None = None):
        self._cluster: dict[str, ClusterTrainingRuntime] = {
            r.metadata.name: r for r in builtin_runtimes()
        }
        self._namespaced: dict[tuple[str, str], TrainingRuntime] = {}
        for r in extra or []:
            self.add(r)

    def add(self, runtime: ClusterTrainingRuntime | TrainingRuntime) -> None:
        if isinstance(runtime, TrainingRuntime):
            self._namespaced[(runtime.metadata.namespace or "default", runtime.metadata.name)] = (
                runtime
            )
        else:
            self._cluster[runtime.metadata.name] = runtime

    def names(self) -> list[str]:
        return sorted(self._cluster)

    def get(self, job: TrainJob) -> ClusterTrainingRuntime | TrainingRuntime:
        ref = job.spec.runtime_ref
        found: ClusterTrainingRuntime | TrainingRuntime | None
        if ref.kind == "TrainingRuntime":
            found = self._namespaced.get((job.metadata.namespace or "default", ref.name))
        else:
            found = self._cluster.get(ref.name)
        if found is None:
            raise ValidationError([(
                "spec.runtimeRef.name",
                f"unknown {ref.kind} {ref.name!r}; known: {', '.join(self.names())}",
            )])
        return found

    def resolve(self, job: TrainJob) -> LaunchPlan:
        runtime = self.get(job)
        policy = runtime.spec.ml_policy or MLPolicy()
        framework = Framework(
            runtime.metadata.labels.get(FRAMEWORK_LABEL)
            or next((f for f in Framework if f is not Framework.PLAIN
                     and getattr(policy, f.value, None) is not None), Framework.PLAIN)
        )
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
            else fw_policy.get("numProcPerNode", 1)
        )
        procs: int | None = None if raw_procs in ("auto", "cpu", "gpu", None) else int(raw_procs)
        script = job.metadata.annotations.get(ANN_BATCH_SCRIPT)
        command = tuple(trainer.command or ()) if trainer else ()
        if not script and not command:
            raise ValidationError([(
                "spec.trainer.command",
                "required: the job needs a command (or a batch script from tbatch)",
            )])
        env = tuple(
            (e.name, e.value or "") for e in (trainer.env or []) if e.value_from is None
        ) if trainer else ()
        mpi: MpiImplementation | None = None
        if framework is Framework.MPI:
            mpi = MpiImplementation.parse(
                fw_policy.get("mpiImplementation", MpiImplementation.OPENMPI.value),
                f"spec.runtimeRef.name: runtime {runtime.metadata.name!r} {MPI_FIELD}")
        return LaunchPlan(
            runtime=runtime.metadata.name,
            framework=framework,
            num_nodes=num_nodes,
            proc_per_node=procs,
            image=trainer.image if trainer else None,
            command=command,
            args=tuple(trainer.args or ()) if trainer else (),
            env=env,
            batch_script=script,
            mpi_implementation=mpi,
        )
