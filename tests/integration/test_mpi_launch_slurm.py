"""mpi_launch against the real 4-node Slurm test bed.

- ``expand`` agrees with ``scontrol show hostnames`` and ``compress`` with ``scontrol show
  hostlist`` (bounded property tests);
- ``sbatch -N2 --ntasks-per-node=2`` as alice runs ``mpi-launch --runtime mpi`` and an
  mpi4py allreduce over 4 ranks on two distinct hosts;
- the ``srun`` prefixes of ``launch_invocation`` start one process per node (torch) and
  one per rank (jax) with the right ranks.

Under ``CI=true`` a missing test bed fails these tests (the ``testbed`` fixture); outside
CI they skip.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpi_launch.hostlist import compress, expand
from mpi_launch.plan import launch_invocation
from tests.integration.bed import REPO, cleanup, shared_dir

pytestmark = pytest.mark.integration

VENV_PYTHON = Path(sys.executable)
SYSTEM_PYTHON = Path("/usr/bin/python3")
USER = "alice"

# Rank 0 prints every rank's line (gathered), so lines from ranks sharing a node cannot
# interleave in the job's output.
ALLREDUCE = """\
import socket
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank(), op=MPI.SUM)
line = f"rank={comm.Get_rank()} size={comm.Get_size()} host={socket.gethostname()} sum={total}"
lines = comm.gather(line, root=0)
if comm.Get_rank() == 0:
    print("\\n".join(lines), flush=True)
