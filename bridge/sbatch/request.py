"""What tbatch was asked, as typed values: the data the parser produces.

Contract: frozen dataclasses, no parsing here. :class:`BatchOptions` holds every option
tbatch understands (``None``: not given); :class:`ExportSpec` a parsed ``--export``;
:class:`CommandLine` the command line alone; :class:`BatchRequest` the result of
:func:`bridge.sbatch.parse_tbatch` (command-line options over ``#SBATCH`` lines).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from bridge.sbatch.errors import SbatchError

__all__ = ["DEFAULT_RUNTIME", "BatchOptions", "BatchRequest", "CommandLine", "ExportSpec"]

#: Runtime of a job that names none (``BatchOptions.runtime`` is ``None``): a plain batch job.
DEFAULT_RUNTIME = "plain"


@dataclass(frozen=True)
class ExportSpec:
    """A parsed ``--export`` value.

    ``all``: the whole submitting environment is exported (``ALL``, the default of
    sbatch); ``items``: explicitly named variables, ``(name, None)`` to copy the
    submitting value, ``(name, value)`` to set one. ``NONE`` is ``all=False, items=()``.
    """

    all: bool
    items: tuple[tuple[str, str | None], ...] = ()

    @property
    def mode(self) -> Literal["ALL", "NONE"]:
        """``ALL`` when the whole environment goes along, else ``NONE`` (only what is named)."""
        return "ALL" if self.all else "NONE"


@dataclass(frozen=True)
class BatchOptions:
    """Every sbatch option tbatch understands, as typed values (``None``: not given)."""

    nodes_min: int | None = None
    #: ``None`` with ``nodes_min`` set: no maximum (``-N 2`` means exactly 2: min=max=2).
    nodes_max: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    gpus_per_node: int | None = None
    gpu_type: str | None = None
    mem_mb: int | None = None
    #: ``None`` with ``time_unlimited=False``: not given (the partition default applies).
    time_limit_minutes: int | None = None
    #: ``--time=UNLIMITED`` (or ``0``/``INFINITE``/``-1``): no limit was asked for.
    time_unlimited: bool = False
    job_name: str | None = None
    output: str | None = None
    error: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    chdir: str | None = None
    exclusive: bool = False
    switches: int | None = None
    switches_wait_minutes: int | None = None
    export: ExportSpec | None = None
    nodelist: str | None = None
    exclude: str | None = None
    constraint: str | None = None
    runtime: str | None = None
    backend: str | None = None
    # Passed to Slurm as they are (bridge/slurm_options.py has the rules).
    mail_type: str | None = None
    mail_user: str | None = None
    signal: str | None = None
    requeue: bool | None = None
    open_mode: str | None = None
    comment: str | None = None
    wckey: str | None = None
    reservation: str | None = None
    licenses: str | None = None
    begin: str | None = None
    deadline: str | None = None
    hint: str | None = None
    mem_per_cpu_mb: int | None = None
    gres: str | None = None
    distribution: str | None = None
    tmp_mb: int | None = None
    gpus: str | None = None
    gpus_per_task: str | None = None
    cpus_per_gpu: int | None = None
    mem_per_gpu_mb: int | None = None
    #: ``-a/--array`` in its normal form: one bridge job per task (bridge/arrays.py).
    array: str | None = None
    # Held by the bridge until met (bridge/dependency.py), on every back end.
    dependency: str | None = None
    kill_on_invalid_dep: bool | None = None
    #: ``-H/--hold``: admitted held (``spec.suspend``), reason ``JobHeldUser``.
    hold: bool = False
    #: ``--test-only``: the daemon checks the job and asks its back end for an estimate.
    test_only: bool = False


@dataclass(frozen=True)
class CommandLine:
    """The command line alone: what to read the script from, and the options given."""

    #: The script named on the command line (``None``: stdin, ``--wrap`` or ``-f``).
    script_path: str | None
    script_args: tuple[str, ...]
    wrap: str | None
    trainjob_file: str | None
    help: bool
    version: bool
    #: Option values by destination (internal: converter output, last one wins).
    option_values: Mapping[str, Mapping[str, Any]] = field(repr=False)
    #: sbatch options refused on the command line (reported with the script's at once).
    refusals: tuple[SbatchError, ...] = ()


class RefusedOptions(SbatchError):
    """Every option tbatch refuses (``error``'s text), and the request the other options
    make (``partial``): the daemon adds what the job's back end refuses of those to the
    same answer, so that one try shows every refusal (bridge/api_submit.py)."""

    def __init__(self, error: SbatchError, partial: BatchRequest) -> None:
        super().__init__(error.message)
        self.args = error.args
        self.partial = partial


@dataclass(frozen=True)
class BatchRequest:
    """Everything ``tbatch`` was asked: options (command line over ``#SBATCH``) and script."""

    options: BatchOptions
    #: Path as given on the command line; ``None`` for stdin, ``--wrap`` and ``-f``.
    script_path: str | None
    #: The script that will run (generated for ``--wrap``); ``None`` with ``-f``.
    script_text: str | None
    script_args: tuple[str, ...] = ()
    wrap: str | None = None
    trainjob_file: str | None = None
    parsable: bool = False
    help: bool = False
    version: bool = False
    #: Where each option given came from, by destination (as :func:`bridge.sbatch.cmdline.
    #: scan` keys values): ``file:line`` of an ``#SBATCH`` line, ``command line``, or the
    #: input variable's name; the one that won. For refusals made later, at admission.
    origins: Mapping[str, str] = field(default_factory=dict)
