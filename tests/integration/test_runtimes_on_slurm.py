"""Distributed runtimes through the daemon on the real Slurm: mpi_launch in the job.

A TrainJob for ``mpi-distributed`` / ``torch-distributed`` is turned by the Slurm
back end into a batch script that starts ``mpi-launch``, which reads the Slurm
allocation, writes the hostfile, sets the rank environment and execs the launcher.
Tests taking the ``bed_daemon`` fixture run the same TrainJob on the Flux bed too (its R
instead of Slurm's variables).
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.bed import Daemon, trainjob_doc

pytestmark = pytest.mark.integration

PYTHON = str(Path(sys.executable))
BIN = Path(sys.executable).parent

# Each rank writes its line with ONE write(2): ranks on a node share the output file, and
# print() may split text and newline into two writes (unbuffered under torchrun) that
# interleave with another rank's.
ALLREDUCE = """
import os, socket
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.rank)
os.write(1, f"rank={comm.rank} size={comm.size} sum={total} host={socket.gethostname()}\\n"
         .encode())
"""

DDP = """
import os, socket
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank())])
dist.all_reduce(t)
os.write(1, (f"rank={os.environ['RANK']} world={os.environ['WORLD_SIZE']} "
             f"local={os.environ['LOCAL_RANK']} node={os.environ.get('PET_NODE_RANK')} "
             f"sum={int(t.item())} host={socket.gethostname()}\\n").encode())
