"""Scheduling options that a TrainJob has no field for (partition, time limit, output …).

They travel with the TrainJob as JSON in the ``hpc-bridge.io/scheduling`` annotation,
so that the TrainJob document alone says everything about the job. ``tbatch`` fills
them from ``#SBATCH`` lines and options; a Kubernetes user may write the annotation.

Contract: :func:`scheduling_of` returns the options of a job (defaults when the
annotation is absent) or raises :class:`bridge.model.ValidationError` naming the
annotation; :func:`set_scheduling` writes them back.
"""

from __future__ import annotations

import re
from typing import Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator

from bridge.hostlist import HostlistError, expand
from bridge.model import ANN_SCHEDULING, TrainJob, ValidationError, parse_json_object

_PRINTABLE = re.compile(r"^[^\x00-\x1f\x7f]*$")


def _printable(value: str | None, what: str, limit: int = 1024) -> str | None:
    if value is None:
        return None
    if not _PRINTABLE.match(value):
        raise ValueError(f"{what} contains control characters (newline, tab, ...): {value!r}")
    if len(value) > limit:
        raise ValueError(f"{what} longer than {limit} characters")
    return value


class SchedulingOptions(BaseModel):
    """Options with a Slurm meaning; back ends translate what they support."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    job_name: str | None = Field(default=None, description="Slurm job name (-J)")
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit_minutes: int | None = Field(default=None, ge=1)
    ntasks: int | None = Field(default=None, ge=1)
    ntasks_per_node: int | None = Field(default=None, ge=1)
    cpus_per_task: int | None = Field(default=None, ge=1)
    gpus_per_node: int | None = Field(default=None, ge=0)
    mem_per_node_mb: int | None = Field(default=None, ge=1)
    output: str | None = None
    error: str | None = None
    chdir: str | None = Field(default=None, description="working directory of the job")
    exclusive: bool = False
    switches: int | None = Field(default=None, ge=1)
    switches_wait_minutes: int | None = Field(default=None, ge=0)
    export: Literal["ALL", "NONE"] | None = None
    nodelist: str | None = None
    exclude: str | None = None
    constraint: str | None = None

    @field_validator("job_name", "partition", "account", "qos", "nodelist", "exclude",
                     "constraint")
    @classmethod
    def _names(cls, v: str | None) -> str | None:
        return _printable(v, "value", 256)

    @field_validator("nodelist", "exclude")
    @classmethod
    def _hostlists(cls, v: str | None) -> str | None:
        """A host list Slurm would take (``node[1-4]``): a malformed one is refused here,
        naming what is wrong, rather than reaching placement or the back end."""
        if v is not None:
            try:
                expand(v)
            except HostlistError as exc:
                raise ValueError(exc.reason) from None
        return v

    @field_validator("output", "error", "chdir")
    @classmethod
    def _paths(cls, v: str | None) -> str | None:
        return _printable(v, "path", 4096)


def scheduling_of(job: TrainJob) -> SchedulingOptions:
    """The job's scheduling options (defaults if it has none)."""
    raw = job.metadata.annotations.get(ANN_SCHEDULING)
    if raw is None:
        return SchedulingOptions()
    where = f"metadata.annotations[{ANN_SCHEDULING}]"
    # The one decoder of untrusted JSON (UTF-8, no NaN, bounded depth and size).
    data = parse_json_object(raw.encode("utf-8", "surrogatepass"), where)
    try:
        return SchedulingOptions.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ValidationError(
            [(f"{where}.{'.'.join(str(p) for p in e['loc'])}",
              e["msg"].removeprefix("Value error, ")) for e in exc.errors()]
        ) from None


def set_scheduling(job: TrainJob, options: SchedulingOptions) -> None:
    """Store ``options`` on the job (only the fields that differ from the defaults)."""
    job.metadata.annotations[ANN_SCHEDULING] = options.model_dump_json(exclude_defaults=True)
