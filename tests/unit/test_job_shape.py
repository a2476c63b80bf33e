"""bridge.shape: the job shape resolved once at admission (precedence, typed MPI,
JSON round trip), stored with the job and used as its runtime snapshot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.engine import Engine, EngineSettings
from bridge.model import ANN_SCHEDULING, TrainJob, ValidationError, load_trainjob
from bridge.runtimes import Framework, MpiImplementation, RuntimeCatalog, load_runtime_files
from bridge.scheduling import SchedulingOptions, scheduling_of
from bridge.shape import JobShape, resolve_shape
from bridge.store import Store
from slurm_adapter.backend import create
from tests.unit.builders import ALICE


def job(runtime: str = "torch-distributed", *, resources: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None, deadline: int | None = None,
        **trainer: Any) -> TrainJob:
    spec: dict[str, Any] = {"runtimeRef": {"name": runtime},
                            "trainer": {"command": ["python", "t.py"], **trainer}}
    if resources is not None:
        spec["trainer"]["resourcesPerNode"] = resources
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    annotations = {ANN_SCHEDULING: SchedulingOptions(**options).model_dump_json(
        exclude_defaults=True)} if options else {}
    return load_trainjob({"metadata": {"name": "t", "annotations": annotations}, "spec": spec})


def shape_of(j: TrainJob, catalog: RuntimeCatalog | None = None) -> JobShape:
    return resolve_shape(j, (catalog or RuntimeCatalog()).resolve(j), scheduling_of(j))


# --- precedence: explicit option > resourcesPerNode > runtime > nothing ------------------


def test_nothing_asked_is_none() -> None:
    s = shape_of(job("plain"))
    assert (s.nodes, s.ranks_per_node, s.cpus_per_task, s.gpus_per_node,
            s.mem_per_node_mb, s.time_limit_minutes, s.mpi) == (1, None, None, None,
                                                                None, None, None)


def test_runtime_then_trainer_then_options_for_ranks() -> None:
    assert shape_of(job("mpi-distributed")).ranks_per_node == 1  # the runtime's template
    assert shape_of(job("mpi-distributed", numProcPerNode=3)).ranks_per_node == 3
    s = shape_of(job("mpi-distributed", numNodes=2, numProcPerNode=3,
                     options={"ntasks_per_node": 5}))
    assert (s.nodes, s.ranks_per_node) == (2, 5)


def test_resources_per_node() -> None:
    s = shape_of(job(numNodes=2, numProcPerNode=4, resources={
        "requests": {"cpu": "6", "memory": "2Gi", "nvidia.com/gpu": 2}}))
    assert (s.cpus_per_node, s.cpus_per_task, s.gpus_per_node, s.mem_per_node_mb) == (
        6, 2, 2, 2048)
    assert s.from_options == frozenset()


def test_an_explicit_option_wins_over_resources_per_node() -> None:
    s = shape_of(job(numProcPerNode=2, resources={
        "requests": {"cpu": "16", "memory": "2Gi", "nvidia.com/gpu": 8}},
        options={"cpus_per_task": 3, "gpus_per_node": 1, "mem_per_node_mb": 100}))
    assert (s.cpus_per_task, s.cpus_per_node, s.gpus_per_node, s.mem_per_node_mb) == (
        3, 6, 1, 100)
    assert s.from_options == {"cpu", "memory", "nvidia.com/gpu"}


def test_time_limit_from_the_option_else_the_deadline() -> None:
    assert shape_of(job(deadline=61)).time_limit_minutes == 2
    assert shape_of(job(deadline=61, options={"time_limit_minutes": 7})).time_limit_minutes == 7


@pytest.mark.parametrize(("key", "value"), [("cpu", "1e400"), ("memory", "1e30"),
                                            ("nvidia.com/gpu", "1e12")])
def test_an_impossible_quantity_names_the_field(key: str, value: str) -> None:
    with pytest.raises(ValidationError, match=rf"resourcesPerNode.requests\[{key}\]"):
        shape_of(job(resources={"requests": {key: value}}))


# --- typed MPI -------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "flavour"), [
    ("OpenMPI", "openmpi"), ("MPICH", "mpich"), ("Intel", "intel"), ("IntelMPI", "intel")])
def test_mpi_names(name: str, flavour: str) -> None:
    assert MpiImplementation.parse(name).flavour == flavour


def _runtime_file(tmp_path: Path, impl: str, procs: int = 1) -> Path:
    path = tmp_path / "rt.yaml"
    path.write_text(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\n"
        "metadata: {name: my-mpi, labels: {trainer.kubeflow.org/framework: mpi}}\n"
        f"spec: {{mlPolicy: {{numNodes: 1, mpi: {{numProcPerNode: {procs}, "
        f"mpiImplementation: {impl}}}}}}}\n")
    return path


def engine(tmp_path: Path, catalog: RuntimeCatalog) -> Engine:
    return Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": create("slurm", {})}, catalog,
                  EngineSettings(default_backend="slurm"))


def test_an_unknown_mpi_implementation_is_refused_at_admission(tmp_path: Path) -> None:
    catalog = RuntimeCatalog(load_runtime_files([str(_runtime_file(tmp_path, "LAM"))]))
    e = engine(tmp_path, catalog)
    with pytest.raises(ValidationError, match="mpiImplementation") as err:
        e.admit(job("my-mpi"), ALICE)
    assert "LAM" in str(err.value) and "spec.runtimeRef.name" in str(err.value)
    assert e.store.list_jobs() == []


# --- stored with the job: the runtime snapshot ------------------------------------------


def test_the_stored_shape_is_the_runtime_snapshot(tmp_path: Path) -> None:
    path = _runtime_file(tmp_path, "MPICH", procs=2)
    e = engine(tmp_path, RuntimeCatalog(load_runtime_files([str(path)])))
    rec = e.admit(job("my-mpi", numNodes=2), ALICE)
    assert rec.shape is not None
    # The runtime file is edited and the catalog read again (as a daemon reload does).
    _runtime_file(tmp_path, "OpenMPI", procs=8)
    e.catalog = RuntimeCatalog(load_runtime_files([str(path)]))
    request = e._request(e.store.get(rec.id))
    assert request.shape is not None and request.shape.mpi is MpiImplementation.MPICH
    assert request.plan.proc_per_node == 2 and request.shape.ranks_per_node == 2
    # A new job gets the edited runtime.
    later = job("my-mpi", numNodes=2)
    later.metadata.name = "later"
    other = e.admit(later, ALICE)
    assert e._request(e.store.get(other.id)).plan.proc_per_node == 8


def test_a_row_without_a_shape_is_resolved(tmp_path: Path) -> None:
    e = engine(tmp_path, RuntimeCatalog())
    j = job(numNodes=3)
    prepared = e.prepare(j, ALICE)
    rec = e.store.add(j, ALICE, "slurm", document=prepared.document,
                      summary=prepared.summary)  # no shape: an older daemon's row
    assert rec.shape is None
    request = e._request(rec)
    assert request.shape is not None and request.shape.nodes == 3


# --- JSON round trip ---------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(runtime=st.sampled_from(RuntimeCatalog().names()),
       nodes=st.integers(1, 64), procs=st.one_of(st.none(), st.integers(1, 16)),
       gpus=st.one_of(st.none(), st.integers(0, 8)),
       cpu=st.one_of(st.none(), st.sampled_from(["500m", "1", "3", "64"])),
       mem=st.one_of(st.none(), st.integers(1, 10**6)),
       limit=st.one_of(st.none(), st.integers(1, 10**5)))
def test_round_trip(runtime: str, nodes: int, procs: int | None, gpus: int | None,
                    cpu: str | None, mem: int | None, limit: int | None) -> None:
    trainer: dict[str, Any] = {"numNodes": nodes}
    if procs is not None:
        trainer["numProcPerNode"] = procs
    requests = {"cpu": cpu} if cpu else {}
    options = {k: v for k, v in {"gpus_per_node": gpus, "mem_per_node_mb": mem,
                                 "time_limit_minutes": limit}.items() if v is not None}
    s = shape_of(job(runtime, resources={"requests": requests} if requests else None,
                     options=options, **trainer))
    again = JobShape.from_json(s.to_json())
    assert again == s
    assert isinstance(again.plan.framework, Framework)
    assert again.plan.mpi_implementation == s.plan.mpi_implementation


def test_another_version_is_refused() -> None:
    data = shape_of(job()).to_json()
    with pytest.raises(ValueError, match="version"):
        JobShape.from_json({**data, "version": 99})


def test_the_column_is_added_to_a_database_without_it(tmp_path: Path) -> None:
    """A schema-4 database an earlier build of this version wrote (no ``jobs.shape``)
    gains the column on open; its jobs are resolved when they are submitted."""
    e = engine(tmp_path, RuntimeCatalog())
    rec = e.admit(job(numNodes=2), ALICE)
    e.store._db.execute("ALTER TABLE jobs DROP COLUMN shape")
    e.store.close()
    store = Store.open(tmp_path / "s.sqlite")
    again = store.get(rec.id)
    assert again.shape is None
    e2 = Engine(store, {"slurm": create("slurm", {})}, RuntimeCatalog(),
                EngineSettings(default_backend="slurm"))
    assert e2._request(again).shape == e._shape(rec)
