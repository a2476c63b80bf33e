"""What the bridge hands Flux for one job: a jobspec version 1 (RFC 14 / RFC 25), built
by pure functions of a :class:`bridge.backend.SubmitRequest`, without importing ``flux``.

Contract (:func:`build_jobspec`):

* The result is a canonical jobspec V1 dictionary: ``version: 1``; ``resources`` is ONE
  ``node`` vertex (the bridge always knows the node count: ``plan.num_nodes``) holding
  one ``slot`` labelled ``task`` per node, which holds ``core`` and, with GPUs, ``gpu``
  (``node>slot>core[,gpu]``); ONE task ``{command, slot: task, count: {per_slot: 1}}``;
  ``attributes.system.duration`` always present (seconds, ``0`` = unlimited).
  One slot per node carries the node's whole share (tasks x cores per task, and the
  GPUs per node), so ``--gpus-per-node`` never has to divide among tasks; the number
  of tasks per node, when more than one, is the job shell option
  ``per-resource: {type: node, count: N}`` (what ``flux run --tasks-per-node`` does).
* Idempotency key: ``attributes.user.hpc_bridge_uid`` holds the TrainJob uid, and the
  job name ends in ``.hpc-bridge-<uid>`` (:func:`flux_job_name`), because the name is
  what Flux's job-list service returns for every job in one query.
* Every user string is data: the command is an argv list, the environment a mapping,
  the script a file in ``attributes.system.files`` (RFC 37). The job shell expands
  ``{{...}}`` mustache templates in task arguments and output paths and has no escape,
  so a user argument or path containing ``{{...}}`` is refused
  (:class:`bridge.backend.BackendRejected`).
* Options Flux has no equivalent for (``--qos``, ``--mem``, ``--switches``, Slurm
  output patterns like ``%N``) are refused with a message that names the option and
  says so. Everything else translates: see :data:`OPTION_MAP`.

How each runtime launches (``M`` = ``mpi-launch --world flux``; docs/flux.md explains):

==========================  =========================  ===================================
plan                        tasks                      command
==========================  =========================  ===================================
plain, batch script         one per node (nested       ``flux broker {{tmpdir}}/script``
                            Flux instance)             ARGS (``flux batch`` semantics)
plain, command, 1 node      one                        the command
plain, command, N nodes     one per node (nested)      ``flux broker`` COMMAND
mpi, command                P per node (Flux starts    ``M --runtime plain --`` COMMAND
                            every rank; PMI wire-up)
mpi, command is mpirun/     one per node (node 0       ``M --runtime mpi --nproc-per-node
deepspeed/...               runs it)                   P --hostfile-dir {{tmpdir}} --``
mpi, batch script           one per node (node 0)      same with ``--launcher none``
torch                       one per node               ``M --runtime torch [--nproc-per-
                                                       node P] [--launcher none] --``
jax, xgboost                P per node                 ``M --runtime jax|xgboost
                                                       --nproc-per-node P --``
==========================  =========================  ===================================
"""

from __future__ import annotations

import os.path
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bridge.arrays import task_env
from bridge.backend import BackendRejected, SubmitRequest
from bridge.jobid import identity_env, pin_job_id
from bridge.runtimes import Framework, LaunchPlan, MpiImplementation
from bridge.scheduling import SchedulingOptions
from flux_adapter.cache_wrapper import cache_wrapper
from flux_adapter.jobspec_read import UID_ATTRIBUTE as UID_ATTRIBUTE
from flux_adapter.jobspec_read import JobspecInfo as JobspecInfo
from flux_adapter.jobspec_read import f58 as f58
from flux_adapter.jobspec_read import parse_job_id as parse_job_id
from flux_adapter.jobspec_read import resolve_output as resolve_output
from flux_adapter.resources import placement_constraint
from mpi_launch.hostlist import HostlistError, compress, expand
from mpi_launch.plan import USER_LAUNCHERS

__all__ = [
    "ARRAY_OUTPUT",
    "DEFAULT_OUTPUT",
    "DEFAULT_PATH",
    "NAME_MARKER",
    "OPTION_MAP",
    "REFUSED",
    "UID_ATTRIBUTE",
    "JobspecInfo",
    "Layout",
    "TaskCommand",
    "build_jobspec",
    "constraint_of",
    "constraints_for",
    "f58",
    "flux_job_name",
    "job_environment",
    "layout_for",
    "output_template",
    "parse_job_id",
    "resolve_output",
    "task_command",
    "uid_from_name",
]

