"""Several Slurm clusters behind one daemon, and MPI and torch on the newer releases.

One daemon holds two back ends of kind slurm at once: ``slurm`` (Slurm 22.05 on the
host, REST v0.0.38) and ``slurm2411`` (Slurm 24.11 in its chroot, REST version
negotiated: v0.0.42). Jobs are routed with sbatch's own ``-M/--clusters``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.bed import Daemon, cleanup, fresh_daemon_dir, trainjob_doc
from tests.integration.conftest import rest_settings
from tests.integration.conftest_slurm import Cluster, cluster_for
from tests.integration.test_runtimes_on_slurm import DDP

pytestmark = pytest.mark.integration

ALLREDUCE = """
import os, socket
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.rank)
os.write(1, f"rank={comm.rank} size={comm.size} sum={total} host={socket.gethostname()}\\n"
         .encode())
"""


def backend_toml(name: str, cluster: Cluster) -> str:
    lines = [f"[backends.{name}]", 'kind = "slurm"']
    lines += [f"{k} = {json.dumps(v)}" for k, v in cluster.settings("rest").items()]
    return "\n".join(lines) + "\n"


@pytest.fixture
def two_clusters(testbed: dict[str, str]) -> Iterator[tuple[Daemon, Cluster]]:
    """A daemon with the 22.05 cluster (default back end ``slurm``) and the 24.11 one."""
    newer = cluster_for("24.11")
    workdir = fresh_daemon_dir("clusters")
    d = Daemon(workdir, rest_settings(testbed), extra_toml=backend_toml("slurm2411", newer))
    d.start()
    yield d, newer
    d.stop()
    cleanup(workdir)


def tbatch(d: Daemon, outdir: Path, *args: str) -> int:
    res = d.cli("alice", "tbatch", "--parsable", *args, cwd=outdir)
    assert res.returncode == 0, res.stderr
    return int(res.stdout)


def test_one_daemon_runs_jobs_on_two_clusters_at_once(
        two_clusters: tuple[Daemon, Cluster], outdir: Path) -> None:
    d, newer = two_clusters
    # Both jobs wait for a file, so both are running on their clusters at one time.
    go = outdir / "go"
    wait = f"while [ ! -e {go} ]; do sleep 0.2; done; hostname; id -un"
    old_id = tbatch(d, outdir, "-N", "2", "--wrap", wait)
    new_id = tbatch(d, outdir, "-M", "slurm2411", "-N", "2", "--wrap", wait)
    assert old_id != new_id
    old = d.wait_state(old_id, ["Running"])
    new = d.wait_state(new_id, ["Running"])
    assert (old["backend"], new["backend"]) == ("slurm", "slurm2411")
    assert all(re.fullmatch(r"node[1-4]", n) for n in old["nodes"]), old
    assert set(new["nodes"]) <= set(newer.nodes) and len(new["nodes"]) == 2, new
    q = d.cli("alice", "tqueue", "-M", "all", cwd=outdir)
    assert q.returncode == 0, q.stderr
    assert re.search(rf"^\s*slurm\s+{old_id}\s+debug\b", q.stdout, re.M), q.stdout
    assert re.search(rf"^\s*slurm2411\s+{new_id}\s+debug\b", q.stdout, re.M), q.stdout
    only_new = d.cli("alice", "tqueue", "-h", "-M", "slurm2411", cwd=outdir).stdout
    assert [line.split()[1] for line in only_new.splitlines()] == [str(new_id)]
    go.touch()
    for job_id, nodes in ((old_id, old["nodes"]), (new_id, new["nodes"])):
        done = d.wait_state(job_id, ["Succeeded", "Failed", "Cancelled"])
        assert done["state"] == "Succeeded", done
        log = d.cli("alice", "tlog", str(job_id)).stdout.split()
        assert log[0] in nodes and log[1] == "alice", log


def test_an_unknown_cluster_is_refused(two_clusters: tuple[Daemon, Cluster],
                                       outdir: Path) -> None:
    d, _ = two_clusters
    res = d.cli("alice", "tbatch", "-M", "nosuch", "--wrap", "true", cwd=outdir)
    assert res.returncode != 0 and "nosuch" in res.stderr, res


@pytest.mark.parametrize("release", ["24.11"])
def test_mpi_allreduce_on_a_newer_release(release: str, testbed: dict[str, str],
                                          outdir: Path) -> None:
    """2 nodes x 2 ranks of mpi4py through mpi-launch and Open MPI 5 in the chroot.
    (26.05 runs MPI with MPICH, test_mpich_allreduce_on_2605: its Debian Slurm has no
    mpi/pmix plugin and Open MPI 6.0.0rc2 finds no TCP route between two hosts sharing
    127.0.0.1; see testbed/README.md.)"""
    cluster = cluster_for(release)
    workdir = fresh_daemon_dir(f"mpi-{release}")
    d = Daemon(workdir, cluster.settings("rest"))
    d.start()
    try:
        prog = outdir / "allreduce.py"
        prog.write_text(ALLREDUCE)
        path = outdir / "mpi.json"
        path.write_text(json.dumps(trainjob_doc(outdir, "mpi-allreduce", "mpi-distributed",
                                                ["python3", str(prog)], nodes=2, procs=2)))
        job_id = tbatch(d, outdir, "-f", str(path))
        done = d.wait_state(job_id, ["Succeeded", "Failed", "Cancelled"], timeout=240)
        lines = d.cli("alice", "tlog", str(job_id)).stdout.splitlines()
        assert done["state"] == "Succeeded", (done, lines)
    finally:
        d.stop()
        cleanup(workdir)
    ranks = [dict(kv.split("=") for kv in line.split()) for line in lines
             if line.startswith("rank=")]
    assert sorted(int(r["rank"]) for r in ranks) == [0, 1, 2, 3], lines
    assert {r["size"] for r in ranks} == {"4"} and {r["sum"] for r in ranks} == {"6"}
    hosts = Counter(r["host"] for r in ranks)
    assert sorted(hosts.values()) == [2, 2] and set(hosts) == set(done["nodes"]), hosts
    assert set(hosts) <= set(cluster.nodes)


@pytest.mark.parametrize("release", ["24.11", "26.05"])
def test_torch_gloo_on_a_newer_release(release: str, testbed: dict[str, str],
                                       outdir: Path) -> None:
    """2 nodes x 2 ranks of torch.distributed (gloo) with the chroot's own torch
    (Debian's CPU build: 2.6 on trixie, 2.14 on sid), each rank started by
    ``srun mpi-launch --runtime torch --direct`` from an ordinary batch script.

    Not through torchrun: Debian builds torch without libuv, and torchrun's
    rendezvous store asks for libuv whatever USE_LIBUV says (testbed/README.md);
    ``init_process_group`` reads USE_LIBUV=0 and takes the plain TCP store."""
    cluster = cluster_for(release)
    workdir = fresh_daemon_dir(f"torch-{release}")
    d = Daemon(workdir, cluster.settings("rest"))
    d.start()
    try:
        (outdir / "ddp.py").write_text(DDP)
        script = outdir / "ddp.sh"
        script.write_text("#!/bin/bash\n#SBATCH -N 2 --ntasks-per-node=2 -t 5\n"
                          "#SBATCH -o ddp-%j.out\nexport USE_LIBUV=0\n"
                          f"srun {cluster.facts['SLURM_MPI_LAUNCH']} --runtime torch --direct "
                          "-- python3 ddp.py\n")
        job_id = tbatch(d, outdir, str(script))
        try:
            done = d.wait_state(job_id, ["Succeeded", "Failed", "Cancelled"], timeout=120)
        finally:  # a job stuck in rendezvous must not hold two nodes for other tests
            d.cli("alice", "tcancel", str(job_id))
        lines = d.cli("alice", "tlog", str(job_id)).stdout.splitlines()
        assert done["state"] == "Succeeded", "\n".join(lines)
    finally:
        d.stop()
        cleanup(workdir)
    ranks = [dict(kv.split("=") for kv in line.split()) for line in lines
             if re.match(r"rank=\d", line)]
    assert sorted(int(r["rank"]) for r in ranks) == [0, 1, 2, 3], "\n".join(lines)
    assert {r["world"] for r in ranks} == {"4"} and {r["sum"] for r in ranks} == {"6"}
    assert sorted(r["local"] for r in ranks) == ["0", "0", "1", "1"]
    hosts = Counter(r["host"] for r in ranks)
    assert sorted(hosts.values()) == [2, 2] and set(hosts) == set(done["nodes"]), hosts
    assert set(hosts) <= set(cluster.nodes)


def test_mpich_allreduce_on_2605(testbed: dict[str, str], outdir: Path) -> None:
    """2 nodes x 2 ranks of mpi4py with MPICH (PyPI's wheels in the chroot's
    /opt/mpich, testbed/slurm-versions.sh) through the mpich-distributed runtime: on
    26.05 Debian's Open MPI (6.0.0rc2) finds no route between two nodes that share
    127.0.0.1 and its Slurm has no mpi/pmix (testbed/README.md)."""
    from tests.integration.bed import REPO

    cluster = cluster_for("26.05")
    mpich_python = cluster.facts.get("SLURM_MPICH_PYTHON", "")
    assert mpich_python, f"the 26.05 bed has no MPICH: {cluster.facts}"
    workdir = fresh_daemon_dir("mpich-2605")
    runtime = REPO / "examples" / "runtimes" / "mpich-distributed.yaml"
    d = Daemon(workdir, cluster.settings("rest"), runtime_paths=[str(runtime)])
    d.start()
    try:
        prog = outdir / "allreduce.py"
        prog.write_text(ALLREDUCE.replace(
            'os.write(1, f"rank=',
            'os.write(1, (MPI.Get_library_version().split()[0] + " ").encode() + f"rank='))
        path = outdir / "mpich.json"
        path.write_text(json.dumps(trainjob_doc(outdir, "mpich-2605", "mpich-distributed",
                                                [mpich_python, str(prog)], nodes=2, procs=2)))
        job_id = tbatch(d, outdir, "-f", str(path))
        try:
            done = d.wait_state(job_id, ["Succeeded", "Failed", "Cancelled"], timeout=120)
        finally:
            d.cli("alice", "tcancel", str(job_id))
        lines = d.cli("alice", "tlog", str(job_id)).stdout.splitlines()
        assert done["state"] == "Succeeded", "\n".join(lines)
    finally:
        d.stop()
        cleanup(workdir)
    ranks = [line for line in lines if line.startswith("MPICH rank=")]
    assert len(ranks) == 4, lines
    assert all("size=4 sum=6" in line for line in ranks), lines
    hosts = Counter(line.rsplit("host=", 1)[1] for line in ranks)
    assert sorted(hosts.values()) == [2, 2] and set(hosts) == set(done["nodes"]), hosts
    assert set(hosts) <= set(cluster.nodes)
