"""What each back end does with each scheduling option: honours it, or refuses it.

Every back end declares, for every field of :class:`bridge.scheduling.SchedulingOptions`,
one :class:`Support`: how it honours the option (``how``), or why it cannot (``why``);
an option it honours only for some values or settings has a ``check`` that names the
reason for a refusal. Nothing is silently ignored: a job that sets an option its back
end refuses is refused at admission (400), naming each option and the back end, as
``--qos is not supported by back end 'kubernetes': ...``. The same tables make the
compatibility table (``docs/sbatch-compat.md``, :mod:`bridge.compat_table`).

Contract: :data:`FIELD_FLAGS` names the sbatch option of each field;
:func:`set_fields` lists the fields a job sets; :func:`refusals` returns the messages
for a back end's table (empty: the job may run there); :func:`missing` lists the fields
a table does not cover (a test keeps it empty for every back end).
Back ends publish their table under the ``hpc_bridge.option_support`` entry-point
group (:func:`installed_tables`), so the core never imports an adapter.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points

from bridge.batchscript import is_utf8
from bridge.begin_time import begin_epoch
from bridge.gpu_options import first_gpu_field, gpus_per_node
from bridge.model import ANN_BATCH_SCRIPT, ANN_SCHEDULING, ValidationError
from bridge.scheduling import SchedulingOptions
from bridge.slurm_options import PASSED

__all__ = [
    "FIELD_FLAGS",
    "ONLY_SLURM",
    "AdmitContext",
    "Support",
    "check_backend_options",
    "honoured",
    "installed_tables",
    "missing",
    "refusals",
    "refused",
    "set_fields",
    "translated",
]


@dataclass(frozen=True)
class AdmitContext:
    """What a conditional :class:`Support` may look at besides the options."""

    #: Partitions the daemon routes to this back end (``route_partitions``).
    routed_partitions: frozenset[str] = frozenset()
    #: The job's node count (``spec.trainer.numNodes``, the least of ``--nodes``).
    nodes: int = 1
    #: The job's runtime framework (:class:`bridge.runtimes.Framework` value: ``torch``,
    #: ``mpi``, ``jax``, ``xgboost``, ``plain``).
    framework: str = "plain"
    #: Whether a queue outside the bridge places the job's pods (Kueue's Topology Aware
    #: Scheduling for a TrainJob it queues): a topology request is handed to it.
    queue_places: bool = False
    #: The back end's topology levels (node label keys, widest first).
    topology_labels: tuple[str, ...] = ()
    #: Whether that queue has the job's topology request.
    topology_handed: bool = False
    #: Tasks (ranks) on each node, as the job's shape counts them.
    tasks_per_node: int = 1


#: A check: the reason the back end cannot honour these options here, or ``None``.
Check = Callable[[SchedulingOptions, AdmitContext], str | None]


@dataclass(frozen=True)
class Support:
    """How one back end handles one option: ``how`` it honours it, or ``why`` not."""

    how: str | None = None
    why: str | None = None
    check: Check | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if (self.how is None) == (self.why is None):
            raise ValueError("a Support is either honoured (how) or refused (why)")

    @property
    def is_refused(self) -> bool:
        return self.why is not None

    def reason(self, options: SchedulingOptions, ctx: AdmitContext) -> str | None:
        """Why these options cannot run here (``None``: they can)."""
        if self.why is not None:
            return self.why
        return self.check(options, ctx) if self.check is not None else None


def honoured(how: str, check: Check | None = None) -> Support:
    """An option the back end honours (``check``: unless it names a reason)."""
    return Support(how=how, check=check)


def refused(why: str) -> Support:
    """An option the back end cannot honour."""
    return Support(why=why)


#: Why a back end other than Slurm refuses an option passed to Slurm as it is.
ONLY_SLURM = "only Slurm honours it"


def gpu_check(field: str) -> Check:
    """For a back end that counts GPUs per node (Kubernetes, Flux): GPU options that
    come to no whole count per node, or name a type (bridge/gpu_options.py), refused
    once, under the first GPU option set (``field`` is the option this check is for)."""
    def check(options: SchedulingOptions, ctx: AdmitContext) -> str | None:
        if first_gpu_field(options) != field:
            return None
        try:
            gpus_per_node(options, ctx.nodes, ctx.tasks_per_node)
        except ValueError as exc:
            return str(exc)
        return None

    return check


def begin_check(options: SchedulingOptions, ctx: AdmitContext) -> str | None:
    """For a back end where the bridge holds a job until its ``--begin``: a time sbatch
    would not read (bridge/begin_time.py)."""
    try:
        begin_epoch(options.begin or "", time.time())
    except ValueError as exc:
        return str(exc)
    return None


def translated(translate: Callable[[SchedulingOptions], object],
               errors: tuple[type[Exception], ...], prefix: str = "") -> Check:
    """A check that runs the back end's own translation of an option: its refusal (one
    of ``errors``, ``prefix`` dropped from the message) is the reason."""

    def check(options: SchedulingOptions, ctx: AdmitContext) -> str | None:
        try:
            translate(options)
        except errors as exc:
            return str(exc).removeprefix(prefix)
        return None

    return check


#: The sbatch option of each field (as errors and the compatibility table name it).
FIELD_FLAGS: Mapping[str, str] = {
    "job_name": "--job-name",
    "partition": "--partition",
    "account": "--account",
    "qos": "--qos",
    "time_limit_minutes": "--time",
    "ntasks": "--ntasks",
    "ntasks_per_node": "--ntasks-per-node",
    "cpus_per_task": "--cpus-per-task",
    "gpus_per_node": "--gpus-per-node",
    "mem_per_node_mb": "--mem",
    "output": "--output",
    "error": "--error",
    "chdir": "--chdir",
    "exclusive": "--exclusive",
    "switches": "--switches",
    "switches_wait_minutes": "--switches",
    "export": "--export",
    "nodelist": "--nodelist",
    "exclude": "--exclude",
    "constraint": "--constraint",
    "requeue": "--requeue",
    "max_nodes": "--nodes",
    "dependency": "--dependency",
    "array": "--array",
    "kill_on_invalid_dep": "--kill-on-invalid-dep",
    "hold": "--hold",
    **{name: f"--{p.long}" for name, p in PASSED.items()},
}

#: Fields no sbatch option sets, as a refusal names them.
_UNFLAGGED: Mapping[str, str] = {"submit_dir": "the submitting directory (submit_dir)",
                                  "submit_path": "the submitting PATH (submit_path)"}

_DEFAULTS = SchedulingOptions()


def set_fields(options: SchedulingOptions) -> list[str]:
    """The fields ``options`` sets (differing from the defaults), in the model's order."""
    return [name for name in SchedulingOptions.model_fields
            if getattr(options, name) != getattr(_DEFAULTS, name)]


