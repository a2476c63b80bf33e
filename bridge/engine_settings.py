"""The engine's settings (:class:`EngineSettings`, from ``[engine]`` and the back ends'
``placement`` keys) and what admission hands from the worker thread to the loop
(:class:`Admission`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.model import TrainJob
from bridge.store_arrays import ArrayTaskRow
from bridge.trainer_status import ReportSettings


@dataclass(frozen=True)
class EngineSettings:
    default_backend: str
    poll_interval: float = 2.0
    submit_timeout: float = 15.0
    max_parallel_submits: int = 8
    retry_base: float = 1.0
    retry_cap: float = 60.0
    #: A tracked job missing from this many consecutive complete snapshots is lost.
    lost_after_snapshots: int = 5
    #: ...and only once it has been missing for at least this many seconds.
    lost_after_seconds: float = 30.0
    default_namespace: str = "default"
    #: Placement mode per back end name (``constraints`` when not named).
    placement: Mapping[str, str] = field(default_factory=dict)
    #: An inventory older than this (seconds) is read again before a job is placed.
    placement_max_age: float = 5.0
    #: After a submission the inventory is read again once it is this old (seconds).
    placement_min_reread: float = 1.0
    #: Routing rule: partition -> back end, for jobs that name no back end.
    partition_routes: Mapping[str, str] = field(default_factory=dict)
    #: Progress reports (``[trainer_status]``): None while they are off.
    status_reports: ReportSettings | None = None


@dataclass(frozen=True)
class Admission:
    """A job checked and made ready to store by :meth:`Engine.prepare`."""

    job: TrainJob
    backend: str
    num_nodes: int
    partition: str | None
    #: ``json.dumps(job.to_dict())`` and :func:`bridge.job_summary.job_summary`.
    document: str
    summary: dict[str, Any]
    #: The job's :class:`bridge.shape.JobShape` (stored form), resolved once, here.
    shape: dict[str, Any] | None = None
    #: A job array's tasks (``--array``, bridge/arrays.py), each with its own uid, name
    #: and document; empty for a plain job.
    tasks: tuple[ArrayTaskRow, ...] = ()