#: The job name is ``<name>`` + this + ``<TrainJob uid>``.
NAME_MARKER = ".hpc-bridge-"
#: stdout when the job names none (a Slurm pattern): like ``flux batch``'s
#: ``flux-{{id}}.out``, but with the decimal id (``{{id.dec}}``), which is plain ASCII and
#: the id the bridge reports.
DEFAULT_OUTPUT = "flux-%j.out"
#: ... and a job array's task's, as sbatch names it (``<array id>_<index>``).
ARRAY_OUTPUT = "flux-%A_%a.out"
#: PATH of a job whose plan sets none.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Where the job shell puts RFC 37 files (``attributes.system.files``) on every node.
SCRIPT_PATH = "{{tmpdir}}/script"

#: How each scheduling option reaches Flux (docs/flux.md has the same table).
OPTION_MAP: Mapping[str, str] = {
    "job_name": "attributes.system.job.name (with the .hpc-bridge-<uid> suffix)",
    "partition": "attributes.system.queue",
    "account": "attributes.system.bank (flux-accounting)",
    "time_limit_minutes": "attributes.system.duration (seconds)",
    "ntasks": "slot size and per-resource task count (must divide over the nodes)",
    "ntasks_per_node": "slot size and per-resource task count",
    "cpus_per_task": "cores per task in the node's slot",
    "gpus_per_node": "gpu vertex of the node's slot",
    "gres": "--gres=gpu[:N]: N in the gpu vertex of each node's slot (bridge/gpu_options.py)",
    "gpus": "--gpus=N: N / nodes in the gpu vertex of each node's slot, when it divides",
    "gpus_per_task": "--gpus-per-task=N: N x tasks per node in the gpu vertex of each node's "
                     "slot",
    "begin": "held by the bridge until then (reason BeginTime, as squeue shows it); a "
             "relative time counts from admission (bridge/begin_time.py)",
    "output": "shell option output.stdout.path (%j %J %A: the bridge id; %x %u %% translated)",
    "error": "shell option output.stderr.path",
    "chdir": "attributes.system.cwd",
    "submit_dir": "attributes.system.cwd when --chdir is not given",
    "submit_path": "the job's PATH when its trainer sets none (tbatch -f)",
    "array": "one bridge job (one Flux job) per task, throttled by the bridge "
             "(bridge/arrays.py)",
    "dependency": "held by the bridge until met (bridge/engine_dependency.py)",
    "kill_on_invalid_dep": "held by the bridge until met (bridge/engine_dependency.py)",
    "hold": "held by the bridge until released (spec.suspend)",
    "exclusive": "node vertex exclusive: true",
    "nodelist": "RFC 31 constraint hostlist (Flux allocates only from these hosts)",
    "exclude": "RFC 31 constraint not hostlist",
    "constraint": "RFC 31 constraint properties (FEATURE, A&B, A|B)",
    "export": "already applied by tbatch to the job's environment",
}

#: Options with no Flux equivalent: field -> (flag, why) (admission refuses them too:
#: flux_adapter/options.py).
REFUSED: Mapping[str, tuple[str, str]] = {
    "qos": ("--qos", "Flux has no equivalent of a Slurm QOS (flux-accounting limits come "
                     "from the bank and the queue)"),
    "mem_per_node_mb": ("--mem", "Flux has no equivalent: jobspec version 1 requests nodes, "
                                 "cores and GPUs only, never memory"),
    "switches": ("--switches", "Flux has no equivalent: jobspec version 1 cannot ask for a "
                               "number of leaf switches"),
}

_TEMPLATE = re.compile(r"\{\{.*?\}\}", re.S)
_PROPERTY = re.compile(r"[^\s&'\"`|()^!\[\]*,]+")


class _Refusal(BackendRejected):
    """A request the Flux back end cannot express (a :class:`BackendRejected`)."""


def _refuse(message: str) -> _Refusal:
    return _Refusal(f"flux back end: {message}")


# --------------------------------------------------------------------------- names


def flux_job_name(request: SubmitRequest) -> str:
    """``<name>.hpc-bridge-<uid>``: ``--job-name``, else the TrainJob's name, else
    ``hpc-bridge-<id>``, then the idempotency marker (see the module docstring)."""
    return _display_name(request) + NAME_MARKER + request.job_uid


