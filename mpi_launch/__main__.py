"""``mpi-launch``: read the allocation, write the hostfile, set the rank environment, exec.

Usage::

    mpi-launch --runtime {plain,torch,mpi,jax,xgboost} [--mpi {openmpi,mpich,intel}]
               [--nproc-per-node N] [--world {auto,slurm,flux,jobset,local}]
               [--hosts a:2,b:2] [--node-rank R] [--hostfile-dir DIR]
               [--launcher {auto,mpirun,srun}] [--direct] [--master-port P]
               [--mpirun PROGRAM] [--flux-r FILE] [--dry-run] -- COMMAND ARGS...

Exit status: that of the exec'd program; 0 for ``--dry-run`` and for nodes with
nothing to run (MPI on node rank > 0); 2 with one line ``mpi-launch: error: ...`` for
bad options or a malformed allocation; 127 when the program cannot be executed.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from typing import NoReturn

from mpi_launch.allocation import (
    WORLDS,
    Allocation,
    AllocationError,
    detect_world,
    flux_node_rank,
    from_flux_r,
    from_host_list,
    from_jobset_env,
    from_slurm_env,
)
from mpi_launch.errors import MpiLaunchError
from mpi_launch.hostlist import HostlistError
from mpi_launch.plan import (
    LAUNCHERS,
    MPIS,
    RUNTIMES,
    LaunchOptions,
    LaunchPlan,
    PlanError,
    describe,
    plan_launch,
)

PROG = "mpi-launch"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class UsageError(MpiLaunchError):
    """Bad command line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Turn the allocation into a hostfile and rank "
                "environment, then exec the launcher. Put the command after '--'.")
    p.add_argument("--runtime", required=True, choices=RUNTIMES)
    p.add_argument("--mpi", choices=MPIS, default="openmpi",
                   help="MPI flavour for --runtime mpi (default openmpi)")
    p.add_argument("--nproc-per-node", type=int, metavar="N",
                   help="ranks per node (replaces the allocation's slots)")
    p.add_argument("--world", choices=("auto", *WORLDS), default="auto")
    p.add_argument("--hosts", metavar="SPEC", help="local world: 'a:2,b:2' or 'n[1-4]:8'")
    p.add_argument("--node-rank", type=int, default=0, metavar="R",
                   help="local world: this host's index in --hosts (default 0)")
    p.add_argument("--hostfile-dir", metavar="DIR",
                   help="where to write the hostfile (default $TMPDIR/mpi-launch-UID-JOB)")
    p.add_argument("--launcher", choices=LAUNCHERS, default="auto",
                   help="mpi: mpirun/mpiexec (auto; a command that is itself mpirun, "
                        "mpiexec, deepspeed ... runs as it is), srun --mpi=pmix|pmi2 (Slurm "
                        "only), or none: write the hostfile, set the variables and exec the "
                        "command as it is (torch: once per node with PET_* set)")
    p.add_argument("--mpirun", metavar="PROGRAM",
                   help="mpi: launcher program (default mpirun, or mpiexec for mpich/intel)")
    p.add_argument("--direct", action="store_true",
                   help="torch: this process is one rank (srun started it): set "
                        "RANK/WORLD_SIZE/... and exec COMMAND instead of torchrun")
    p.add_argument("--master-port", type=int, metavar="P",
                   help="rendezvous port (default: SLURM_STEP_RESV_PORTS or a hash of the job)")
    p.add_argument("--flux-r", metavar="FILE",
                   help="flux: R document (default: flux job info $FLUX_JOB_ID R)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the hostfile, the variables set and the argv; run nothing")
    return p


def read_allocation(world: str, env: Mapping[str, str], *, hosts: str | None = None,
                    node_rank: int = 0, flux_r: str | None = None,
                    hostname: str | None = None) -> Allocation:
    """The allocation of ``world`` (``auto``: :func:`detect_world`, or local with --hosts)."""
    if world == "auto":
        world = "local" if hosts is not None else detect_world(env)
    if world == "slurm":
        return from_slurm_env(env)
    if world == "jobset":
        return from_jobset_env(env)
    if world == "flux":
        job_id = env.get("FLUX_JOB_ID")
        if not job_id:
            raise AllocationError("FLUX_JOB_ID", None, "not in a Flux job")
        source = f"R of {job_id}"
        if flux_r is not None:
            source = flux_r
            try:
                with open(flux_r, encoding="utf-8") as f:
                    text = f.read()
            except OSError as e:
                raise AllocationError("--flux-r", flux_r, e.strerror or str(e)) from None
        else:
            text = _flux_job_info_r(job_id)
        return from_flux_r(text, job_id=job_id, hostname=hostname or socket.gethostname(),
                           node_rank=flux_node_rank(env),
                           proc_rank=_opt_int(env, "FLUX_TASK_RANK"),
                           local_rank=_opt_int(env, "FLUX_TASK_LOCAL_ID"), source=source)
    spec = hosts if hosts is not None else (hostname or socket.gethostname())
    return from_host_list(spec, node_rank=node_rank,
                          job_id=env.get("MPI_LAUNCH_JOB_ID", "local"))


