"""``--export``: the environment a job gets from the submitter's, as sbatch documents it.

Contract: :func:`exported_environment` never copies :data:`NEVER_EXPORTED` through
``ALL`` and never copies what cannot be a TrainJob env entry; an explicitly named
variable whose value cannot be exported is a :class:`~bridge.sbatch.errors.SbatchError`.
"""

from __future__ import annotations

from collections.abc import Mapping

from bridge.sbatch.errors import SbatchError
from bridge.sbatch.request import ExportSpec
from bridge.sbatch.script import first_surrogate
from bridge.sbatch.values import ENV_NAME

__all__ = ["NEVER_EXPORTED", "exported_environment"]

#: Variables never copied from the submitting environment by ``--export=ALL`` (secrets of
#: the bridge client itself). Naming one explicitly in ``--export`` still exports it.
NEVER_EXPORTED = frozenset({"HPC_BRIDGE_TOKEN"})


def _exportable(name: str, value: str) -> bool:
    """Whether a submitting variable can be a TrainJob env entry (``ENV_NAME`` is ASCII)."""
    return bool(ENV_NAME.fullmatch(name)) and first_surrogate(value) < 0


def exported_environment(export: ExportSpec | None, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a job gets from ``--export``, as sbatch documents it.

    * ``ALL`` (the default): every submitting variable, except :data:`NEVER_EXPORTED`
      and those that cannot be a TrainJob env entry (names like bash's
      ``BASH_FUNC_x%%``, values that are not UTF-8). Explicit ``VAR=value`` items only
      add variables the environment lacks: "if ALL is specified, then all user
      environment variables will be loaded and will take precedence over any
      explicitly given environment variables" (sbatch(1)).
    * ``NONE``: only the ``SLURM_*`` variables of the submitting environment.
    * ``VAR,VAR=value,...``: those variables (a named variable that is not set is
      skipped) plus the submitting ``SLURM_*`` variables, which win on a clash.

    Raises :class:`SbatchError` for an explicitly named variable whose value cannot be
    exported.
    """
    spec = export or ExportSpec(all=True)
    env: dict[str, str] = {}
    if spec.all:
        env.update(
            {k: v for k, v in environ.items() if k not in NEVER_EXPORTED and _exportable(k, v)}
        )
    for name, value in spec.items:
        if value is None:
            if name in environ:
                if first_surrogate(environ[name]) >= 0:
                    raise SbatchError(f"--export: the value of {name} is not valid UTF-8")
                env[name] = environ[name]
        elif not (spec.all and name in env):
            env[name] = value
    if not spec.all:
        env.update(
            {k: v for k, v in environ.items() if k.startswith("SLURM_") and _exportable(k, v)}
        )
    return dict(sorted(env.items()))