def _display_name(request: SubmitRequest) -> str:
    return (request.options.job_name or request.job.metadata.name
            or f"hpc-bridge-{request.job_id}")


def uid_from_name(name: object) -> str | None:
    """The TrainJob uid in a Flux job name made by :func:`flux_job_name`, else None."""
    if not isinstance(name, str) or NAME_MARKER not in name:
        return None
    uid = name.rpartition(NAME_MARKER)[2]
    if not uid or len(uid) > 128 or any(c.isspace() or c == "/" for c in uid):
        return None
    return uid


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class Layout:
    """The resources of one job and how many tasks the shell starts on each node.

    ``ranks_per_node``: processes per node the options or the plan ask for (None:
    nothing says; one core's worth is allocated). ``tasks_per_node``: tasks the job
    shell starts on each node (1 unless Flux itself starts every rank).
    """

    nodes: int
    ranks_per_node: int | None
    cores_per_task: int
    gpus_per_node: int
    tasks_per_node: int
    exclusive: bool = False

    @property
    def cores_per_node(self) -> int:
        return (self.ranks_per_node or 1) * self.cores_per_task


def _ranks_per_node(request: SubmitRequest) -> int | None:
    """Processes per node: the job shape's (None: nothing says), once this back end has
    checked it can start them (the same number of ranks on every node)."""
    o, plan = request.options, request.plan
    nodes = plan.num_nodes
    if o.ntasks_per_node is not None:
        if o.ntasks is not None and o.ntasks != o.ntasks_per_node * nodes:
            raise _refuse(f"--ntasks={o.ntasks} and --ntasks-per-node={o.ntasks_per_node} "
                          f"disagree over {nodes} node(s); give one of them")
    elif (o.ntasks is not None and o.ntasks % nodes
          and plan.framework is not Framework.PLAIN):
        # A plain job's -n only sizes the allocation (rounded up per node): it starts
        # one process itself.
        raise _refuse(f"--ntasks={o.ntasks} does not divide evenly over {nodes} nodes: "
                      f"this back end starts the same number of ranks on every node "
                      f"(use a multiple of {nodes} or --ntasks-per-node)")
    return request.job_shape.ranks_per_node


def layout_for(request: SubmitRequest) -> Layout:
    """Nodes, cores and GPUs per node, and tasks per node (see the module docstring)."""
    plan, o = request.plan, request.options
    if plan.num_nodes < 1:
        raise _refuse(f"numNodes must be at least 1, not {plan.num_nodes}")
    ranks = _ranks_per_node(request)
    tasks = 1
    if (plan.framework in (Framework.JAX, Framework.XGBOOST)
            or (plan.framework is Framework.MPI and _mpi_direct(plan))):
        tasks = ranks or 1
    shape = request.job_shape
    if shape.mem_per_node_mb is not None and "memory" not in shape.from_options:
        raise _refuse(f"spec.trainer.resourcesPerNode memory ({shape.mem_per_node_mb} MiB "
                      f"per node): {REFUSED['mem_per_node_mb'][1]}")
    return Layout(nodes=shape.nodes, ranks_per_node=ranks,
                  cores_per_task=shape.cpus_per_task or 1,
                  gpus_per_node=shape.gpus_per_node or 0, tasks_per_node=tasks,
                  exclusive=o.exclusive)


def _mpi_direct(plan: LaunchPlan) -> bool:
    """MPI ranks started by Flux itself: a command that is not its own launcher."""
    if plan.batch_script is not None or not plan.command:
        return False
    return os.path.basename(plan.command[0]) not in USER_LAUNCHERS


def _resources(layout: Layout) -> list[dict[str, Any]]:
    children: list[dict[str, Any]] = [{"type": "core", "count": layout.cores_per_node}]
    if layout.gpus_per_node:
        children.append({"type": "gpu", "count": layout.gpus_per_node})
    node: dict[str, Any] = {
        "type": "node",
        "count": layout.nodes,
        "with": [{"type": "slot", "count": 1, "label": "task", "with": children}],
    }
    if layout.exclusive:
        node["exclusive"] = True
    return [node]


# --------------------------------------------------------------------------- command


def _check_templates(words: Sequence[str], what: str) -> None:
    for i, word in enumerate(words):
        if _TEMPLATE.search(word):
            raise _refuse(f"{what}[{i}] {word!r} contains a '{{{{...}}}}' template, which "
                          f"the Flux job shell would expand (it has no escape)")


