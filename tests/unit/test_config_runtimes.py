"""Daemon configuration and the runtime catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.config import ConfigError, load_config
from bridge.model import ANN_BATCH_SCRIPT, load_trainjob
from bridge.runtimes import Framework, RuntimeCatalog


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bridge.toml"
    path.write_text(text)
    return path


def test_minimal_config_defaults(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, '[backends.hpc]\nkind = "slurm"\nrest_socket = "/x"\n'))
    assert cfg.engine.default_backend == "hpc"
    assert cfg.backends["hpc"].settings() == {"rest_socket": "/x"}
    assert cfg.daemon.socket == "/run/hpc-bridge/bridge.sock"


@pytest.mark.parametrize(("text", "words"), [
    ("[backends]\n", "at least one"),
    ("[daemon]\nsocket = 3\n[backends.s]\nkind='slurm'\n", "daemon.socket"),
    ("[engine]\ndefault_backend = 'flux'\n[backends.s]\nkind='slurm'\n", "not a configured"),
    ("[daemon\n", "malformed TOML"),
    ("[engine]\npoll_interval = -1\n[backends.s]\nkind='slurm'\n", "engine.poll_interval"),
    ("[daemon]\nsokcet = '/x'\n[backends.s]\nkind='slurm'\n", "daemon.sokcet"),
    ("[backends.s]\nkind='slurm'\n[frontdoors.k]\nkind='kubernetes'\nbackend='k8s'\n",
     "frontdoors.k.backend: 'k8s' is not a configured"),
    ("[backends.s]\nkind='slurm'\n[frontdoors.k]\nkind='kubernetes'\n"
     "allowed_backends=['s', 'flux']\n", "frontdoors.k.allowed_backends: 'flux'"),
    ("[backends.s]\nkind='slurm'\n[frontdoors.k]\nbackend='s'\n", "frontdoors.k.kind"),
])
def test_bad_config_names_the_key(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        load_config(write(tmp_path, text))


def test_front_doors_are_configured_beside_back_ends(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "[backends.slurm]\nkind='slurm'\n"
                                      "[backends.k8s]\nkind='kubernetes'\n"
                                      "[frontdoors.trainjobs]\nkind='kubernetes'\n"
                                      "backend='k8s'\nallowed_backends=['slurm']\n"))
    assert cfg.frontdoors["trainjobs"].kind == "kubernetes"
    assert cfg.frontdoors["trainjobs"].settings() == {"backend": "k8s",
                                                      "allowed_backends": ["slurm"]}


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.toml")


def job(runtime: str, **trainer: object) -> object:
    return load_trainjob({"kind": "TrainJob", "apiVersion": "trainer.kubeflow.org/v1alpha1",
                          "metadata": {"name": "j"},
                          "spec": {"runtimeRef": {"name": runtime}, "trainer": trainer}})


def test_catalog_has_the_promised_runtimes() -> None:
    names = RuntimeCatalog().names()
    for name in ("torch-distributed", "mpi-distributed", "jax-distributed",
                 "xgboost-distributed", "plain"):
        assert name in names


def test_resolve_merges_runtime_defaults_with_trainjob() -> None:
    catalog = RuntimeCatalog()
    plan = catalog.resolve(job("torch-distributed", command=["python", "t.py"], numNodes=2))
    assert plan.framework is Framework.TORCH and plan.num_nodes == 2
    assert plan.proc_per_node is None  # torch default "auto"
    plan = catalog.resolve(job("mpi-distributed", command=["python", "a.py"],
                               numProcPerNode=2))
    assert plan.framework is Framework.MPI and plan.proc_per_node == 2
    assert plan.mpi_implementation == "OpenMPI"


def test_unknown_runtime_and_missing_command() -> None:
    catalog = RuntimeCatalog()
    with pytest.raises(ValueError, match=r"spec\.runtimeRef\.name: unknown .*'tensorflow'"):
        catalog.resolve(job("tensorflow", command=["x"]))
    with pytest.raises(ValueError, match=r"spec\.trainer\.command: required"):
        catalog.resolve(job("plain"))


def test_batch_script_needs_no_command() -> None:
    j = job("plain")
    j.metadata.annotations[ANN_BATCH_SCRIPT] = "#!/bin/sh\necho hi\n"  # type: ignore[attr-defined]
    assert RuntimeCatalog().resolve(j).batch_script == "#!/bin/sh\necho hi\n"  # type: ignore[arg-type]


EXTRA_RUNTIMES = (Path(__file__).parents[2] / "examples" / "runtimes" /
                  "mpich-distributed.yaml").read_text() + """---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata:
  name: team-torch
  namespace: research
spec:
  mlPolicy:
    torch:
      numProcPerNode: 4
"""


def test_runtime_files_extend_the_catalog(tmp_path: Path) -> None:
    from bridge.runtimes import load_runtime_files

    (tmp_path / "rt.yaml").write_text(EXTRA_RUNTIMES)
    catalog = RuntimeCatalog(load_runtime_files([str(tmp_path / "*.yaml")]))
    plan = catalog.resolve(job("mpich-distributed", command=["a.out"], numNodes=2))
    assert plan.framework is Framework.MPI and plan.mpi_implementation == "MPICH"
    team = job("team-torch", command=["t.py"])
    team.spec.runtime_ref.kind = "TrainingRuntime"  # type: ignore[attr-defined]
    team.metadata.namespace = "research"  # type: ignore[attr-defined]
    assert catalog.resolve(team).proc_per_node == 4  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "words"), [
    ("kind: ClusterTrainingRuntime\nspec: [\n", "malformed YAML"),
    ("kind: TrainJob\nspec: {runtimeRef: {name: x}}\n", "expected a runtime"),
    ("kind: ClusterTrainingRuntime\nspec: {}\n", "metadata.name"),
])
def test_bad_runtime_files_name_the_file(tmp_path: Path, text: str, words: str) -> None:
    from bridge.runtimes import load_runtime_files

    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=words) as err:
        load_runtime_files([str(path)])
    assert str(path) in str(err.value)
    with pytest.raises(ValueError, match="no runtime file matches"):
        load_runtime_files([str(tmp_path / "nope-*.yaml")])