"""


def scontrol(*args: str) -> str:
    """``scontrol`` output; it exits 0 even for a bad hostlist, so stderr is checked."""
    done = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 0 and not done.stderr and "Invalid" not in done.stdout, (
        f"scontrol {shlex.join(args)}: {done.stdout}{done.stderr}")
    return done.stdout


# --------------------------------------------------------------------------- hostlists

# Names start with a letter ("-a" would be an option to scontrol).
_text = st.builds(str.__add__, st.sampled_from("abnrx"),
                  st.text(alphabet="abnrx-", max_size=2))
_digits_text = st.builds(str.__add__, st.sampled_from("abnrx"),
                         st.text(alphabet="abnrx-0123456789", max_size=3))
_between = st.text(alphabet="abnrx-", min_size=1, max_size=2)


@st.composite
def slurm_expressions(draw: st.DrawFn) -> str:
    """Expressions in the part of the grammar Slurm 22.05 reads: up to three bracket
    groups per item, text between them, none after the last (Slurm rejects that)."""
    items = []
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        groups = draw(st.integers(min_value=0, max_value=3))
        item = draw(_digits_text if groups == 0 else _text)
        for g in range(groups):
            ranges = []
            for _ in range(draw(st.integers(min_value=1, max_value=3))):
                lo = draw(st.integers(min_value=0, max_value=150))
                hi = lo + draw(st.integers(min_value=0, max_value=6 if groups > 1 else 40))
                width = draw(st.integers(min_value=1, max_value=4))
                ranges.append(f"{lo:0{width}d}" if lo == hi else f"{lo:0{width}d}-{hi}")
            item += "[" + ",".join(ranges) + "]"
            if g < groups - 1:
                item += draw(_between)
        items.append(item)
    return ",".join(items)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=slurm_expressions())
def test_expand_agrees_with_scontrol_show_hostnames(testbed: dict[str, str],
                                                    expr: str) -> None:
    assert expand(expr) == scontrol("show", "hostnames", expr).split()


@st.composite
def sorted_unique_hosts(draw: st.DrawFn) -> list[str]:
    groups = draw(st.lists(st.tuples(_text, st.integers(min_value=1, max_value=3),
                                     st.sets(st.integers(min_value=0, max_value=200),
                                             max_size=30)),
                           min_size=1, max_size=3))
    return sorted({f"{p}{n:0{w}d}" for p, w, numbers in groups for n in numbers}
                  | {p for p, _, numbers in groups if not numbers})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts=sorted_unique_hosts())
def test_compress_agrees_with_scontrol_show_hostlist(testbed: dict[str, str],
                                                     hosts: list[str]) -> None:
    assert compress(hosts) == scontrol("show", "hostlist", ",".join(hosts)).strip()


# --------------------------------------------------------------------------- jobs


def run_as(user: str, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", user, "--", *argv], capture_output=True,
                          text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def launcher(testbed: dict[str, str]) -> tuple[str, str, str]:
    """(python, mpi-launch, environment lines) that ``alice`` can run on the nodes.

    The venv's interpreter when alice may execute it; otherwise (a venv whose python
    links into a private home, as with pyenv under /root) the system python3 with the
    repository and the venv's site-packages on PYTHONPATH: mpi_launch needs nothing
    but the standard library, which is the point of it.
    """
    if subprocess.run([sys.executable, "-c", "import mpi4py"], check=False,
                      capture_output=True).returncode != 0:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "mpi4py"],
                       check=True, timeout=600)
    probe = run_as(USER, [str(VENV_PYTHON), "-c", "import mpi4py, mpi_launch"], 60)
    if probe.returncode == 0:
        return str(VENV_PYTHON), str(VENV_PYTHON.parent / "mpi-launch"), ""
    site = subprocess.run([sys.executable, "-c", "import sysconfig; "
                           "print(sysconfig.get_paths()['purelib'])"], check=True,
                          capture_output=True, text=True).stdout.strip()
    env_line = f"export PYTHONPATH={shlex.quote(f'{REPO}:{site}')}\n"
    probe = run_as(USER, ["env", f"PYTHONPATH={REPO}:{site}", str(SYSTEM_PYTHON), "-c",
                          "import mpi4py, mpi_launch"], 60)
    assert probe.returncode == 0, f"no python alice can use for mpi4py: {probe.stderr}"
    return str(SYSTEM_PYTHON), "", env_line


@pytest.fixture
def jobdir() -> Iterator[Path]:
    path = shared_dir("hpcb-mpil-")
    yield path
    cleanup(path)


def write_mpi_launch(jobdir: Path, python: str, mpi_launch: str, env_line: str) -> str:
    """A path to run mpi-launch by (a wrapper when it runs as ``python -m``)."""
    if mpi_launch:
        return mpi_launch
    wrapper = jobdir / "mpi-launch"
    wrapper.write_text(f"#!/bin/sh\n{env_line}exec {python} -m mpi_launch \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def sbatch(jobdir: Path, script: str, *args: str) -> str:
    path = jobdir / "job.sh"
    path.write_text(script)
    path.chmod(0o755)
    out = jobdir / "slurm-%j.out"
    res = run_as(USER, ["sbatch", "--wait", "--parsable", "-p", "debug", "--time=00:05:00",
                        "-o", str(out), *args, str(path)], timeout=300)
    job_id = res.stdout.strip().split(";")[0]
    log = jobdir / f"slurm-{job_id}.out"
    text = log.read_text() if job_id and log.exists() else ""
    assert res.returncode == 0, f"sbatch failed ({res.returncode}): {res.stderr}\n{text}"
    return text


def test_mpi_allreduce_over_two_nodes(launcher: tuple[str, str, str], jobdir: Path) -> None:
    python, mpi_launch, env_line = launcher
    program = jobdir / "allreduce.py"
    program.write_text(ALLREDUCE)
    ml = write_mpi_launch(jobdir, python, mpi_launch, env_line)
    prefix = launch_invocation("mpi", "openmpi", 2, None, executable=ml)
    # The hostfile goes to the job's folder (removed with it), not $TMPDIR/mpi-launch-*.
    hostfiles = jobdir / "hostfiles"
    prefix += ["--hostfile-dir", str(hostfiles)]
    script = (f"#!/bin/bash\n{env_line}"
              f"{shlex.join(prefix)} --dry-run -- {python} {program}\n"
              f"{shlex.join(prefix)} -- {python} {program}\n")
    log = sbatch(jobdir, script, "-N2", "--ntasks-per-node=2")
    ranks = [dict(field.split("=", 1) for field in line.split())
             for line in log.splitlines() if line.startswith("rank=")]
    assert sorted(int(r["rank"]) for r in ranks) == [0, 1, 2, 3], log
    assert {r["size"] for r in ranks} == {"4"}, log
    assert {r["sum"] for r in ranks} == {"6"}, log
    by_rank = {int(r["rank"]): r["host"] for r in ranks}
    assert by_rank[0] == by_rank[1] != by_rank[2] == by_rank[3], log  # 2 distinct hosts, block
    assert all(h.startswith("node") for h in by_rank.values()), log
    # The dry run printed the hostfile that was then written for mpirun.
    written = (hostfiles / "hostfile.openmpi").read_text()
    assert written == f"{by_rank[0]} slots=2\n{by_rank[2]} slots=2\n"
    assert f"# hostfile: {hostfiles}/hostfile.openmpi\n{written}" in log, log


def test_srun_prefixes_start_per_node_and_per_rank(launcher: tuple[str, str, str],
                                                   jobdir: Path) -> None:
    python, mpi_launch, env_line = launcher
    ml = write_mpi_launch(jobdir, python, mpi_launch, env_line)
    torch = launch_invocation("torch", None, 2, 2, executable=ml)
    jax = launch_invocation("jax", None, 2, 2, executable=ml)
    show = ("import os, socket; e = os.environ; print('jax', socket.gethostname(), "
            "e['JAX_PROCESS_ID'], e['JAX_NUM_PROCESSES'], e['JAX_COORDINATOR_ADDRESS'])")
    script = (f"#!/bin/bash\n{env_line}"
              f"{shlex.join(torch)} --dry-run -- train.py | grep -E '^(PET_NODE_RANK|# world)'\n"
              f"{shlex.join(jax)} -- {python} -c {shlex.quote(show)}\n")
    log = sbatch(jobdir, script, "-N2", "--ntasks-per-node=2")
    assert sorted(line for line in log.splitlines() if line.startswith("PET_NODE_RANK")) == [
        "PET_NODE_RANK=0", "PET_NODE_RANK=1"], log
    jax_lines = sorted(line.split() for line in log.splitlines() if line.startswith("jax "))
    assert len(jax_lines) == 4, log
    assert sorted(int(f[2]) for f in jax_lines) == [0, 1, 2, 3], log
    assert {f[3] for f in jax_lines} == {"4"}, log
    assert len({f[4] for f in jax_lines}) == 1 and jax_lines[0][4].startswith("node"), log
    hosts = {int(f[2]): f[1] for f in jax_lines}
    assert hosts[0] == hosts[1] != hosts[2] == hosts[3], log