@dataclass(frozen=True)
class TaskCommand:
    """The task's argv, the script file to ship (if any) and whether the job is a
    nested Flux instance (``flux batch`` semantics)."""

    argv: tuple[str, ...]
    script: str | None = None
    nested: bool = False
    extra_shell_options: Mapping[str, Any] = field(default_factory=dict)


def task_command(plan: LaunchPlan, layout: Layout, *, mpi_launch: str = "mpi-launch",
                 flux_command: str = "flux") -> TaskCommand:
    """What every task runs (see the table in the module docstring)."""
    user = [*plan.command, *plan.args]
    script = plan.batch_script
    if script is not None:
        if not script.startswith("#!"):
            raise _refuse("the batch script must start with '#!' (Flux runs it as a "
                          "program, as sbatch requires too)")
        _check_templates(plan.args, "script argument")
        user = [SCRIPT_PATH, *plan.args]
    else:
        if not user:
            raise _refuse("the job has no command")
        if user[0].startswith("-"):
            raise _refuse(f"command {user[0]!r} starts with '-'")
        _check_templates(user, "command")
    fw = plan.framework
    if fw is Framework.PLAIN:
        if script is not None or layout.nodes > 1:
            return TaskCommand(argv=(flux_command, "broker", *user), script=script,
                               nested=True)
        return TaskCommand(argv=tuple(user))
    head = [mpi_launch, "--world", "flux", "--runtime"]
    ppn = plan.proc_per_node
    if fw is Framework.MPI:
        if _mpi_direct(plan):
            return TaskCommand(argv=(*head, "plain", "--", *user))
        flavour = (plan.mpi_implementation or MpiImplementation.OPENMPI).flavour
        argv = [*head, "mpi", "--mpi", flavour]
        argv += ["--nproc-per-node", str(layout.ranks_per_node or 1)]
        argv += ["--hostfile-dir", "{{tmpdir}}"]
        if script is not None:
            argv += ["--launcher", "none"]
        return TaskCommand(argv=(*argv, "--", *user), script=script)
    if fw is Framework.TORCH:
        argv = [*head, "torch"]
        if ppn is not None:
            argv += ["--nproc-per-node", str(ppn)]
        if script is not None:
            argv += ["--launcher", "none"]
        return TaskCommand(argv=(*argv, "--", *user), script=script)
    # jax, xgboost: one task per rank
    return TaskCommand(argv=(*head, fw.value, "--nproc-per-node", str(layout.tasks_per_node),
                             "--", *user), script=script)


# --------------------------------------------------------------------------- options


def _refused_options(o: SchedulingOptions) -> list[str]:
    found = []
    for name, (flag, why) in REFUSED.items():
        value = getattr(o, name)
        if value is not None:
            found.append(f"{flag}={value}: {why}")
    if o.switches_wait_minutes is not None and o.switches is None:
        found.append(f"--switches=...@{o.switches_wait_minutes}: {REFUSED['switches'][1]}")
    # Admission refuses these already (flux_adapter/options.py); a row an older daemon
    # admitted may still carry one. The GPU options Flux counts per node are honoured.
    found += [f"{flag}: only Slurm honours it" for flag in o.slurm_only()
              if flag not in _HONOURED_FLAGS]
    return found


#: Options passed to Slurm as they are that Flux honours (the GPU options:
#: bridge/gpu_options.py; --begin: the bridge holds the job, bridge/engine_dependency.py).
_HONOURED_FLAGS = frozenset({"--gres", "--gpus", "--gpus-per-task", "--begin"})


def _hostlist(expr: str, flag: str) -> str:
    try:
        hosts = expand(expr, source=flag)
        if not hosts:
            raise _refuse(f"{flag}={expr!r} names no hosts")
        return compress(hosts, source=flag)
    except HostlistError as exc:
        raise _refuse(str(exc)) from None


def constraint_of(expr: str) -> dict[str, Any]:
    """``--constraint`` (Slurm features) as an RFC 31 properties constraint."""
    bad = (f"--constraint={expr!r}: only FEATURE, FEATURE&FEATURE... or FEATURE|FEATURE... "
           f"translate to Flux (RFC 31 properties); brackets, counts, parentheses and "
           f"mixed &/| have no Flux equivalent")
    text = expr.strip()
    if "&" in text and "|" in text:
        raise _refuse(bad)
    parts = [p.strip() for p in re.split(r"[&|]", text)]
    if not parts or not all(_PROPERTY.fullmatch(p) for p in parts):
        raise _refuse(bad)
    if "|" in text:
        return {"or": [{"properties": [p]} for p in parts]}
    return {"properties": parts}


