"""The data cache on the real Slurm and Flux: a TrainJob with ``spec.initializer.dataset``
gets one cache server per node (a background step of its own Slurm allocation; a process
of the first task of each node of its Flux job) and its ranks read their shares through
``data_cache.open_dataset`` (docs/data-cache.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.integration.bed import Daemon, trainjob_doc, wait_for

pytestmark = pytest.mark.integration

PYTHON = str(Path(sys.executable))

# Each rank writes the ids it read (two epochs: in order, and shuffled by a seed). Rank 0
# first publishes the cache's addresses and waits for the test's word, so that another
# user can try the running cache.
READER = """
import json, os, sys, time
from data_cache import open_dataset
out, rank = sys.argv[1], os.environ["RANK"]
with open_dataset() as shard:
    plain = [i for b in shard.numpy(0) for i in b["id"].tolist()]
with open_dataset(seed=11) as shard:
    shuffled = [i for b in shard.numpy(1) for i in b["id"].tolist()]
if rank == "0":
    with open(f"{out}/addresses", "w") as fh:
        fh.write(os.environ["HPC_BRIDGE_DATA_CACHE"])
    while not os.path.exists(f"{out}/go"):
        time.sleep(0.05)
with open(f"{out}/ids-{rank}.json", "w") as fh:
    json.dump({"plain": plain, "shuffled": shuffled,
               "world": os.environ["WORLD_SIZE"]}, fh)
