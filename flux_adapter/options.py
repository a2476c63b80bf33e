"""What the Flux back end does with each scheduling option (:mod:`bridge.option_support`).

The words come from the jobspec builder's own tables (:data:`flux_adapter.jobspec.
OPTION_MAP`, and its refusals) and, where a value decides, its own translations: an
option Flux has no equivalent for (``--qos``, ``--mem``, ``--switches``, the options
only Slurm honours) and a value it cannot express (``--constraint=[a|b]``,
``--output=%N``, uneven ``--ntasks``) are refused at admission (400). Admission also
builds the whole jobspec (``FluxBackend.validate``), so what this table misses is
refused there too, never at submission.
Contract: :data:`SUPPORT` covers every field of
:class:`bridge.scheduling.SchedulingOptions`; published as the ``flux`` entry point of
``hpc_bridge.option_support``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from bridge.arrays import ArraySpec, ArrayTask
from bridge.backend import BackendRejected
from bridge.hostlist import count
from bridge.jobid import pin_job_id
from bridge.option_support import (
    FIELD_FLAGS,
    ONLY_SLURM,
    AdmitContext,
    Check,
    Support,
    begin_check,
    gpu_check,
    honoured,
    refused,
    translated,
)
from bridge.scheduling import SchedulingOptions
from flux_adapter import jobspec

__all__ = ["SUPPORT"]

def _rejects(build: Callable[[SchedulingOptions], object]) -> Check:
    """A check that runs the jobspec builder's own translation of an option."""
    return translated(build, (BackendRejected,), "flux back end: ")


def _output(field: str) -> Check:
    def build(o: SchedulingOptions) -> object:
        pattern = getattr(o, field)
        task = ArrayTask(1, 0, ArraySpec((0,))) if o.array else None  # %a: the index
        return jobspec.output_template(pin_job_id(pattern, 1, task), job_name="x", user="u")

    return _rejects(build)


def _ntasks(options: SchedulingOptions, ctx: AdmitContext) -> str | None:
    """The builder's rule (flux_adapter.jobspec: every node runs as many ranks)."""
    o, nodes = options, ctx.nodes
    if o.ntasks is None:
        return None
    if o.ntasks_per_node is not None and o.ntasks != o.ntasks_per_node * nodes:
        return (f"--ntasks={o.ntasks} and --ntasks-per-node={o.ntasks_per_node} disagree "
                f"over {nodes} node(s)")
    if o.ntasks_per_node is None and o.ntasks % nodes and ctx.framework != "plain":
        return (f"--ntasks={o.ntasks} does not divide evenly over {nodes} nodes, and every "
                "node runs as many ranks")
    return None


def _template_free(field: str) -> Check:
    def check(options: SchedulingOptions, ctx: AdmitContext) -> str | None:
        value = getattr(options, field) or ""
        if "{{" in value or "}}" in value:
            return "the job shell would expand '{{...}}' in it (and has no escape)"
        return None

    return check


def _hosts(field: str) -> Check:
    def check(options: SchedulingOptions, ctx: AdmitContext) -> str | None:
        return "names no hosts" if count(getattr(options, field) or "") == 0 else None

    return check


_CHECKS: Mapping[str, Check] = {
    "begin": begin_check,
    "gres": gpu_check("gres"),
    "gpus": gpu_check("gpus"),
    "gpus_per_task": gpu_check("gpus_per_task"),
    "constraint": _rejects(lambda o: jobspec.constraint_of(o.constraint or "")),
    "output": _output("output"),
    "error": _output("error"),
    "ntasks": _ntasks,
    "chdir": _template_free("chdir"),
    "submit_dir": _template_free("submit_dir"),
    "nodelist": _hosts("nodelist"),
    "exclude": _hosts("exclude"),
}

#: Field -> how Flux honours it, or why it cannot.
SUPPORT: Mapping[str, Support] = {
    **{name: refused(ONLY_SLURM) for name in FIELD_FLAGS},
    **{name: refused(why) for name, (_flag, why) in jobspec.REFUSED.items()},
    "switches_wait_minutes": refused(jobspec.REFUSED["switches"][1]),
    **{name: honoured(how, _CHECKS.get(name)) for name, how in jobspec.OPTION_MAP.items()},
}
