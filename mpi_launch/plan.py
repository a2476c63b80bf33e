"""What to run, decided without side effects: :func:`plan_launch` and :func:`launch_invocation`.

Who starts ``mpi-launch`` and what it execs (``launch_invocation`` returns the prefix a
Slurm batch script runs before ``-- COMMAND ARGS``):

- ``mpi``: once, from the batch script (which runs on node rank 0). There it execs
  ``mpirun --hostfile F -np TOTAL`` (Open MPI), ``mpiexec -f F -n TOTAL`` (MPICH) or
  ``mpiexec -f F -n TOTAL -ppn N`` (Intel; ``-machinefile`` when counts differ), or
  with ``--launcher srun`` ``srun --mpi=pmix`` (Open MPI) / ``--mpi=pmi2`` (MPICH,
  Intel). Started on other nodes it exits 0 and runs nothing.
- ``torch``: once per node, ``srun --nodes=N --ntasks=N --ntasks-per-node=1 ...``;
  execs ``torchrun --nnodes=N --nproc-per-node=P --node-rank=R --master-addr=A
  --master-port=M COMMAND``.
- ``torch --direct``, ``jax``, ``xgboost``, ``plain``: once per rank, ``srun
  [--ntasks-per-node=P] ...``; sets the rank's variables and execs COMMAND.

``--launcher auto`` means ``mpirun``/``mpiexec``: it works in every world (Slurm, Flux,
JobSet, local). ``srun`` is there for Slurm sites whose MPI is built for its PMI.
"""

from __future__ import annotations

import os.path
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mpi_launch.allocation import Allocation
from mpi_launch.errors import MpiLaunchError
from mpi_launch.hostfile import hostfile_env, render_hostfile, uniform_slots
from mpi_launch.hostlist import compress
from mpi_launch.rankenv import (
    common_env,
    jax_env,
    master_port,
    torch_node_env,
    torch_rank_env,
    xgboost_env,
)

__all__ = [
    "LAUNCHERS",
    "MPIS",
    "PER_NODE",
    "PER_PROCESS",
    "RUNTIMES",
    "LaunchOptions",
    "LaunchPlan",
    "PlanError",
    "describe",
    "launch_invocation",
    "plan_launch",
    "torch_argv",
]

RUNTIMES = ("plain", "torch", "mpi", "jax", "xgboost")
MPIS = ("openmpi", "mpich", "intel")
LAUNCHERS = ("auto", "mpirun", "srun", "none")
#: Programs that start ranks themselves: a command beginning with one of these runs as
#: it is (with the hostfile and variables set), as a Kubeflow MPI launcher runs it.
USER_LAUNCHERS = frozenset({"mpirun", "mpiexec", "mpiexec.hydra", "orterun", "prterun",
                            "deepspeed", "horovodrun"})
PER_NODE = ("torch",)
"""Runtimes started once per node (``torch`` without ``--direct``)."""
PER_PROCESS = ("plain", "jax", "xgboost")
"""Runtimes started once per rank (and ``torch --direct``)."""

_SRUN_MPI_PLUGIN = {"openmpi": "pmix", "mpich": "pmi2", "intel": "pmi2"}
_DEFAULT_MPIRUN = {"openmpi": "mpirun", "mpich": "mpiexec", "intel": "mpiexec"}
_PYTHON = re.compile(r"python[0-9.]*")
_PYTHON_FLAGS_WITH_VALUE = ("-W", "-X", "-Q")


class PlanError(MpiLaunchError, ValueError):
    """Options that cannot work together or with this allocation."""


@dataclass(frozen=True)
class LaunchOptions:
    """The CLI's choices. ``nproc_per_node`` replaces every host's slots; ``mpirun``
    overrides the MPI launcher program's name."""

    runtime: str
    command: tuple[str, ...]
    mpi: str = "openmpi"
    launcher: str = "auto"
    direct: bool = False
    nproc_per_node: int | None = None
    master_port: int | None = None
    mpirun: str | None = None

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise PlanError(f"--runtime {self.runtime!r}: one of {', '.join(RUNTIMES)}")
        if self.mpi not in MPIS:
            raise PlanError(f"--mpi {self.mpi!r}: one of {', '.join(MPIS)}")
        if self.launcher not in LAUNCHERS:
            raise PlanError(f"--launcher {self.launcher!r}: one of {', '.join(LAUNCHERS)}")
        if not self.command:
            raise PlanError("no command: put it after '--'")
        if self.direct and self.runtime != "torch":
            raise PlanError("--direct is for --runtime torch")
        if self.nproc_per_node is not None and self.nproc_per_node < 1:
            raise PlanError(f"--nproc-per-node {self.nproc_per_node}: must be >= 1")
        if self.master_port is not None and not 1 <= self.master_port <= 65535:
            raise PlanError(f"--master-port {self.master_port}: must be 1-65535")


