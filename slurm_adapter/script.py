"""What the bridge hands Slurm for one job: the batch script, the sbatch flags and
the slurmrestd ``job`` object. All pure functions of a :class:`SubmitRequest`.

Contract:

* :func:`render_script` — a ``tbatch`` script (``plan.batch_script``) is returned
  as-is except that ``#SBATCH`` lines of its leading directive block become
  ``##SBATCH`` (tbatch already parsed them into ``request.options``; sbatch must
  not read them again). Otherwise ``#!/bin/bash``, a comment naming the TrainJob
  and one ``exec`` line from :func:`launch_command`. Every user-supplied string in
  the script goes through :func:`shlex.quote` (comments too, with control
  characters escaped first); no environment values are written into it: they
  travel with the submission (:func:`job_environment`).
* :func:`job_spec` resolves options + plan into a :class:`JobSpec`;
  :func:`sbatch_args` and :func:`rest_job` spell the same spec for sbatch and
  for a slurmrestd dialect. Both always carry ``comment = "hpc-bridge:<uid>"``,
  the idempotency key by which the job is found again after a crash (the user's own
  ``--comment`` follows it after a space). The options passed as they are
  (:mod:`bridge.slurm_options`: mail, signal, requeue, GPUs ...) become sbatch
  arguments; :func:`rest_job` spells those slurmrestd has fields for
  (:mod:`slurm_adapter.passed_rest`) and raises :class:`UnsupportedOption` for a job
  with any other, so that the back end submits it with sbatch.
* :func:`expand_output_pattern` (from :mod:`slurm_adapter.output_names`) resolves
  ``slurm-%j.out``-style patterns the way Slurm does.
* A job with a data cache (``plan.data_cache``) starts it first
  (:mod:`slurm_adapter.cache_script`).
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.backend import SubmitRequest
from bridge.gpu_options import from_gpu_options
from bridge.jobid import identity_env, pin_job_id
from bridge.runtimes import Framework, LaunchPlan, MpiImplementation
from bridge.slurm_options import PASSED, sbatch_flags
from mpi_launch.plan import launch_invocation
from slurm_adapter import hostlist
from slurm_adapter.cache_script import cache_prologue
from slurm_adapter.dialects import Dialect, UnsupportedOption
from slurm_adapter.output_names import expand_output_pattern
from slurm_adapter.passed_rest import rest_fields

__all__ = [
    "ARRAY_OUTPUT",
    "COMMENT_PREFIX",
    "DEFAULT_OUTPUT",
    "JobSpec",
    "expand_output_pattern",
    "job_environment",
    "job_spec",
    "launch_command",
    "neutralise_directives",
    "render_script",
    "rest_job",
    "sbatch_args",
    "sbatch_output_env",
]

#: ``comment`` of every job the bridge submits: ``hpc-bridge:<TrainJob uid>``.
COMMENT_PREFIX = "hpc-bridge:"
#: sbatch's default ``--output`` (relative to the working directory) ...
DEFAULT_OUTPUT = "slurm-%j.out"
#: ... and a job array's task's (``slurm-<array id>_<index>.out``).
ARRAY_OUTPUT = "slurm-%A_%a.out"
#: PATH of a job whose plan sets none (what bash assumes; srun needs it exported).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class JobSpec:
    """The Slurm job description of one request, before it is spelled for a tool.

    Field names are the neutral option names that :attr:`Dialect.unsupported` uses.
    """

    name: str
    comment: str
    nodes: int
    chdir: str
    output: str
    error: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit_minutes: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    gpus_per_node: int | None = None
    mem_per_node_mb: int | None = None
    exclusive: bool = False
    switches: int | None = None
    switches_wait_minutes: int | None = None
    nodelist: str | None = None
    exclude: str | None = None
    constraint: str | None = None
    #: Arguments of a user's batch script (``tbatch script.sh ARGS``).
    script_args: tuple[str, ...] = ()
    #: ``--nodes=MIN-MAX``: the most nodes (``nodes`` is the least).
    max_nodes: int | None = None
    #: sbatch options passed as they are (bridge/slurm_options.py), as sbatch arguments
    #: and as ``(field, value)`` (for slurmrestd: slurm_adapter/passed_rest.py).
    passed: tuple[str, ...] = ()
    passed_values: tuple[tuple[str, Any], ...] = ()
    #: A native dependency in Slurm's job ids (``SubmitRequest.dependency``), and
    #: ``--kill-on-invalid-dep=yes`` with it.
    dependency: str | None = None
    kill_on_invalid_dep: bool = False
    #: ``--array``: the indexes of a native array (slurm_adapter/native_array.py).
    array: str | None = None

    def used_options(self) -> set[str]:
        """Names of the optional fields that are set (for dialect support checks)."""
        return {name for name, value in vars(self).items()
                if name not in ("name", "comment", "nodes", "chdir", "output", "dependency",
                                "kill_on_invalid_dep", "array")
                and value not in (None, False, ())}


def _tasks_per_node(request: SubmitRequest) -> int | None:
    """``--ntasks-per-node``: the shape's ranks per node, unless only ``--ntasks`` (or
    nothing, for a plain job) says how many tasks there are (sbatch spreads them)."""
    options, shape = request.options, request.job_shape
    if options.ntasks_per_node is None and options.ntasks is not None:
        return None
    return shape.ranks_per_node


def job_spec(request: SubmitRequest, *, default_chdir: str,
             default_partition: str | None = None) -> JobSpec:
    """Resolve ``request.options`` and ``request.plan`` into a :class:`JobSpec`.

    Job name: ``options.job_name``, else the TrainJob's ``metadata.name``. Nodes,
    tasks per node (unless only ``ntasks`` is given), CPUs per task, GPUs and memory
    per node, time limit: the job's shape (:mod:`bridge.shape`: an explicit option,
    else ``resourcesPerNode``; ``--cpus-per-task=1``, Slurm's default, is not spelled).
    Working directory: ``options.chdir``, else ``options.submit_dir``, else
    ``default_chdir``. Output:
    ``options.output``, else ``slurm-%j.out`` (``slurm-%A_%a.out`` for a task of an
    array; as sbatch), and ``options.error``, with
    the bridge's id for ``%j``/``%J``/``%A`` (:func:`bridge.jobid.pin_job_id`). Node
    list: ``options.nodelist``, else the hosts of ``request.placement`` (the engine
    pins them in placement mode ``nodelist``), compressed (``node[1-2]``).
    """
    o = request.options
    shape = request.job_shape
    cpus = o.cpus_per_task or (shape.cpus_per_task if (shape.cpus_per_task or 1) > 1 else None)
    return JobSpec(
        name=o.job_name or request.job.metadata.name or f"hpc-bridge-{request.job_id}",
        comment=COMMENT_PREFIX + request.job_uid + (f" {o.comment}" if o.comment else ""),
        nodes=shape.nodes,
        chdir=o.chdir or o.submit_dir or default_chdir,
        output=pin_job_id(o.output or (ARRAY_OUTPUT if request.array else DEFAULT_OUTPUT),
                          request.job_id, request.array),
        error=pin_job_id(o.error, request.job_id, request.array) if o.error else None,
        partition=o.partition or default_partition,
        account=o.account,
        qos=o.qos,
        time_limit_minutes=(o.time_limit_minutes if o.time_limit_minutes is not None
                            else shape.time_limit_minutes),
        ntasks=o.ntasks,
        ntasks_per_node=_tasks_per_node(request),
        cpus_per_task=cpus,
        # Not what --gres/--gpus/--gpus-per-task came to: Slurm has those themselves.
        gpus_per_node=(shape.gpus_per_node or None) if o.gpus_per_node is not None or (
            from_gpu_options(o, shape.nodes, shape.ranks_per_node or 1) is None) else None,
        # Not beside --mem-per-cpu/--mem-per-gpu, which Slurm has themselves (and which
        # exclude --mem).
        mem_per_node_mb=(None if o.mem_per_cpu_mb or o.mem_per_gpu_mb
                         else shape.mem_per_node_mb),
        exclusive=o.exclusive,
        switches=o.switches,
        switches_wait_minutes=o.switches_wait_minutes if o.switches else None,
        nodelist=o.nodelist or (hostlist.compress(request.placement.hosts)
                                if request.placement is not None and request.placement.hosts
                                else None),
        exclude=o.exclude,
        constraint=o.constraint,
        # A plain batch script gets its arguments from sbatch; a wrapped one (a
        # distributed runtime, see render_script) carries them in the wrapper.
        script_args=(request.plan.args if request.plan.batch_script is not None
                     and request.plan.framework is Framework.PLAIN
                     and request.plan.data_cache is None else ()),
        max_nodes=o.max_nodes if o.max_nodes and o.max_nodes > shape.nodes else None,
        passed=tuple(sbatch_flags(o.model_dump())),
        passed_values=tuple((n, getattr(o, n)) for n in (*PASSED, "requeue")
                            if getattr(o, n) is not None),
        dependency=request.dependency,
        kill_on_invalid_dep=bool(request.dependency and o.kill_on_invalid_dep),
    )


def job_environment(request: SubmitRequest) -> dict[str, str]:
    """The job's environment: the plan's, plus ``PATH`` when the plan sets none
    (``tbatch -f``'s ``submit_path``, else a system default; a container image would
    supply one; without it ``srun`` cannot find the program, and slurmrestd refuses an
    empty environment), and the bridge's id and uid
    (:func:`bridge.jobid.identity_env`), which the plan cannot override."""
    env = dict(request.plan.env)
    env.setdefault("PATH", request.options.submit_path or DEFAULT_PATH)
    env.update(identity_env(request.job_id, request.job_uid, request.array))
    env.update(request.status_env)
    return env


def sbatch_output_env(spec: JobSpec) -> dict[str, str]:
    """The variables sbatch itself puts into the batch script's environment from its
    options (sbatch(1) OUTPUT ENVIRONMENT VARIABLES), which slurmrestd does not: without
    SLURM_NTASKS a plain ``srun`` in the script starts one task per node instead of
    every task the job asked for. The same values as sbatch's, so the sbatch path may
    carry them too (sbatch sets them again)."""
    env: dict[str, str] = {}
    ntasks = spec.ntasks
    if (ntasks is None and spec.ntasks_per_node is not None
            and spec.max_nodes in (None, spec.nodes)):
        # sbatch works the count out only for a fixed node count (a range: left unset)
        ntasks = spec.nodes * spec.ntasks_per_node
    if ntasks is not None:
        env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = str(ntasks)
    if spec.ntasks_per_node is not None:
        env["SLURM_NTASKS_PER_NODE"] = str(spec.ntasks_per_node)
    if spec.cpus_per_task is not None:
        env["SLURM_CPUS_PER_TASK"] = str(spec.cpus_per_task)
    if spec.mem_per_node_mb is not None:
        env["SLURM_MEM_PER_NODE"] = str(spec.mem_per_node_mb)
    return env


def sbatch_args(spec: JobSpec) -> list[str]:
    """sbatch flags for ``spec`` (one argv element each; no shell is involved)."""
    args = [
        f"--job-name={spec.name}",
        f"--comment={spec.comment}",
        f"--nodes={spec.nodes}" + (f"-{spec.max_nodes}" if spec.max_nodes else ""),
        f"--chdir={spec.chdir}",
        f"--output={spec.output}",
    ]
    if spec.array is not None:
        args.append(f"--array={spec.array}")
    optional: list[tuple[str, object]] = [
        ("--error", spec.error),
        ("--partition", spec.partition),
        ("--account", spec.account),
        ("--qos", spec.qos),
        ("--time", spec.time_limit_minutes),
        ("--ntasks", spec.ntasks),
        ("--ntasks-per-node", spec.ntasks_per_node),
        ("--cpus-per-task", spec.cpus_per_task),
        ("--gpus-per-node", spec.gpus_per_node),
        ("--mem", spec.mem_per_node_mb),
    ]
    args += [f"{flag}={value}" for flag, value in optional if value is not None]
    if spec.exclusive:
        args.append("--exclusive")
    if spec.switches is not None:
        wait = f"@{spec.switches_wait_minutes}" if spec.switches_wait_minutes is not None else ""
        args.append(f"--switches={spec.switches}{wait}")
    optional = [("--nodelist", spec.nodelist), ("--exclude", spec.exclude),
                ("--constraint", spec.constraint)]
    args += [f"{flag}={value}" for flag, value in optional if value is not None]
    if spec.dependency:  # the kill choice spelled out: a site may kill by default
        args += [f"--dependency={spec.dependency}",
                 f"--kill-on-invalid-dep={'yes' if spec.kill_on_invalid_dep else 'no'}"]
    return args + list(spec.passed)


def _names(dialect: Dialect, expression: str) -> Any:
    return hostlist.expand(expression) if dialect.node_names_as_list else expression


def rest_job(spec: JobSpec, env: Mapping[str, str], dialect: Dialect) -> dict[str, Any]:
    """The slurmrestd ``job`` object for ``spec`` in ``dialect``.

    Raises :class:`UnsupportedOption` naming the options the dialect cannot carry
    (e.g. switches in v0.0.38) and :class:`slurm_adapter.hostlist.HostlistError`
    for a malformed node list where the dialect wants names.
    """
    passed = rest_fields(dict(spec.passed_values), dialect)
    if passed is None:
        raise UnsupportedOption(f"{' '.join(spec.passed)} go to Slurm through sbatch, as "
                                f"they are (not all spelled for slurmrestd {dialect.version})")
    missing = sorted(spec.used_options() & dialect.unsupported)
    if missing:
        raise UnsupportedOption(
            f"slurmrestd {dialect.version} cannot set {', '.join(missing)} "
            f"(the API refuses the field)"
        )
    job: dict[str, Any] = {
        "name": spec.name,
        "comment": spec.comment,
        "current_working_directory": spec.chdir,
        "standard_output": spec.output,
        "environment": dialect.encode_env(env),
    }
    if spec.array is not None:
        job["array"] = spec.array
    if dialect.node_count == "nodes":
        job["nodes"] = spec.nodes
    else:
        job["minimum_nodes"] = spec.nodes
        job["maximum_nodes"] = spec.max_nodes or spec.nodes
    plain = {
        "standard_error": spec.error,
        "partition": spec.partition,
        "account": spec.account,
        "qos": spec.qos,
        "tasks": spec.ntasks,
        "tasks_per_node": spec.ntasks_per_node,
        "cpus_per_task": spec.cpus_per_task,
        "constraints": spec.constraint,
    }
    job.update({k: v for k, v in plain.items() if v is not None})
    if spec.time_limit_minutes is not None:
        job["time_limit"] = dialect.encode_number(spec.time_limit_minutes)
    if spec.mem_per_node_mb is not None:
        job["memory_per_node"] = dialect.encode_number(spec.mem_per_node_mb)
    if spec.gpus_per_node is not None:
        job[dialect.gpus_field] = (str(spec.gpus_per_node) if dialect.gpus_field == "gpus_per_node"
                                   else f"gres/gpu:{spec.gpus_per_node}")
    if spec.exclusive:
        job["exclusive"] = dialect.exclusive_value
    if spec.switches is not None:
        job["required_switches"] = dialect.encode_number(spec.switches)
        if spec.switches_wait_minutes is not None:
            job["wait_for_switch"] = spec.switches_wait_minutes * 60
    job.update(passed)
    if spec.dependency:  # the kill choice spelled out (v0.0.38: a boolean; later: a flag)
        job["dependency"] = spec.dependency
        if dialect.passed_rest:
            job["flags"] = [*job.get("flags", ()), "KILL_INVALID_DEPENDENCY"
                            if spec.kill_on_invalid_dep else "NO_KILL_INVALID_DEPENDENCY"]
        else:
            job["kill_on_invalid_dependency"] = spec.kill_on_invalid_dep
    if spec.nodelist is not None:
        job[dialect.nodelist_field] = _names(dialect, spec.nodelist)
    if spec.exclude is not None:
        job[dialect.exclude_field] = _names(dialect, spec.exclude)
    return job


# --- the batch script ------------------------------------------------------------------


def _quote(value: str) -> str:
    return shlex.quote(value)


def _comment_word(value: str) -> str:
    """A user string made safe for a ``#`` comment line: control characters escaped
    (a newline would end the comment), then shell-quoted like everything else."""
    return _quote(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", value))


def _flavour(plan: LaunchPlan) -> str:
    """``mpi-launch --mpi`` of the plan (typed at admission; Open MPI when unset)."""
    return (plan.mpi_implementation or MpiImplementation.OPENMPI).flavour


def container_prefix(command: Sequence[str], image: str | None) -> list[str]:
    """The words a job's command runs behind: the back end's ``container_command`` with
    ``{image}`` replaced by the job's ``spec.trainer.image`` (plain replacement, no
    other expansion); none for a job without an image (admission refuses an image
    where there is no such command: bridge/engine_admission.py)."""
    if not image or not command:
        return []
    return [word.replace("{image}", image) for word in command]


def launch_command(plan: LaunchPlan, mpi_launch: str = "mpi-launch",
                   container: Sequence[str] = ()) -> list[str]:
    """The argv the batch script runs: the user's command for ``plain``; for a
    distributed framework, ``mpi-launch`` (started as :func:`mpi_launch.plan.
    launch_invocation` says: once for MPI, once per node for torch, once per rank
    for JAX/XGBoost), which reads the allocation, writes the hostfile, sets the rank
    environment and execs the launcher. ``mpi_launch`` is the path of the
    ``mpi-launch`` program as the compute nodes see it. ``container``: the words the
    user's command runs behind (:func:`container_prefix`), on every rank.
    """
    user = [*container, *plan.command, *plan.args]
    if plan.framework is Framework.PLAIN:
        return user
    flavour = _flavour(plan)
    prefix = launch_invocation(plan.framework.value, flavour if plan.framework is Framework.MPI
                               else None, plan.num_nodes, plan.proc_per_node,
                               executable=mpi_launch)
    return [*prefix, "--", *user]


def neutralise_directives(script: str) -> str:
    """``#SBATCH`` -> ``##SBATCH`` in the leading directive block of ``script``.

    The block ends, as for sbatch, at the first line that is neither blank nor a
    comment; later lines and the line endings are left untouched.
    """
    # Lines as sbatch reads them: split at "\n" only (str.splitlines also splits at
    # \f, \x1c, \u2028 ... which would end the block early and leave later #SBATCH
    # lines live for sbatch), blank as C's isspace() says.
    lines = script.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("#SBATCH"):
            lines[i] = "#" + line
            continue
        stripped = line.strip(" \t\n\v\f\r")
        if stripped and not stripped.startswith("#"):
            break
    return "\n".join(lines)


def render_script(request: SubmitRequest, mpi_launch: str = "mpi-launch",
                  data_cache: str = "data-cache", prologue: str = "",
                  container: Sequence[str] = ()) -> str:
    """The batch script for ``request`` (see the module docstring).

    For MPI the launcher runs in the batch script itself and its hostfile goes in a
    private directory removed when the script ends; other runtimes ``exec`` their
    launch line. A job with a data cache (``plan.data_cache``) starts it first
    (:func:`slurm_adapter.cache_script.cache_prologue`, ``data_cache`` the command's
    path); a plain batch script then runs as a file of its own (any interpreter), as the
    distributed runtimes' scripts do. So does one with a ``prologue`` (bash lines run
    first: a native array's, slurm_adapter/native_array.py). ``container``: the back
    end's ``container_command``, which the user's command runs behind
    (:func:`container_prefix`).
    """
    plan = request.plan
    cache = prologue
    if plan.data_cache is not None:
        cache += cache_prologue(plan.data_cache, data_cache=data_cache,
                                mem_per_node_mb=request.job_shape.mem_per_node_mb)
    if plan.batch_script and plan.framework is Framework.PLAIN and not cache:
        return neutralise_directives(plan.batch_script)
    meta = request.job.metadata
    head = (
        "#!/bin/bash\n"
        f"# hpc-bridge TrainJob {_comment_word(meta.namespace or 'default')}/"
        f"{_comment_word(meta.name)} uid={_comment_word(request.job_uid)} "
        f"runtime={_comment_word(plan.runtime)}\n"
    ) + cache
    if plan.batch_script:
        return head + _batch_script_through_mpi_launch(plan, plan.batch_script, mpi_launch)
    trainer = request.job.spec.trainer
    argv = launch_command(plan, mpi_launch, container_prefix(
        container, trainer.image if trainer is not None else None))
    if plan.framework is Framework.MPI:
        cut = argv.index("--")
        words = " ".join(_quote(w) for w in argv[:cut])
        rest = " ".join(_quote(w) for w in argv[cut:])
        return (
            head
            + 'hostfile_dir=$(mktemp -d "${TMPDIR:-/tmp}/hpc-bridge.XXXXXXXX") || exit 1\n'
            + "trap 'rm -rf -- \"$hostfile_dir\"' EXIT\n"
            + f'{words} --hostfile-dir "$hostfile_dir" {rest}\n'
        )
    words = " ".join(_quote(w) for w in argv)
    return head + f"exec {words}\n"


def _heredoc_delimiter(text: str) -> str:
    """A heredoc end word that is not a line of ``text``: derived from the text's hash
    (so the rendering is deterministic), with a counter in the unlikely case of a clash."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    lines = set(text.splitlines())
    n = 0
    while (word := f"HPC_BRIDGE_SCRIPT_{digest}" + (f"_{n}" if n else "")) in lines:
        n += 1
    return word