"""

ROWS = (1500, 9, 2491)


def _dataset(where: Path) -> int:
    where.mkdir()
    start = 0
    for i, rows in enumerate(ROWS):
        ids = np.arange(start, start + rows, dtype=np.int64)
        pq.write_table(pa.table({"id": ids, "v": ids * 0.5}), where / f"part-{i}.parquet",
                       row_group_size=500)
        start += rows
    return start


def _job(outdir: Path, name: str, uri: str, command: list[str], *, nodes: int = 2,
         procs: int = 2, env: list[dict[str, str]] | None = None) -> Path:
    doc: dict[str, Any] = trainjob_doc(outdir, name, "torch-distributed", command,
                                       nodes=nodes, procs=procs)
    dataset: dict[str, Any] = {"storageUri": uri, "env": env or [{"name": "BLOCK_ROWS",
                                                                "value": "256"}]}
    doc["spec"]["initializer"] = {"dataset": dataset}
    path = outdir / f"{name}.json"
    path.write_text(json.dumps(doc))
    return path


def _submit(daemon: Daemon, path: Path, outdir: Path) -> int:
    res = daemon.cli("alice", "tbatch", "--parsable", "-f", str(path), cwd=outdir)
    assert res.returncode == 0, res.stderr
    return int(res.stdout)


def _as_bob(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", "bob", "--", PYTHON, "-c", code],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/tmp"})


def test_two_nodes_of_ranks_read_the_dataset_exactly_once(bed_daemon: Daemon,
                                                          outdir: Path) -> None:
    """On Slurm the cache is a background step; on Flux every task runs ``data-cache
    run``, whose first task per node serves."""
    daemon = bed_daemon
    total = _dataset(outdir / "ds")
    prog = outdir / "reader.py"
    prog.write_text(READER)
    job_id = _submit(daemon, _job(outdir, "cache-read", f"file://{outdir}/ds",
                                  [PYTHON, str(prog), str(outdir)]), outdir)
    addresses = wait_for(lambda: (outdir / "addresses").exists()
                         and (outdir / "addresses").read_text(), 240,
                         "rank 0 to publish the cache's addresses").split(",")
    assert len(addresses) == 2 and all(a.startswith("grpc+tls://") for a in addresses)
    # Another user who finds the ports reads nothing: over TLS without the job's
    # certificate (the handshake ends it), or in plain gRPC, with or without a token.
    port = addresses[0].rsplit(":", 1)[1]
    probe = _as_bob(
        "import pyarrow.flight as f, sys\n"
        f"for address in ({addresses[0]!r}, 'grpc://127.0.0.1:{port}'):\n"
        "    c = f.FlightClient(address, disable_server_verification=address.startswith("
        "'grpc+tls'))\n"
        "    for headers in ([], [(b'authorization', b'Bearer guess')]):\n"
        "        try:\n"
        "            c.do_get(f.Ticket(b'{\"blocks\": [0]}'), f.FlightCallOptions("
        "headers=headers, timeout=20)).read_all()\n"
        "            print('READ'); sys.exit(3)\n"
        "        except f.FlightError as e: print('refused', type(e).__name__)\n")
    assert probe.returncode == 0 and probe.stdout.count("refused") == 4, probe
    (outdir / "go").write_text("")
    done = daemon.wait_state(job_id, ["Succeeded", "Failed", "Cancelled"], timeout=240)
    log = daemon.cli("alice", "tlog", str(job_id)).stdout
    assert done["state"] == "Succeeded", (done, log)
    shares = [json.loads((outdir / f"ids-{r}.json").read_text()) for r in range(4)]
    assert {s["world"] for s in shares} == {"4"}
    for key in ("plain", "shuffled"):
        read = [i for s in shares for i in s[key]]
        assert sorted(read) == list(range(total)), key
    assert [i for s in shares for i in s["plain"]] == list(range(total))
    assert [s["plain"] for s in shares] != [s["shuffled"] for s in shares]
    # The servers ended with the job and their private directory is gone.
    assert not list(outdir.glob(".hpc-bridge-cache-*")), list(outdir.iterdir())


def test_an_iceberg_table_as_trainer_names_it(bed_daemon: Daemon, outdir: Path) -> None:
    """``cache://<schema>/<table>``: a real Iceberg table in a SQL catalog on SQLite
    (pyiceberg), found through Trainer's METADATA_LOC on the first run and through the
    catalog on the second; the ranks read it exactly once."""
    from pyiceberg.catalog.sql import SqlCatalog

    daemon = bed_daemon
    catalog = SqlCatalog("default", uri=f"sqlite:///{outdir}/catalog.db",
                         warehouse=f"file://{outdir}/warehouse")
    catalog.create_namespace("ds")
    ids = np.arange(0, 3000, dtype=np.int64)
    table = catalog.create_table("ds.tokens", schema=pa.schema([("id", pa.int64())]))
    for part in np.array_split(ids, 3):
        table.append(pa.table({"id": part}))
    prog = outdir / "reader.py"
    prog.write_text(READER)
    for how, env in (("metadata", {"name": "METADATA_LOC", "value": table.metadata_location}),
                     ("catalog", {"name": "CATALOG_URI",
                                  "value": f"sqlite:///{outdir}/catalog.db"})):
        for leftover in outdir.glob("ids-*.json"):
            leftover.unlink()
        (outdir / "go").write_text("")
        job_id = _submit(daemon, _job(outdir, f"iceberg-{how}", "cache://ds/tokens",
                                      [PYTHON, str(prog), str(outdir)],
                                      env=[env, {"name": "BLOCK_ROWS", "value": "100"},
                                           {"name": "CLUSTER_SIZE", "value": "3"}]), outdir)
        done = daemon.wait_state(job_id, ["Succeeded", "Failed", "Cancelled"], timeout=240)
        log = daemon.cli("alice", "tlog", str(job_id)).stdout
        assert done["state"] == "Succeeded", (how, done, log)
        shares = [json.loads((outdir / f"ids-{r}.json").read_text()) for r in range(4)]
        assert sorted(i for s in shares for i in s["plain"]) == list(range(3000)), how


def test_a_dataset_that_cannot_be_read_fails_the_job_before_training(
        bed_daemon: Daemon, outdir: Path) -> None:
    """Missing, or another user's private file (the servers read as the job's user):
    the job fails with the path and the reason, and its command never runs."""
    daemon = bed_daemon
    private = outdir / "bobs"
    private.mkdir()
    pq.write_table(pa.table({"id": [1, 2]}), private / "secret.parquet")
    os.chown(private / "secret.parquet", int(_id("bob")), -1)
    (private / "secret.parquet").chmod(0o600)
    marker = outdir / "trained"
    for name, uri, reason in (
            ("cache-missing", f"{outdir}/nope.parquet",
             f"dataset {outdir}/nope.parquet: No such file or directory"),
            ("cache-private", f"file://{private}/secret.parquet",
             f"dataset file {private}/secret.parquet: permission denied")):
        job_id = _submit(daemon, _job(outdir, name, uri, ["touch", str(marker)], nodes=2,
                                      procs=1), outdir)
        done = daemon.wait_state(job_id, ["Succeeded", "Failed", "Cancelled"], timeout=240)
        log = daemon.cli("alice", "tlog", str(job_id)).stdout
        assert done["state"] == "Failed", (done, log)
        assert "data-cache: error: cache server" in log and reason in log, log
        assert not marker.exists()


def test_a_partition_over_the_jobs_memory_is_refused_before_training(
        daemon: Daemon, outdir: Path) -> None:
    _dataset(outdir / "ds")
    marker = outdir / "trained"
    job_id = _submit(daemon, _job(outdir, "cache-mem", f"{outdir}/ds", ["touch", str(marker)],
                                  nodes=1, procs=1,
                                  env=[{"name": "WORKER_MEM", "value": "16Ki"}]), outdir)
    done = daemon.wait_state(job_id, ["Succeeded", "Failed", "Cancelled"], timeout=240)
    log = daemon.cli("alice", "tlog", str(job_id)).stdout
    assert done["state"] == "Failed", (done, log)
    assert "memory limit of 16384 bytes" in log, log
    assert not marker.exists()


def _id(user: str) -> str:
    return subprocess.run(["id", "-u", user], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_a_scheme_the_cache_does_not_read_is_refused(daemon: Daemon, outdir: Path) -> None:
    """Nothing is silently ignored: a scheme the cache does not read is a 400 naming the
    field (Trainer's hf:// would download; the bridge's initializer is its cache)."""
    path = _job(outdir, "cache-hf", "hf://tatsu-lab/alpaca", ["true"])
    res = daemon.cli("alice", "tbatch", "-f", str(path), cwd=outdir)
    assert res.returncode != 0
    assert "spec.initializer.dataset.storageUri" in res.stderr and "'hf'" in res.stderr