def constraints_for(request: SubmitRequest) -> dict[str, Any] | None:
    """RFC 31 constraints from ``--nodelist``, ``--exclude``, ``--constraint`` and the
    engine's placement (``request.placement.hosts``), ANDed; None when there are none."""
    o = request.options
    terms: list[dict[str, Any]] = []
    placement = getattr(request, "placement", None)
    hosts = tuple(getattr(placement, "hosts", ()) or ())
    if hosts:
        try:
            terms.append(placement_constraint(hosts))
        except HostlistError as exc:
            raise _refuse(str(exc)) from None
    if o.nodelist:
        terms.append({"hostlist": [_hostlist(o.nodelist, "--nodelist")]})
    if o.exclude:
        terms.append({"not": [{"hostlist": [_hostlist(o.exclude, "--exclude")]}]})
    if o.constraint:
        terms.append(constraint_of(o.constraint))
    if not terms:
        return None
    return terms[0] if len(terms) == 1 else {"and": terms}


_PATTERN = re.compile(r"%(%|[0-9]*[A-Za-z]?)")


def output_template(pattern: str, *, job_name: str, user: str) -> str:
    """A Slurm ``--output`` pattern as a Flux output path template.

    ``%j`` -> ``{{id.dec}}``, ``%x`` -> the job name, ``%u`` -> the user name, ``%%`` ->
    ``%``. Other patterns (``%N %n %t %s %A %a %J``, zero padding) name nodes, tasks,
    steps or arrays, for which Flux writes no separate file: refused. (The back end
    pins ``%j``, ``%J`` and ``%A`` to the bridge's id first, and a task of an array
    ``%a`` to its index: :func:`bridge.jobid.pin_job_id`.) So is a literal ``{{...}}``
    (the job shell would expand it). A pattern holding a backslash is taken literally,
    as Slurm takes it (its backslashes dropped).
    """
    if _TEMPLATE.search(pattern):
        raise _refuse(f"output path {pattern!r} contains '{{{{...}}}}'; write Slurm "
                      f"patterns (%j, %x, %u) instead")
    if "\\" in pattern:  # as Slurm: no pattern is expanded, the backslashes go
        literal = pattern.replace("\\", "")
        if "{{" in literal or "}}" in literal:
            raise _refuse(f"output path {pattern!r} would contain a '{{{{' or '}}}}' the job "
                          f"shell would misread")
        return literal

    def sub(m: re.Match[str]) -> str:
        code = m.group(1)
        if code == "%":
            return "%"
        if code == "j":
            return "{{id.dec}}"
        if code == "x":
            return job_name
        if code == "u":
            return user
        raise _refuse(f"output pattern %{code} in {pattern!r}: Flux has no equivalent "
                      f"(it writes one output file per job; %j, %J, %A, %x, %u and %% translate)")

    out = _PATTERN.sub(sub, pattern)
    # Only the {{id.dec}} inserted here may reach the shell as a template.
    rest = out.replace("{{id.dec}}", "\0")
    if any(bad in rest for bad in ("{{", "}}", "{\0", "\0}")):
        raise _refuse(f"output path {pattern!r} would contain a '{{{{' or '}}}}' the job "
                      f"shell would misread (from the job name or user)")
    return out


def job_environment(plan: LaunchPlan, *, flux_command: str = "flux",
                    submit_path: str | None = None) -> dict[str, str]:
    """The job's environment: the plan's, with ``PATH`` the plan's (the submitter's, as
    ``tbatch`` exports it), else ``submit_path`` (``tbatch -f``'s), else a default, and
    the directory of an absolute ``flux_command`` first unless it is already on it:
    ``mpi-launch`` (``flux job info``) and a nested ``flux broker`` find the instance's
    own ``flux`` whatever the submitter's PATH held."""
    env = dict(plan.env)
    path = env.get("PATH") or submit_path or DEFAULT_PATH
    if os.path.isabs(flux_command):
        bindir = os.path.dirname(flux_command)
        if bindir not in path.split(":"):
            path = f"{bindir}:{path}"
    env["PATH"] = path
    return env


# --------------------------------------------------------------------------- jobspec


