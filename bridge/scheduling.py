"""Scheduling options that a TrainJob has no field for (partition, time limit, output …).

They travel with the TrainJob as JSON in the ``hpc-bridge.io/scheduling`` annotation,
so that the TrainJob document alone says everything about the job. ``tbatch`` fills
them from ``#SBATCH`` lines and options; a Kubernetes user may write the annotation.

Contract: :func:`scheduling_of` returns the options of a job (defaults when the
annotation is absent) or raises :class:`bridge.model.ValidationError` naming the
annotation; :func:`set_scheduling` writes them back. The options only Slurm honours
(:mod:`bridge.slurm_options`) are checked as tbatch checks them; what each back end
does with each option is :mod:`bridge.option_support`.
"""

from __future__ import annotations

import re
from typing import Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from bridge.arrays import parse as parse_array
from bridge.dependency import MAX_TEXT as MAX_DEPENDENCY_TEXT
from bridge.dependency import parse as parse_dependency
from bridge.hostlist import HostlistError, count, expand
from bridge.model import (
    ANN_SCHEDULING,
    TrainJob,
    ValidationError,
    parse_json_object,
)
from bridge.slurm_options import PASSED

#: Passed options (:mod:`bridge.slurm_options`) stored as text, checked as tbatch checks them.
_PASSED_TEXT = tuple(n for n in PASSED if not n.endswith("_mb") and n != "cpus_per_gpu")

_PRINTABLE = re.compile(r"^[^\x00-\x1f\x7f]*$")
#: The most hosts ``--nodelist`` or ``--exclude`` may name (a short expression can name
#: millions: ``n[0-99999],m[0-99999]``).
MAX_HOSTS = 65536


def _printable(value: str | None, what: str, limit: int = 1024) -> str | None:
    if value is None:
        return None
    if len(value) > limit:
        raise ValueError(f"{what} longer than {limit} characters")
    if not _PRINTABLE.match(value):
        shown = repr(value[:64]) + ("..." if len(value) > 64 else "")
        raise ValueError(f"{what} contains control characters (newline, tab, ...): {shown}")
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
    chdir: str | None = Field(default=None, description="--chdir: working directory of the job")
    #: The directory tbatch ran in (sbatch's ``SLURM_SUBMIT_DIR``): the working directory
    #: of a job that names no ``--chdir`` where the back end can give it one.
    submit_dir: str | None = None
    #: The ``PATH`` of tbatch's environment, for a TrainJob file (``tbatch -f``) whose
    #: trainer sets none: its ``PATH`` on a back end that runs the job on the nodes'
    #: own software (as sbatch exports it), not in a container image's.
    submit_path: str | None = None
    exclusive: bool = False
    switches: int | None = Field(default=None, ge=1)
    switches_wait_minutes: int | None = Field(default=None, ge=0)
    export: Literal["ALL", "NONE"] | None = None
    nodelist: str | None = None
    exclude: str | None = None
    constraint: str | None = None
    # Passed to Slurm as they are (bridge/slurm_options.py); other back ends refuse them.
    mail_type: str | None = None
    mail_user: str | None = None
    signal: str | None = None
    requeue: bool | None = Field(default=None, description="--requeue / --no-requeue")
    open_mode: str | None = None
    comment: str | None = Field(default=None, description="the user's; after the bridge's key")
    wckey: str | None = None
    reservation: str | None = None
    licenses: str | None = None
    begin: str | None = None
    deadline: str | None = None
    hint: str | None = None
    mem_per_cpu_mb: int | None = Field(default=None, ge=1)
    gres: str | None = None
    distribution: str | None = None
    tmp_mb: int | None = Field(default=None, ge=0)
    gpus: str | None = None
    gpus_per_task: str | None = None
    cpus_per_gpu: int | None = Field(default=None, ge=1)
    mem_per_gpu_mb: int | None = Field(default=None, ge=1)
    #: ``--nodes=MIN-MAX``: the most nodes (the least is ``spec.trainer.numNodes``).
    max_nodes: int | None = Field(default=None, ge=1)
    #: ``--dependency`` in its normal form (bridge/dependency.py); the bridge holds the job
    #: until it is met, on every back end.
    dependency: str | None = None
    #: ``--kill-on-invalid-dep``: end the job when its dependency can never be met.
    kill_on_invalid_dep: bool | None = None
    #: ``--array`` in its normal form (bridge/arrays.py): one bridge job per task.
    array: str | None = None
    #: ``--hold``: the job was submitted held (with ``spec.suspend``); admission shows
    #: reason ``JobHeldUser`` rather than ``Suspended``.
    hold: bool = False

    @field_validator(*_PASSED_TEXT)
    @classmethod
    def _passed(cls, v: str | None, info: ValidationInfo) -> str | None:
        """Checked as tbatch checks the option (sbatch's rules, its wording)."""
        if v is None:
            return None
        checked = PASSED[str(info.field_name)].check(v)
        if checked != v:
            raise ValueError(f"not in its normal form {checked!r}")
        return v

    def slurm_only(self) -> list[str]:
        """The sbatch options set here that only Slurm honours (``--mail-type`` ...)."""
        used = [f"--{p.long}" for n, p in PASSED.items() if getattr(self, n) is not None]
        if self.requeue is not None:
            used.insert(0, "--requeue" if self.requeue else "--no-requeue")
        if self.max_nodes is not None:
            used.insert(0, f"--nodes=MIN-MAX (a range, at most {self.max_nodes})")
        return used

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
            if count(v) > MAX_HOSTS:
                raise ValueError(f"names more than {MAX_HOSTS} hosts")
            try:
                expand(v)
            except HostlistError as exc:
                raise ValueError(exc.reason) from None
        return v

    @field_validator("dependency")
    @classmethod
    def _dependency(cls, v: str | None) -> str | None:
        """sbatch's syntax (bridge/dependency.py), kept in its normal form."""
        if v is None:
            return None
        if len(v) > MAX_DEPENDENCY_TEXT:
            raise ValueError(f"longer than {MAX_DEPENDENCY_TEXT} characters")
        return parse_dependency(v).text()

    @field_validator("array")
    @classmethod
    def _array(cls, v: str | None) -> str | None:
        """sbatch's syntax (bridge/arrays.py), kept in its normal form."""
        return None if v is None else parse_array(v).text()

    @field_validator("output", "error", "chdir", "submit_dir")
    @classmethod
    def _paths(cls, v: str | None) -> str | None:
        return _printable(v, "path", 4096)

    @field_validator("submit_path")
    @classmethod
    def _search_path(cls, v: str | None) -> str | None:
        return _printable(v, "PATH", 32768)


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


def partition_of(job: TrainJob) -> str | None:
    """The job's partition option (None when it has none or its options are invalid:
    the submission refuses those, naming the field)."""
    try:
        return scheduling_of(job).partition
    except ValidationError:
        return None


def set_scheduling(job: TrainJob, options: SchedulingOptions) -> None:
    """Store ``options`` on the job (only the fields that differ from the defaults)."""
    job.metadata.annotations[ANN_SCHEDULING] = options.model_dump_json(exclude_defaults=True)