@dataclass(frozen=True)
class LaunchPlan:
    """What to do on this node: write ``hostfile_text`` to ``hostfile_path`` (if any),
    add ``env`` to the environment, exec ``argv`` (empty: nothing to run, see ``note``)."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    hostfile_path: str | None = None
    hostfile_text: str | None = None
    note: str = ""


def plan_launch(alloc: Allocation, opts: LaunchOptions, hostfile_dir: str) -> LaunchPlan:
    """Decide the hostfile, environment and argv for ``opts.runtime`` on this node.

    torchrun's processes per node: ``nproc_per_node``, else this node's GPUs, else its
    slots (under ``srun --ntasks-per-node=1`` that is 1: pass ``--nproc-per-node``).
    """
    if opts.nproc_per_node is not None:
        alloc = alloc.with_slots(opts.nproc_per_node)
    port = opts.master_port if opts.master_port is not None else master_port(alloc)
    env = common_env(alloc)
    if opts.runtime == "mpi":
        return _plan_mpi(alloc, opts, env, hostfile_dir)
    if opts.runtime == "torch" and not opts.direct:
        this = alloc.this_host
        nproc = opts.nproc_per_node or this.gpus or this.slots
        env.update(torch_node_env(alloc, nproc, port))
        if opts.launcher == "none":
            # Once per node with PET_* set: the command (a batch script) runs torchrun.
            return LaunchPlan(argv=tuple(opts.command), env=env)
        argv = torch_argv(opts.command, nnodes=len(alloc.hosts), nproc_per_node=nproc,
                          node_rank=alloc.node_rank, master_addr=alloc.hosts[0].name,
                          port=port)
        return LaunchPlan(argv=tuple(argv), env=env)
    if opts.runtime == "plain":
        return LaunchPlan(argv=tuple(opts.command), env=env)
    rank, local_rank = _process_rank(alloc, opts.runtime)
    if opts.runtime == "torch":
        env.update(torch_rank_env(alloc, rank, local_rank, port))
    elif opts.runtime == "jax":
        env.update(jax_env(alloc, rank, port))
    elif opts.runtime == "xgboost":
        env.update(xgboost_env(alloc, rank, port))
    return LaunchPlan(argv=tuple(opts.command), env=env)


def _process_rank(alloc: Allocation, runtime: str) -> tuple[int, int]:
    """(global rank, local rank) of this process for the per-process runtimes."""
    if alloc.proc_rank is not None:
        if alloc.proc_rank >= alloc.total_slots:
            raise PlanError(f"rank {alloc.proc_rank} outside the {alloc.total_slots} slots of "
                            f"the allocation (does --nproc-per-node match the launcher?)")
        first = sum(h.slots for h in alloc.hosts[:alloc.node_rank])
        local = alloc.local_rank if alloc.local_rank is not None else alloc.proc_rank - first
        return alloc.proc_rank, local
    if alloc.uniform_slots == 1:
        return alloc.node_rank, 0
    raise PlanError(f"--runtime {runtime} runs one process per rank, and nothing tells this "
                    f"process its rank: start it with srun or flux run (one task per slot) "
                    f"or with --nproc-per-node 1")


def _plan_mpi(alloc: Allocation, opts: LaunchOptions, env: dict[str, str],
              hostfile_dir: str) -> LaunchPlan:
    if alloc.node_rank != 0:
        return LaunchPlan(argv=(), env=env,
                          note=f"node rank {alloc.node_rank}: the MPI launcher runs on node "
                               f"rank 0 only")
    total = str(alloc.total_slots)
    per_host = uniform_slots(alloc.hosts)
    if opts.launcher == "srun":
        if alloc.world != "slurm":
            raise PlanError(f"--launcher srun needs a Slurm allocation, not {alloc.world}")
        argv = ["srun", f"--mpi={_SRUN_MPI_PLUGIN[opts.mpi]}", f"--nodes={len(alloc.hosts)}",
                f"--ntasks={total}"]
        if per_host is not None:
            argv.append(f"--ntasks-per-node={per_host}")
        argv += ["--kill-on-bad-exit=1", *opts.command]
        return LaunchPlan(argv=tuple(argv), env=env)
    path = os.path.join(hostfile_dir, f"hostfile.{opts.mpi}")
    text = render_hostfile(opts.mpi, alloc.hosts)
    env.update(hostfile_env(opts.mpi, path, alloc.hosts))
    if opts.mpi == "openmpi" and alloc.world == "flux" and "OMPI_MCA_pmix" not in os.environ:
        # Open MPI 4.1 picks its pmix/flux component whenever FLUX_JOB_ID is set, and
        # mpirun then segfaults: mpirun and the ranks it starts use Open MPI's own PMIx.
        # (Not for ranks Flux starts, --runtime plain: they need that component.)
        env["OMPI_MCA_pmix"] = "^flux"
    if opts.launcher == "none" or (opts.launcher == "auto"
                                   and os.path.basename(opts.command[0]) in USER_LAUNCHERS):
        # The command starts the ranks itself (a batch script calling mpirun, or
        # "mpirun ..." / "deepspeed ..." as the TrainJob command): hostfile + env only.
        return LaunchPlan(argv=tuple(opts.command), env=env, hostfile_path=path,
                          hostfile_text=text)
    program = opts.mpirun or default_mpirun(opts.mpi, opts.command[0])
    if opts.mpi in ("mpich", "intel") and alloc.world == "slurm":
        # Hydra starts its proxies with srun inside an allocation (not ssh, which would
        # silently crowd every rank onto this host where node names resolve locally).
        # A choice the user made in the job's environment wins.
        if "HYDRA_LAUNCHER" not in os.environ:
            env["HYDRA_LAUNCHER"] = "slurm"
        if opts.mpi == "intel" and "I_MPI_HYDRA_BOOTSTRAP" not in os.environ:
            env["I_MPI_HYDRA_BOOTSTRAP"] = "slurm"
    if opts.mpi == "openmpi":
        argv = [program, "--hostfile", path, "-np", total]
    elif opts.mpi == "mpich":
        argv = [program, "-f", path, "-n", total]
    elif per_host is not None:
        argv = [program, "-f", path, "-n", total, "-ppn", str(per_host)]
    else:
        argv = [program, "-machinefile", path, "-n", total]
    return LaunchPlan(argv=(*argv, *opts.command), env=env, hostfile_path=path,
                      hostfile_text=text)


def default_mpirun(mpi: str, program: str) -> str:
    """The launcher for ``mpi`` when ``--mpirun`` is not given: for MPICH and Intel MPI,
    the ``mpiexec`` beside an absolute ``program`` (a venv or module tree that ships its
    MPI, like the ``mpich`` wheel) if there is one, since the ``mpiexec`` on PATH is
    often Open MPI's; else the flavour's usual name on PATH."""
    if mpi in ("mpich", "intel") and os.path.isabs(program):
        beside = os.path.join(os.path.dirname(program), "mpiexec")
        if os.path.isfile(beside) and os.access(beside, os.X_OK):
            return beside
    return _DEFAULT_MPIRUN[mpi]


def torch_argv(command: Sequence[str], *, nnodes: int, nproc_per_node: int, node_rank: int,
               master_addr: str, port: int) -> list[str]:
    """The torchrun command line for one node.

    A command that is already ``torchrun ...`` (or ``python -m torch.distributed.run``)
    runs unchanged: torchrun reads its ``--nnodes``/``--node-rank``/``--master-*``
    defaults from the ``PET_*`` variables set beside it, exactly as under Kubeflow
    Trainer. ``script.py ARGS`` and ``-m module ARGS`` go to ``torchrun`` as they are;
    ``python [FLAGS] script.py|-m module ARGS`` becomes ``python [FLAGS] -m
    torch.distributed.run ...`` (the same interpreter); any other program runs under
    ``torchrun --no-python``.
    """
    opts = [f"--nnodes={nnodes}", f"--nproc-per-node={nproc_per_node}",
            f"--node-rank={node_rank}", f"--master-addr={master_addr}",
            f"--master-port={port}"]
    first = command[0]
    if os.path.basename(first) == "torchrun" or (
            _PYTHON.fullmatch(os.path.basename(first))
            and list(command[1:3]) == ["-m", "torch.distributed.run"]):
        return list(command)
    if first == "-m" or first.endswith(".py"):
        return ["torchrun", *opts, *command]
    if _PYTHON.fullmatch(os.path.basename(first)):
        flags: list[str] = []
        i = 1
        while i < len(command) and command[i].startswith("-") and command[i] not in (
                "-m", "-c", "-"):
            flags.append(command[i])
            if command[i] in _PYTHON_FLAGS_WITH_VALUE and i + 1 < len(command):
                flags.append(command[i + 1])
                i += 1
            i += 1
        rest = command[i:]
        if rest and (rest[0] == "-m" or not rest[0].startswith("-")):
            return [first, *flags, "-m", "torch.distributed.run", *opts, *rest]
    return ["torchrun", *opts, "--no-python", *command]


def launch_invocation(runtime: str, mpi: str | None, nodes: int, nproc_per_node: int | None,
                      *, executable: str = "mpi-launch",
                      launcher: str | None = None) -> list[str]:
    """The argv prefix a Slurm batch script runs before ``-- COMMAND ARGS``.

    ``mpi``: ``mpi-launch`` once (the batch script runs on the first node), it starts
    every rank itself. ``torch``: one ``mpi-launch`` per node through ``srun --nodes=N
    --ntasks=N --ntasks-per-node=1`` (``--ntasks`` is needed: srun inherits
    ``SLURM_NTASKS`` from the job and otherwise ignores ``--ntasks-per-node``), with
    ``--cpu-bind=none`` so torchrun's workers may use every CPU of the node.
    ``jax``/``xgboost``/``plain``: one per rank through ``srun`` (``P`` per node when
    ``nproc_per_node`` is given, else the job's own task layout).
    ``launcher`` adds ``--launcher`` (``none``: the command starts the ranks itself).
    Every element is one literal argument (quote it when writing a shell script).
    """
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; one of {', '.join(RUNTIMES)}")
    if mpi is not None and mpi not in MPIS:
        raise ValueError(f"unknown MPI {mpi!r}; one of {', '.join(MPIS)}")
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, not {nodes}")
    if nproc_per_node is not None and nproc_per_node < 1:
        raise ValueError(f"nproc_per_node must be >= 1, not {nproc_per_node}")
    tail = [executable, "--runtime", runtime]
    if runtime == "mpi":
        tail += ["--mpi", mpi or "openmpi"]
    if nproc_per_node is not None:
        tail += ["--nproc-per-node", str(nproc_per_node)]
    if launcher is not None:
        if launcher not in LAUNCHERS:
            raise ValueError(f"unknown launcher {launcher!r}; one of {', '.join(LAUNCHERS)}")
        tail += ["--launcher", launcher]
    if runtime == "mpi":
        return tail
    if runtime == "torch":
        return ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
                "--cpu-bind=none", "--kill-on-bad-exit=1", *tail]
    srun = ["srun", f"--nodes={nodes}"]
    if nproc_per_node is not None:
        srun += [f"--ntasks={nodes * nproc_per_node}", f"--ntasks-per-node={nproc_per_node}"]
    return [*srun, "--kill-on-bad-exit=1", *tail]


def describe(alloc: Allocation, plan: LaunchPlan) -> str:
    """The ``--dry-run`` text: allocation, hostfile, the variables set (sorted, quoted)
    and the argv (shell-quoted)."""
    lines = [f"# world: {alloc.world}  job: {alloc.job_id}  nodes: {compress(alloc.names)} "
             f"({len(alloc.hosts)})  node rank: {alloc.node_rank}"]
    if plan.hostfile_path is not None and plan.hostfile_text is not None:
        lines.append(f"# hostfile: {plan.hostfile_path}")
        lines.extend(plan.hostfile_text.splitlines())
    else:
        lines.append("# hostfile: none")
    lines.append("# environment")
    lines.extend(f"{k}={shlex.quote(v)}" for k, v in sorted(plan.env.items()))
    if plan.argv:
        lines.append("# exec")
        lines.append(shlex.join(plan.argv))
    else:
        lines.append(f"# exec: nothing ({plan.note})")
    return "\n".join(lines) + "\n"