def _opt_int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if raw is None:
        return None
    if not re.fullmatch(r"[0-9]{1,18}", raw):
        raise AllocationError(name, raw, "must be a non-negative integer")
    return int(raw)


def _flux_job_info_r(job_id: str) -> str:
    try:
        done = subprocess.run(["flux", "job", "info", job_id, "R"], capture_output=True,
                              text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise AllocationError("FLUX_JOB_ID", job_id,
                              f"cannot run 'flux job info {job_id} R': {e}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise AllocationError("FLUX_JOB_ID", job_id, f"flux job info failed: {last}")
    return done.stdout


def default_hostfile_dir(alloc: Allocation, env: Mapping[str, str]) -> str:
    """``$TMPDIR/mpi-launch-<uid>-<job>`` (``/tmp`` when TMPDIR is unset)."""
    base = env.get("TMPDIR") or tempfile.gettempdir()
    return os.path.join(base, f"{PROG}-{os.getuid()}-{_UNSAFE.sub('_', alloc.job_id)}")


def _hostfile_dir(path: str, *, ours: bool) -> None:
    """Create ``path`` (mode 0700). With ``ours`` (the default, predictable path) accept
    only a real directory owned by this user, so nobody can swap the hostfile."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path) if ours else os.stat(path)
    except OSError as e:
        raise PlanError(f"hostfile directory {path}: {e.strerror or e}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise PlanError(f"hostfile directory {path}: not a directory")
    if ours and (st.st_uid != os.getuid() or st.st_mode & 0o022):
        raise PlanError(f"hostfile directory {path}: not a private directory of this user "
                        f"(use --hostfile-dir)")


def write_hostfile(plan: LaunchPlan, *, ours: bool = False) -> None:
    """Write the plan's hostfile atomically (temp file + rename in the same directory);
    ``ours``: the directory is the default one (see :func:`_hostfile_dir`)."""
    if plan.hostfile_path is None or plan.hostfile_text is None:
        return
    directory = os.path.dirname(plan.hostfile_path) or "."
    _hostfile_dir(directory, ours=ours)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".hostfile-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(plan.hostfile_text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, plan.hostfile_path)
    except OSError:
        os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    """Run ``mpi-launch``; returns the exit status (exec replaces the process)."""
    args_in = sys.argv[1:] if argv is None else list(argv)
    try:
        if "--" in args_in:
            cut = args_in.index("--")
            own, command = args_in[:cut], args_in[cut + 1:]
        else:
            own, command = args_in, []
        try:
            args = _parser().parse_args(own)
        except SystemExit as e:  # --help
            return e.code if isinstance(e.code, int) else 0
        if not command:
            raise UsageError("no command: put it after '--' (mpi-launch ... -- COMMAND ARGS)")
        opts = LaunchOptions(runtime=args.runtime, command=tuple(command), mpi=args.mpi,
                             launcher=args.launcher, direct=args.direct,
                             nproc_per_node=args.nproc_per_node,
                             master_port=args.master_port, mpirun=args.mpirun)
        alloc = read_allocation(args.world, os.environ, hosts=args.hosts,
                                node_rank=args.node_rank, flux_r=args.flux_r)
        hostfile_dir = args.hostfile_dir or default_hostfile_dir(alloc, os.environ)
        plan = plan_launch(alloc, opts, os.path.abspath(hostfile_dir))
        if args.dry_run:
            sys.stdout.write(describe(alloc, plan))
            return 0
        write_hostfile(plan, ours=args.hostfile_dir is None)
    except (UsageError, AllocationError, HostlistError, PlanError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    if not plan.argv:
        print(f"{PROG}: {plan.note}; nothing to run here", file=sys.stderr)
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        # argv is the launcher and the user command, verbatim: no shell on purpose.
        os.execvpe(plan.argv[0], list(plan.argv), {**os.environ, **plan.env})  # noqa: S606
    except OSError as e:
        print(f"{PROG}: error: cannot run {plan.argv[0]!r}: {e.strerror or e}",
              file=sys.stderr)
        return 127
    return 0  # pragma: no cover - execvpe does not return


if __name__ == "__main__":
    sys.exit(main())
