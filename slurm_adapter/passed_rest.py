"""The options passed to Slurm as they are (:mod:`bridge.slurm_options`), as slurmrestd
job fields.

Checked against the OpenAPI documents of live slurmrestd (24.11: v0.0.40 … v0.0.42;
26.05: v0.0.42 … v0.0.45), which spell them alike: ``mail_type`` (a list of flags, with
``TIME=90%`` for sbatch's ``TIME_LIMIT_90``), ``mail_user``, ``requeue`` (boolean),
``open_mode`` (``["APPEND"]``), ``memory_per_cpu`` (a number), ``distribution``,
``wckey``, ``reservation``, ``licenses`` (strings), ``temporary_disk_per_node`` (MB).

Contract: :func:`rest_fields` returns the fields for the passed options of a job, or
``None`` when one of them has no field here (or the dialect has none,
``Dialect.passed_rest`` false: v0.0.38): the back end then submits the job with sbatch,
which reads every option as it always does (``--begin``, ``--signal``, ``--hint``, GPUs
…). ``comment`` is never spelled here: the job's comment holds it after the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurm_adapter.dialects import Dialect

__all__ = ["rest_fields"]

#: sbatch's --mail-type names -> slurmrestd's flags (ALL and NONE: through sbatch).
_MAIL = {"BEGIN": "BEGIN", "END": "END", "FAIL": "FAIL", "REQUEUE": "REQUEUE",
         "TIME_LIMIT": "TIME=100%", "TIME_LIMIT_90": "TIME=90%", "TIME_LIMIT_80": "TIME=80%",
         "TIME_LIMIT_50": "TIME=50%", "STAGE_OUT": "STAGE_OUT", "ARRAY_TASKS": "ARRAY_TASKS",
         "INVALID_DEPEND": "INVALID_DEPENDENCY"}


def rest_fields(values: Mapping[str, Any], dialect: Dialect) -> dict[str, Any] | None:
    """slurmrestd fields for ``values`` (passed option -> stored value), or ``None``."""
    fields: dict[str, Any] = {}
    for name, value in values.items():
        if name == "comment":
            continue
        if not dialect.passed_rest:
            return None
        if name == "mail_type":
            flags = str(value).split(",")
            if not all(flag in _MAIL for flag in flags):
                return None
            fields["mail_type"] = [_MAIL[flag] for flag in flags]
        elif name in ("mail_user", "distribution", "wckey", "reservation", "licenses"):
            fields[name] = value
        elif name == "tmp_mb":
            fields["temporary_disk_per_node"] = int(value)
        elif name == "requeue":
            fields["requeue"] = bool(value)
        elif name == "open_mode":
            fields["open_mode"] = [str(value).upper()]
        elif name == "mem_per_cpu_mb":
            fields["memory_per_cpu"] = dialect.encode_number(int(value))
        else:
            return None
    return fields
