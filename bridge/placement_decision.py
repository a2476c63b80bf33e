"""The placement decision for one job: pure, what the engine does before a submit.

:func:`plan_placement` turns a TrainJob, its launch plan and scheduling options, the
back end's placement mode and topology into a :class:`PlacementDecision`: place it
(:func:`bridge.placement.tree_best_fit`), pin the hosts (mode ``nodelist``), wait for
``--switches=N@T``, or leave the choice to the back end. It reads its arguments only
and changes nothing; :class:`bridge.engine.Engine` applies the decision (submits,
records it on the job, or keeps the job ``Pending``). docs/placement.md says it in prose.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from bridge.model import TrainJob
from bridge.placement import Placement, PlacementRequest, tree_best_fit, within_switches
from bridge.placement_request import features_of, request_from_job
from bridge.runtimes import LaunchPlan
from bridge.scheduling import SchedulingOptions
from bridge.topology import Topology

__all__ = [
    "DEFAULT_PLACEMENT_MODE",
    "DEFAULT_SWITCH_WAIT_SECONDS",
    "PlacementDecision",
    "booked_in",
    "plan_placement",
]

#: The placement mode of a back end its configuration does not name (docs/placement.md;
#: the modes are :data:`bridge.config.PlacementMode`).
DEFAULT_PLACEMENT_MODE = "constraints"
#: Slurm's default ``max_switch_wait``: how long ``--switches=N`` without ``@T`` waits.
DEFAULT_SWITCH_WAIT_SECONDS = 300.0


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class PlacementDecision:
    """What the engine does about one job's placement before submitting it.

    ``wait``: do not submit now (``--switches`` cannot be met yet). ``pin``: the back
    end must use ``placement.hosts`` (mode ``nodelist``). ``options``: changes to the
    job's scheduling options for this submission (``--switches`` dropped when pinned or
    relaxed; its wait shortened to what is left). ``note`` says why, for messages.
    """

    mode: str
    placement: Placement | None = None
    request: PlacementRequest | None = None
    pin: bool = False
    wait: bool = False
    relaxed: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""

    def record(self, at: float) -> dict[str, Any]:
        """The JSON stored on the job (``jobs.placement``) and shown by the API."""
        data: dict[str, Any] = (self.placement.to_dict() if self.placement is not None
                                else {"hosts": [], "levels": [], "score": "", "reason": ""})
        data.update({"mode": self.mode, "pinned": self.pin, "waiting": self.wait,
                     "relaxed": self.relaxed, "note": self.note, "at": _utc(at)})
        return data


def booked_in(topology: Topology | None,
              decisions: list[PlacementDecision]) -> Topology | None:
    """``topology`` with the units of these decisions' fitting placements taken (the
    jobs placed earlier in one pass, whatever topology placed them: hosts are shared)."""
    for d in decisions:
        if (topology is not None and d.placement is not None and d.placement.fits
                and d.request is not None):
            hosts = topology.hosts
            request = d.request
            topology = topology.with_hosts(  # a host this topology lacks: nothing to take
                request.allocate(hosts[h], n)
                for h, n in zip(d.placement.hosts, d.placement.units, strict=True)
                if h in hosts)
    return topology


def plan_placement(job: TrainJob, plan: LaunchPlan, options: SchedulingOptions, mode: str,
                   topology: Topology | None, admitted_at: float, now: float,
                   backend: str = "the back end", pack_units: bool = False,
                   ) -> PlacementDecision:
    """The placement decision for one job (pure; docs/placement.md says it in prose).

    * mode ``none``, a job naming its own nodes (``--nodelist``), or no inventory yet:
      no placement; the back end chooses.
    * Otherwise :func:`bridge.placement.tree_best_fit` on ``topology``. With
      ``--switches=N@T`` (T defaults to 300 s, Slurm's ``max_switch_wait``):
      :func:`bridge.placement.within_switches`; when that does not fit and ``now`` is
      before ``admitted_at + T`` the decision is ``wait``; after it, the job goes
      without the constraint (``relaxed``).
    * ``nodelist`` pins the hosts when the placement fits now and the job's
      ``--constraint`` could be evaluated (a plain conjunction of features); then
      ``--switches`` is dropped (the pin enforces it). ``constraints`` keeps
      ``--switches`` with the wait that is left, so that the world enforces it too.
    * A job that does not fit anywhere now is submitted unpinned: the world queues it.
    * ``pack_units``: a node of the job is a pod, and several may share a host
      (Kubernetes); otherwise each needs a host of its own (Slurm, Flux).
    """
    if mode == "none":
        return PlacementDecision(mode, note="placement is off for this back end")
    if options.nodelist:
        return PlacementDecision(mode, note="the job names its nodes (--nodelist)")
    if topology is None:
        return PlacementDecision(mode, note=f"no inventory of {backend} yet; it chooses")
    try:
        request = request_from_job(job, plan, options)
    except ValueError as exc:
        return PlacementDecision(mode, note=f"not placed: {exc}")
    if pack_units:
        request = replace(request, one_per_host=False)
    best = tree_best_fit(topology, request)
    placement, relaxed, note = best, False, ""
    updates: dict[str, Any] = {}
    if options.switches is not None:
        n = options.switches
        wait = (DEFAULT_SWITCH_WAIT_SECONDS if options.switches_wait_minutes is None
                else options.switches_wait_minutes * 60.0)
        deadline = admitted_at + wait
        within = within_switches(topology, request, n)
        if within.fits:
            placement = within
            if mode == "constraints":
                updates["switches_wait_minutes"] = max(math.ceil((deadline - now) / 60.0), 0)
        elif now < deadline:
            spans = (f"; the best placement now uses {len(best.leaf_domains)} "
                     f"({', '.join(best.leaf_domains)})" if best.fits else "")
            return PlacementDecision(
                mode, within, request, wait=True,
                note=(f"--switches={n}: {within.reason}{spans}; waiting until "
                      f"{_utc(deadline)}, then submitting without the constraint"))
        else:
            relaxed = True
            updates.update(switches=None, switches_wait_minutes=None)
            note = (f"waited {wait / 60:g} min for {n} leaf switch(es) (--switches); "
                    f"submitted without the constraint")
    pin = False
    if mode == "nodelist" and placement.fits:
        if features_of(options.constraint) is None:
            note = (note + "; " if note else "") + (
                f"--constraint={options.constraint!r} is not evaluated: not pinned")
        else:
            pin = True
            updates.update(switches=None, switches_wait_minutes=None)
    if not placement.fits and not relaxed:
        note = f"no placement now ({placement.reason}); {backend} queues it"
    elif not placement.fits:
        note += f"; no placement now ({placement.reason})"
    return PlacementDecision(mode, placement, request, pin=pin, relaxed=relaxed,
                             options=updates, note=note)