def build_jobspec(request: SubmitRequest, *, default_cwd: str, mpi_launch: str = "mpi-launch",
                  default_queue: str | None = None, flux_command: str = "flux",
                  data_cache: str = "data-cache") -> dict[str, Any]:
    """The jobspec V1 dictionary for ``request`` (see the module docstring).

    ``default_cwd`` is the working directory when ``--chdir`` is not given (the back end
    passes the owner's home); ``mpi_launch`` the path of ``mpi-launch`` on the compute
    nodes; ``default_queue`` the queue when ``--partition`` is not given; ``flux_command``
    the ``flux`` program the nested instance and ``PATH`` use; ``data_cache`` the
    ``data-cache`` program every task runs first when the job has a data cache
    (``plan.data_cache``: :func:`flux_adapter.cache_wrapper.cache_wrapper`).
    Raises :class:`bridge.backend.BackendRejected` for what Flux cannot express.
    """
    o, plan = request.options, request.plan
    refused = _refused_options(o)
    if refused:
        raise _refuse("; ".join(refused))
    layout = layout_for(request)
    cmd = task_command(plan, layout, mpi_launch=mpi_launch, flux_command=flux_command)
    if cmd.nested and request.array is not None:
        # A nested broker unsets SLURM_* for its initial program; a task's SLURM_ARRAY_*
        # are given to the script again, through env(1).
        argv = cmd.argv
        cmd = replace(cmd, argv=(*argv[:2], "env", *(
            f"{k}={v}" for k, v in task_env(request.array).items()), *argv[2:]))
    if plan.data_cache is not None:
        cmd = replace(cmd, argv=(*cache_wrapper(plan.data_cache, layout.tasks_per_node,
                                                data_cache), *cmd.argv))
    display = _display_name(request)
    cwd = o.chdir or o.submit_dir or default_cwd
    _check_templates([cwd], "--chdir")
    stdout = output_template(
        pin_job_id(o.output or (ARRAY_OUTPUT if request.array else DEFAULT_OUTPUT),
                   request.job_id, request.array),
        job_name=display, user=request.owner.user)
    shell_options: dict[str, Any] = {"output": {"stdout": {"type": "file", "path": stdout}}}
    if o.error:
        shell_options["output"]["stderr"] = {
            "type": "file",
            "path": output_template(pin_job_id(o.error, request.job_id, request.array),
                                    job_name=display, user=request.owner.user)}
    if layout.tasks_per_node > 1:
        shell_options["per-resource"] = {"type": "node", "count": layout.tasks_per_node}
    if cmd.nested:
        # As flux batch/alloc: brokers bootstrap through PMI, no MPI plugin for them, and
        # the instance ends when its initial program does.
        shell_options.update({"mpi": "none", "pmi": "simple", "exit-timeout": "none"})
    elif plan.framework is not Framework.PLAIN:
        # As srun --kill-on-bad-exit=1 under Slurm; and ranks/nodes may end at different
        # times (node rank > 0 of an mpirun job ends at once), so no exit timer.
        shell_options.update({"exit-timeout": "none", "exit-on-error": 1})
    shell_options.update(cmd.extra_shell_options)
    limit = request.job_shape.time_limit_minutes
    seconds = float(limit * 60) if limit else 0.0
    system: dict[str, Any] = {
        "duration": seconds,
        "cwd": cwd,
        "environment": {**job_environment(plan, flux_command=flux_command,
                                          submit_path=o.submit_path),
                        **identity_env(request.job_id, request.job_uid, request.array),
                        **request.status_env},
        "job": {"name": flux_job_name(request)},
        "shell": {"options": shell_options},
    }
    queue = o.partition or default_queue
    if queue:
        system["queue"] = queue
    if o.account:
        system["bank"] = o.account
    constraints = constraints_for(request)
    if constraints is not None:
        system["constraints"] = constraints
    if cmd.script is not None:
        system["files"] = {"script": {"mode": stat.S_IFREG | 0o700, "data": cmd.script,
                                      "encoding": "utf-8"}}
    meta = request.job.metadata
    return {
        "version": 1,
        "resources": _resources(layout),
        "tasks": [{"command": list(cmd.argv), "slot": "task", "count": {"per_slot": 1}}],
        "attributes": {
            "system": system,
            "user": {UID_ATTRIBUTE: request.job_uid,
                     "hpc_bridge_trainjob": f"{meta.namespace or 'default'}/{meta.name}",
                     "hpc_bridge_job_id": request.job_id},
        },
    }