def _batch_script_through_mpi_launch(plan: LaunchPlan, script: str, mpi_launch: str) -> str:
    """A ``tbatch`` script with a distributed runtime: the script is written, verbatim
    (quoted heredoc: nothing expands), into a new file of the job's working directory
    (``mktemp``: nobody else's file or symlink is written through), where every node
    can read it, and run through ``mpi-launch``: once with the hostfile and MPI
    variables set for ``mpi`` (the script calls ``mpirun`` itself, as Slurm MPI scripts
    do); once per node with ``PET_*`` set for torch (the script calls ``torchrun``);
    once per rank for JAX/XGBoost; a plain script (with a data cache) is run as it is.
    Its arguments follow it, quoted."""
    flavour = _flavour(plan)
    is_mpi = plan.framework is Framework.MPI
    prefix = [] if plan.framework is Framework.PLAIN else launch_invocation(
        plan.framework.value, flavour if is_mpi else None, plan.num_nodes,
        plan.proc_per_node, executable=mpi_launch,
        launcher="none" if plan.framework in (Framework.MPI, Framework.TORCH) else None)
    if not script.endswith("\n"):
        script += "\n"
    end = _heredoc_delimiter(script)
    # A fresh file (mktemp: O_EXCL, mode 0600, unpredictable name), never a path another
    # user could have planted first (a file or symlink of theirs in a shared /scratch).
    lines = ['user_script=$(mktemp "$PWD/.hpc-bridge-$SLURM_JOB_ID.XXXXXXXX") || exit 1']
    cleanup = '"$user_script"'
    if is_mpi:
        lines.append('hostfile_dir=$(mktemp -d "${TMPDIR:-/tmp}/hpc-bridge.XXXXXXXX") || exit 1')
        cleanup += ' "$hostfile_dir"'
        prefix += ["--hostfile-dir"]
    lines.append(f"trap 'rm -rf -- {cleanup}' EXIT")
    lines.append(f"cat > \"$user_script\" <<'{end}' || exit 1\n{script}{end}")
    lines.append('chmod 700 "$user_script" || exit 1')
    words = " ".join(_quote(w) for w in prefix)
    if is_mpi:
        words += ' "$hostfile_dir"'
    args = " ".join(_quote(a) for a in plan.args)
    run = f'{words} -- "$user_script"' if prefix else '"$user_script"'
    lines.append(f'{run}{" " + args if args else ""}')
    return "\n".join(lines) + "\n"
