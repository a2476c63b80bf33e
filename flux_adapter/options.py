"""What the Flux back end does with each scheduling option (:mod:`bridge.option_support`).

The words come from the jobspec builder's own tables (:data:`flux_adapter.jobspec.
OPTION_MAP`, and its refusals), so the builder and admission cannot disagree: an option
Flux has no equivalent for (``--qos``, ``--mem``, ``--switches``, the options only Slurm
honours) and a value it cannot express (``--constraint=[a|b]``, ``--output=%N``) are
refused at admission (400) rather than failing the job at submission.
Contract: :data:`SUPPORT` covers every field of
:class:`bridge.scheduling.SchedulingOptions`; published as the ``flux`` entry point of
``hpc_bridge.option_support``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from bridge.backend import BackendRejected
from bridge.jobid import pin_job_id
from bridge.option_support import FIELD_FLAGS, AdmitContext, Check, Support, honoured, refused
from bridge.scheduling import SchedulingOptions
from flux_adapter import jobspec

__all__ = ["SUPPORT"]

ONLY_SLURM = "only Slurm honours it"


def _rejects(build: Callable[[SchedulingOptions], object]) -> Check:
    """A check that runs the jobspec builder's own translation of an option."""

    def check(options: SchedulingOptions, ctx: AdmitContext) -> str | None:
        try:
            build(options)
        except BackendRejected as exc:
            return str(exc).removeprefix("flux back end: ")
        return None

    return check


def _output(field: str) -> Check:
    def build(o: SchedulingOptions) -> object:
        pattern = getattr(o, field)
        return jobspec.output_template(pin_job_id(pattern, 1), job_name="x", user="u")

    return _rejects(build)


_CHECKS: Mapping[str, Check] = {
    "constraint": _rejects(lambda o: jobspec.constraint_of(o.constraint or "")),
    "output": _output("output"),
    "error": _output("error"),
}

#: Field -> how Flux honours it, or why it cannot.
SUPPORT: Mapping[str, Support] = {
    **{name: refused(ONLY_SLURM) for name in FIELD_FLAGS},
    **{name: refused(why) for name, (_flag, why) in jobspec.REFUSED.items()},
    "switches_wait_minutes": refused(jobspec.REFUSED["switches"][1]),
    **{name: honoured(how, _CHECKS.get(name)) for name, how in jobspec.OPTION_MAP.items()},
}
