"""Front doors: other ways than the API for jobs to come in (Kubernetes TrainJob CRs).

A front door is built by an entry point of the ``hpc_bridge.frontdoors`` group
(``(name, settings) -> FrontDoor``), configured as ``[frontdoors.NAME]`` with
``kind = ...``, so that ``bridge`` never imports an adapter. The daemon starts it once
the engine is ready and hands it the :class:`bridge.service.JobService`: its only way
to jobs (admit, cancel, suspend, find, list, and the change feed it reports back to
its world from). It never touches the store or a back end. It must survive its world
being down: :meth:`FrontDoor.run` returns only when cancelled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from bridge.backend import load_plugin

if TYPE_CHECKING:
    from bridge.service import JobService

ENTRY_POINT_GROUP = "hpc_bridge.frontdoors"


@runtime_checkable
class FrontDoor(Protocol):
    name: str

    async def run(self, service: JobService) -> None:
        """Serve until cancelled (errors of the world are retried, never raised)."""

    async def close(self) -> None:
        """Release connections."""


def load_frontdoor(kind: str, name: str, settings: dict[str, Any]) -> FrontDoor:
    """Build the front door registered as ``kind``; ValueError names the known kinds or
    the adapter's complaint about its settings."""
    door = load_plugin(ENTRY_POINT_GROUP, "front-door", kind, name, settings)
    if not isinstance(door, FrontDoor):
        raise ValueError(f"entry point {kind!r} did not build a FrontDoor")
    return door
