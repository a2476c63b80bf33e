"""spec.initializer as the bridge runs it (bridge/dataset.py): the data cache on Slurm, a
clear refusal for everything else, and the batch script that starts it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from bridge.backend import BackendRejected
from bridge.dataset import DataCacheSpec, data_cache_of, serve_options
from bridge.engine import Engine, EngineSettings
from bridge.model import ValidationError, load_trainjob
from bridge.runtimes import RuntimeCatalog
from bridge.scheduling import SchedulingOptions
from bridge.store import Store
from slurm_adapter.script import render_script
from tests.unit.builders import ALICE, HOSTILE, inventory, trainjob_doc
from tests.unit.builders import submit_request as request
from tests.unit.fakes import FakeBackend


def job(initializer: Any, runtime: str = "torch-distributed", **fields: Any) -> Any:
    doc = trainjob_doc(runtime, nodes=2, command=["python", "train.py"], **fields)
    doc["spec"]["initializer"] = initializer
    return load_trainjob(doc)


def test_an_iceberg_table_as_trainers_sdk_names_it() -> None:
    """Trainer's DataCacheInitializer: cache://<schema>/<table>, METADATA_LOC, and
    CLUSTER_SIZE = data nodes + 1 (here: the job's two nodes, plus one)."""
    spec = data_cache_of(job({"dataset": {"storageUri": "cache://ds/tokens", "env": [
        {"name": "METADATA_LOC", "value": "file:///w/ds/tokens/metadata/v3.metadata.json"},
        {"name": "CLUSTER_SIZE", "value": "3"}]}}), 2)
    assert spec == DataCacheSpec("cache://ds/tokens",
                                 metadata_location="file:///w/ds/tokens/metadata/v3.metadata.json")
    spec = data_cache_of(job({"dataset": {"storageUri": "cache://ds/tokens", "env": [
        {"name": "CATALOG_URI", "value": "sqlite:////w/catalog.db"},
        {"name": "CATALOG_NAME", "value": "lake"}]}}))
    assert spec is not None and serve_options(spec, 1 << 20) == [
        "--source", "cache://ds/tokens", "--memory-limit", "1048576",
        "--iceberg-catalog", "sqlite:////w/catalog.db", "--iceberg-catalog-name", "lake"]


def test_a_path_or_file_uri_with_its_settings() -> None:
    assert data_cache_of(job(None)) is None
    assert data_cache_of(job({"model": None})) is None
    assert data_cache_of(job({"dataset": {"storageUri": "/data/ds"}})) == DataCacheSpec("/data/ds")
    spec = data_cache_of(job({"dataset": {"storageUri": "file:///data/x.csv", "env": [
        {"name": "FORMAT", "value": "csv"}, {"name": "BLOCK_ROWS", "value": "1000"},
        {"name": "WORKER_MEM", "value": "2Gi"}]}}))
    assert spec == DataCacheSpec("file:///data/x.csv", "csv", 1000, 2 << 30)


@pytest.mark.parametrize(("initializer", "field", "says"), [
    ({"model": {"storageUri": "hf://m"}}, "spec.initializer.model", "no model initializer"),
    ({"dataset": {}}, "spec.initializer.dataset.storageUri", "required"),
    ({"dataset": {"storageUri": "hf://tatsu-lab/alpaca"}},
     "spec.initializer.dataset.storageUri", "scheme 'hf' is not served"),
    ({"dataset": {"storageUri": "s3://b/k"}}, "spec.initializer.dataset.storageUri", "'s3'"),
    ({"dataset": {"storageUri": "cache://schema"}},
     "spec.initializer.dataset.storageUri", "cache://<schema>/<table>"),
    ({"dataset": {"storageUri": "cache://s/t"}}, "spec.initializer.dataset.env",
     "exactly one of METADATA_LOC"),
    ({"dataset": {"storageUri": "cache://s/t", "env": [
        {"name": "METADATA_LOC", "value": "/m.json"}, {"name": "CATALOG_URI",
                                                      "value": "sqlite:////c.db"}]}},
     "spec.initializer.dataset.env", "exactly one of METADATA_LOC"),
    ({"dataset": {"storageUri": "cache://s/t", "env": [
        {"name": "CATALOG_URI", "value": "postgresql://db/x"}]}},
     "spec.initializer.dataset.env[CATALOG_URI]", "sqlite:////absolute"),
    ({"dataset": {"storageUri": "cache://s/t", "env": [
        {"name": "METADATA_LOC", "value": "s3://b/m.json"}]}},
     "spec.initializer.dataset.env[METADATA_LOC]", "absolute path"),
    ({"dataset": {"storageUri": "cache://s/t", "env": [
        {"name": "METADATA_LOC", "value": "/m.json"}, {"name": "CLUSTER_SIZE",
                                                       "value": "4"}]}},
     "spec.initializer.dataset.env[CLUSTER_SIZE]", "2 (numNodes + 1)"),
    ({"dataset": {"storageUri": "/d", "env": [{"name": "METADATA_LOC", "value": "/m"}]}},
     "spec.initializer.dataset.env[METADATA_LOC]", "only for an Iceberg table"),
    ({"dataset": {"storageUri": "file:///d?version=2"}},
     "spec.initializer.dataset.storageUri", "query or fragment"),
    ({"dataset": {"storageUri": "/d", "env": [{"name": "BLOCK_ROWS", "value": "\u00b2"}]}},
     "spec.initializer.dataset.env[BLOCK_ROWS]", "1..16777216"),
    ({"dataset": {"storageUri": "/d", "env": [{"name": "IAM_ROLE", "value": "r"}]}},
     "spec.initializer.dataset.env[0].name", "'IAM_ROLE' is not one of"),
    ({"dataset": {"storageUri": "data/rel"}}, "spec.initializer.dataset.storageUri",
     "absolute"),
    ({"dataset": {"storageUri": "file://host/data"}}, "spec.initializer.dataset.storageUri",
     "local path"),
    ({"dataset": {"storageUri": "/d", "secretRef": {"name": "s"}}},
     "spec.initializer.dataset.secretRef", "no secret"),
    ({"dataset": {"storageUri": "/d", "env": [{"name": "CLUSTER_SIZE", "value": "3"}]}},
     "spec.initializer.dataset.env[CLUSTER_SIZE]", "only for an Iceberg table"),
    ({"dataset": {"storageUri": "/d", "env": [{"name": "BLOCK_ROWS", "value": "0"}]}},
     "spec.initializer.dataset.env[BLOCK_ROWS]", "1..16777216"),
    ({"dataset": {"storageUri": "/d", "env": [{"name": "WORKER_MEM", "value": "lots"}]}},
     "spec.initializer.dataset.env[WORKER_MEM]", "memory quantity"),
    ({"dataset": {"storageUri": "/d", "env": [{"name": "FORMAT", "value": "orc"}]}},
     "spec.initializer.dataset.env[FORMAT]", "'orc'"),
    ({"dataset": {"storageUri": "/d", "env": [{"name": "FORMAT",
                                               "valueFrom": {"secretKeyRef": {}}}]}},
     "spec.initializer.dataset.env[0].value", "string value"),
    ({"dataset": {"storageUri": "/d", "shards": 2}}, "spec.initializer.dataset.shards",
     "unknown"),
    ({"datasets": {}}, "spec.initializer.datasets", "unknown"),
])
def test_anything_else_is_refused_naming_the_field(initializer: Any, field: str,
                                                   says: str) -> None:
    with pytest.raises(ValidationError) as err:
        data_cache_of(job(initializer))
    text = str(err.value)
    assert field in text and says in text, text


def test_a_back_end_without_a_cache_refuses_the_job_at_admission(tmp_path: Path) -> None:
    e = Engine(Store.open(tmp_path / "s.sqlite"), {"other": FakeBackend(inventory())},
               RuntimeCatalog(), EngineSettings(default_backend="other"))
    with pytest.raises(ValidationError) as err:
        e.admit(job({"dataset": {"storageUri": "/data"}}), ALICE)
    assert "spec.initializer.dataset" in str(err.value)
    assert "back end 'other' does not start a data cache" in str(err.value)
    assert e.store.list_jobs() == []


def _script(runtime: str, initializer: Any, options: SchedulingOptions | None = None,
            **fields: Any) -> str:
    req = request(job(initializer, runtime, **fields), options)
    return render_script(req, "/opt/hb/bin/mpi-launch", "/opt/hb/bin/data-cache")


def test_the_script_starts_the_cache_then_execs_the_launch() -> None:
    text = _script("torch-distributed", {"dataset": {"storageUri": "/data/ds", "env": [
        {"name": "BLOCK_ROWS", "value": "512"}]}})
    lines = text.splitlines()
    serve = next(i for i, line in enumerate(lines) if line.startswith("srun --overlap"))
    wait = next(i for i, line in enumerate(lines) if "data-cache wait" in line)
    launch = next(i for i, line in enumerate(lines) if "mpi-launch" in line)
    assert serve < wait < launch
    assert lines[serve].endswith(
        "/opt/hb/bin/data-cache serve --source /data/ds --block-rows 512 "
        '--dir "$hpc_bridge_cache" &')
    # A failed start stops the servers and ends the job before the training; wait
    # removes the directory through its descriptor, whatever the outcome.
    assert "wait --remove --dir" in lines[wait]
    assert lines[wait].endswith('|| { kill "$hpc_bridge_cache_pid" 2>/dev/null; exit 1; }')
    assert "rm -rf" not in text and "credentials) || exit 1" in text
    # Still exec'd: --signal=B:... reaches the training; Slurm ends the cache step.
    assert lines[launch].startswith("exec ")
    assert "--memory-limit" not in text and "trap" not in text
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def test_an_mpi_script_keeps_its_trap_and_memory_comes_from_the_job() -> None:
    text = _script("mpi-distributed", {"dataset": {"storageUri": "/d"}},
                   SchedulingOptions(mem_per_node_mb=1024))
    assert "trap 'rm -rf -- \"$hostfile_dir\"' EXIT" in text
    assert "--memory-limit 1073741824" in text
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def test_a_plain_script_in_any_language_runs_as_its_own_file_after_the_cache(
        tmp_path: Path) -> None:
    python = "#!/usr/bin/env python3\n#SBATCH -N 2\nimport sys; print(sys.argv[1:])\n"
    req = request(job({"dataset": {"storageUri": "/d"}}, "plain", script=python,
                      args=["a b", "c"]))
    text = render_script(req, "/opt/hb/bin/mpi-launch", "/opt/hb/bin/data-cache")
    assert text.startswith("#!/bin/bash\n")
    assert text.index("data-cache wait") < text.index("import sys")
    assert text.rstrip().endswith("\"$user_script\" 'a b' c")
    # The user's script is data in a heredoc, after the bridge's first command: sbatch
    # reads no #SBATCH line of it (tbatch has read them).
    assert text.index("#SBATCH -N 2") > text.index("mktemp -d")
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    # Its arguments travel in the wrapper, not to sbatch.
    from slurm_adapter.script import job_spec
    assert job_spec(req, default_chdir="/home/alice").script_args == ()


def test_a_hostile_path_is_one_quoted_word() -> None:
    uri = f"/data/{HOSTILE}".replace("\x00", "")
    text = _script("torch-distributed", {"dataset": {"storageUri": uri}})
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    serve = next(line for line in text.splitlines() if line.startswith("srun --overlap"))
    # The words srun would run, printed NUL-separated by a stand-in for data-cache.
    words = serve.split(" --kill-on-bad-exit=1 ", 1)[1].removesuffix(" &")
    words = words.replace("/opt/hb/bin/data-cache", "stand_in", 1)
    out = subprocess.run(["bash", "-c", "stand_in() { printf '%s\\0' \"$@\"; }; " + words],
                         capture_output=True, check=True).stdout.split(b"\0")
    assert out[:3] == [b"serve", b"--source", uri.encode()]


def test_flux_tasks_run_through_data_cache_run() -> None:
    from flux_adapter.jobspec import build_jobspec

    req = request(job({"dataset": {"storageUri": "/d/x.parquet", "env": [
        {"name": "WORKER_MEM", "value": "1Mi"}]}}, "jax-distributed", procs=2))
    spec = build_jobspec(req, default_cwd="/home/alice", mpi_launch="/opt/hb/bin/mpi-launch",
                         data_cache="/opt/hb/bin/data-cache")
    argv = spec["tasks"][0]["command"]
    cut = argv.index("--")
    assert argv[:cut + 1] == ["/opt/hb/bin/data-cache", "run", "--source", "/d/x.parquet",
                              "--memory-limit", "1048576", "--tasks-per-node", "2", "--"]
    assert argv[cut + 1] == "/opt/hb/bin/mpi-launch"
    templated = request(job({"dataset": {"storageUri": "/d/{{tmpdir}}"}}))
    with pytest.raises(BackendRejected, match="storageUri: holds"):
        build_jobspec(templated, default_cwd="/home/alice")