dist.destroy_process_group()
"""


def trainjob(outdir: Path, name: str, runtime: str, command: list[str], nodes: int,
             procs: int) -> Path:
    path = outdir / f"{name}.json"
    path.write_text(json.dumps(trainjob_doc(outdir, name, runtime, command, nodes=nodes,
                                            procs=procs)))
    return path


def run(d: Daemon, path: Path, outdir: Path) -> tuple[dict[str, object], list[str]]:
    res = d.cli("alice", "tbatch", "--parsable", "-f", str(path), cwd=outdir)
    assert res.returncode == 0, res.stderr
    job_id = int(res.stdout)
    done = d.wait_state(job_id, ["Succeeded", "Failed", "Cancelled"], timeout=240)
    log = d.cli("alice", "tlog", str(job_id)).stdout
    assert done["state"] == "Succeeded", (done, log)
    return done, log.splitlines()


def test_mpi_allreduce_2_nodes_x_2_ranks_open_mpi(bed_daemon: Daemon, outdir: Path) -> None:
    """On Flux, Flux starts the four ranks (they bootstrap through its PMI)."""
    daemon = bed_daemon
    prog = outdir / "allreduce.py"
    prog.write_text(ALLREDUCE)
    path = trainjob(outdir, "mpi-allreduce", "mpi-distributed", [PYTHON, str(prog)], 2, 2)
    done, lines = run(daemon, path, outdir)
    ranks = [dict(kv.split("=") for kv in line.split()) for line in lines
             if line.startswith("rank=")]
    assert sorted(int(r["rank"]) for r in ranks) == [0, 1, 2, 3], lines
    assert {r["size"] for r in ranks} == {"4"} and {r["sum"] for r in ranks} == {"6"}
    hosts = Counter(r["host"] for r in ranks)
    assert sorted(hosts.values()) == [2, 2] and set(hosts) == set(done["nodes"]), hosts


@pytest.mark.parametrize("launcher", ["torchrun", "python"])
def test_torch_gloo_allreduce_2_nodes_x_2_procs(bed_daemon: Daemon, outdir: Path,
                                                launcher: str) -> None:
    daemon = bed_daemon
    prog = outdir / "ddp.py"
    prog.write_text(DDP)
    # "torchrun train.py" as Kubeflow Trainer users write it (torchrun reads PET_*),
    # or "python train.py", which mpi-launch runs under torch.distributed.run.
    command = [str(BIN / "torchrun"), str(prog)] if launcher == "torchrun" else [
        PYTHON, str(prog)]
    path = trainjob(outdir, f"ddp-{launcher}", "torch-distributed", command, 2, 2)
    done, lines = run(daemon, path, outdir)
    ranks = [dict(kv.split("=") for kv in line.split()) for line in lines
             if re.match(r"rank=\d", line)]
    assert sorted(int(r["rank"]) for r in ranks) == [0, 1, 2, 3], lines
    assert {r["world"] for r in ranks} == {"4"} and {r["sum"] for r in ranks} == {"6"}
    assert sorted(r["local"] for r in ranks) == ["0", "0", "1", "1"]
    by_node = {r["host"]: {r2["node"] for r2 in ranks if r2["host"] == r["host"]}
               for r in ranks}
    assert len(by_node) == 2 and all(len(v) == 1 for v in by_node.values()), by_node
    assert set(by_node) == set(done["nodes"])


def test_tbatch_scripts_with_distributed_runtimes(daemon: Daemon, outdir: Path) -> None:
    """``tbatch --runtime R script.sh``: an ordinary #SBATCH script that calls mpirun
    (MPI) or torchrun (torch) itself gets the hostfile / PET_* variables from mpi-launch."""
    (outdir / "allreduce.py").write_text(ALLREDUCE)
    (outdir / "ddp.py").write_text(DDP)
    mpi = outdir / "mpi.sh"
    mpi.write_text("#!/bin/bash\n#SBATCH -N 2 --ntasks-per-node=2\n#SBATCH -o mpi-%j.out\n"
                   f'echo "hostfile: $(cat "$OMPI_MCA_orte_default_hostfile" | tr "\\n" ,)"\n'
                   f"mpirun {PYTHON} allreduce.py\n")
    torch = outdir / "torch.sh"
    torch.write_text("#!/bin/bash\n#SBATCH -N 2 --ntasks-per-node=2\n#SBATCH -o torch-%j.out\n"
                     f'[ "$PET_NODE_RANK" = 0 ] && echo "args: $*"\n'
                     f"exec {BIN / 'torchrun'} ddp.py\n")
    ids = {}
    for runtime, script in (("mpi-distributed", mpi), ("torch-distributed", torch)):
        res = daemon.cli("alice", "tbatch", "--parsable", "--runtime", runtime, str(script),
                         "it's", "$(x)", cwd=outdir)
        assert res.returncode == 0, res.stderr
        ids[runtime] = int(res.stdout)
    for runtime, job_id in ids.items():
        done = daemon.wait_state(job_id, ["Succeeded", "Failed"], timeout=240)
        log = daemon.cli("alice", "tlog", str(job_id)).stdout
        assert done["state"] == "Succeeded", (done, log)
        lines = log.splitlines()
        if runtime == "mpi-distributed":
            assert any(line.startswith("hostfile: ") and "slots=2" in line for line in lines)
            sums = [line for line in lines if line.startswith("rank=")]
            assert len(sums) == 4 and all("size=4 sum=6" in line for line in sums), log
        else:
            assert "args: it's $(x)" in lines, log
            ranks = [line for line in lines if re.match(r"rank=\d", line)]
            assert len(ranks) == 4 and all("world=4" in r and "sum=6" in r for r in ranks)




def test_mpi_allreduce_2_nodes_x_2_ranks_mpich(testbed: dict[str, str], outdir: Path) -> None:
    """The same allreduce with MPICH (PyPI wheel in .venv-mpich): an admin's runtime file
    says MPICH; mpi-launch writes the Hydra hostfile and runs that venv's mpiexec."""
    from tests.integration.bed import REPO, cleanup, fresh_daemon_dir
    from tests.integration.conftest import rest_settings
    from tests.requirements import require

    mpich_python = REPO / ".venv-mpich" / "bin" / "python"
    require(mpich_python.exists(), "no .venv-mpich: run bash scripts/setup-python.sh")
    workdir = fresh_daemon_dir("mpich")
    runtime = REPO / "examples" / "runtimes" / "mpich-distributed.yaml"
    d = Daemon(workdir, rest_settings(testbed), runtime_paths=[str(runtime)])
    d.start()
    try:
        prog = outdir / "allreduce.py"
        prog.write_text(ALLREDUCE.replace(
            'os.write(1, f"rank=',
            'os.write(1, (MPI.Get_library_version().split()[0] + " ").encode() + f"rank='))
        path = trainjob(outdir, "mpich-allreduce", "mpich-distributed",
                        [str(mpich_python), str(prog)], 2, 2)
        done, lines = run(d, path, outdir)
    finally:
        d.stop()
        cleanup(workdir)
    ranks = [line for line in lines if line.startswith("MPICH rank=")]
    assert len(ranks) == 4, lines
    assert all("size=4 sum=6" in line for line in ranks), lines
    hosts = Counter(line.rsplit("host=", 1)[1] for line in ranks)
    assert sorted(hosts.values()) == [2, 2] and set(hosts) == set(done["nodes"]), hosts