def _spelled(options: SchedulingOptions, name: str) -> str:
    """The option as a refusal names it (``--qos``, ``--no-requeue``), without its
    value, which may be long and is the user's own."""
    value = getattr(options, name)
    if name == "requeue":
        return "--requeue" if value else "--no-requeue"
    if name == "max_nodes":
        return f"--nodes=MIN-MAX (a range, at most {value})"
    if name == "switches_wait_minutes":
        return f"--switches=...@{value}"
    return FIELD_FLAGS.get(name) or _UNFLAGGED.get(name, name)


def refusals(options: SchedulingOptions, table: Mapping[str, Support], backend: str,
             ctx: AdmitContext | None = None) -> list[str]:
    """One message per option ``options`` sets that ``table`` (back end ``backend``)
    refuses, each naming the option and the back end; a field the table lacks is
    refused too (never ignored)."""
    ctx = ctx or AdmitContext()
    found = []
    for name in set_fields(options):
        support = table.get(name)
        why = (support.reason(options, ctx) if support is not None
               else "the back end does not say that it honours it")
        if why is not None:
            found.append(f"{_spelled(options, name)} is not supported by back end "
                         f"{backend!r}: {why}")
    return found


def missing(table: Mapping[str, Support]) -> list[str]:
    """The fields of :class:`SchedulingOptions` that ``table`` does not cover."""
    return [name for name in SchedulingOptions.model_fields if name not in table]


def installed_tables() -> dict[str, Mapping[str, Support]]:
    """Each installed back-end kind's table (``hpc_bridge.option_support`` entry points)."""
    return {ep.name: ep.load() for ep in entry_points(group="hpc_bridge.option_support")}


def check_backend_options(options: SchedulingOptions, backend: str,
                          table: Mapping[str, Support] | None, ctx: AdmitContext,
                          script_bytes: bool, script: str | None = None) -> None:
    """Refuse, as one :class:`ValidationError` (400) on the annotation, every option
    ``table`` (back end ``backend``'s) refuses here, and a batch ``script`` that is not
    UTF-8 text (as :func:`bridge.batchscript.script_of` gives it) unless
    ``script_bytes``. A back end that declares no table (``None``: a third party's,
    written before tables) is taken to honour what the bridge's model always did, and
    refuses the options only Slurm honours (``SchedulingOptions.slurm_only``)."""
    if table is not None:
        messages = refusals(options, table, backend, ctx)
    else:
        messages = [f"{flag} is not supported by back end {backend!r}: {ONLY_SLURM}"
                    for flag in options.slurm_only()]
    errors = [(f"metadata.annotations[{ANN_SCHEDULING}]", message) for message in messages]
    if not script_bytes and script is not None and not is_utf8(script):
        errors.append((f"metadata.annotations[{ANN_BATCH_SCRIPT}]", "a batch script that is "
                       f"not UTF-8 text is not supported by back end {backend!r}"))
    if errors:
        raise ValidationError(errors)
