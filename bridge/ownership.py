"""Which back-end job is a stored job's: its key (the TrainJob uid) AND its owner.

A back-end job carries the TrainJob uid as its key (Slurm ``--comment``, Flux
``attributes.user``, the JobSet's uid label), but anybody who may submit to the world
can write that key on a job of their own: ``sbatch --comment=hpc-bridge:<uid>`` run by
another user must not become the job the bridge tracks (it would make the real one look
lost, or be adopted in its place). So a back-end job is the stored job's only when:

* its world owner (:attr:`BackendJob.owner_uid`: Slurm ``user_id``, Flux ``userid``),
  when the back end reports one, is the uid the job runs as: the job's owner, or the
  back end's own choice (:class:`RunsAs`, e.g. Flux ``submit_as = "daemon"``);
* its namespace (:attr:`BackendJob.namespace`, a JobSet's), when reported, is the
  stored job's namespace (or the one of its recorded back-end id ``namespace/name``).

Any other job carrying the key is *foreign*: ignored, and logged once (a warning) per
back-end job. Back ends report every job carrying a key, whoever owns it; the engine
calls :meth:`OwnerCheck.pick` to keep the stored job's own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

import structlog

from bridge.backend import BackendJob, Owner

log = structlog.get_logger("hpc_bridge.ownership")

#: At most this many foreign jobs are remembered as logged (then the memory starts over).
FOREIGN_MEMORY = 10_000


@runtime_checkable
class RunsAs(Protocol):
    """A back end that may run a job as another uid than its owner's."""

    def world_uid(self, owner: Owner) -> int:
        """The uid the world shows as the owner of ``owner``'s jobs."""


def foreign_reason(bj: BackendJob, world_uid: int, namespace: str,
                   recorded_id: str | None = None) -> str | None:
    """Why ``bj`` is not the job of a stored job whose world owner is ``world_uid`` in
    ``namespace`` (None: it may be). ``recorded_id`` is the back-end id the stored job
    has, if any: a namespaced id (``namespace/name``) gives the expected namespace."""
    if bj.owner_uid is not None and bj.owner_uid != world_uid:
        return f"it belongs to uid {bj.owner_uid}, the job's owner is uid {world_uid}"
    if bj.namespace is not None:
        expected = namespace
        if recorded_id is not None and "/" in recorded_id:
            expected = recorded_id.partition("/")[0]
        if bj.namespace != expected:
            return f"it is in namespace {bj.namespace!r}, the job's is {expected!r}"
    return None


class OwnerCheck:
    """Picks a stored job's own back-end job among those carrying its key; logs each
    foreign one once."""

    def __init__(self) -> None:
        self._logged: set[tuple[str, str]] = set()

    def pick(self, backend_name: str, backend: object, job_id: int, uid: str, owner: Owner,
             namespace: str, jobs: Iterable[BackendJob],
             recorded_id: str | None = None) -> BackendJob | None:
        """The job of ``jobs`` (all carrying ``uid``) that is stored job ``job_id``'s:
        owner and namespace match, the recorded back-end id preferred. None if none is."""
        world_uid = backend.world_uid(owner) if isinstance(backend, RunsAs) else owner.uid
        own: list[BackendJob] = []
        for bj in jobs:
            why = foreign_reason(bj, world_uid, namespace, recorded_id)
            if why is None:
                own.append(bj)
                continue
            key = (backend_name, bj.backend_id)
            if key not in self._logged:
                if len(self._logged) >= FOREIGN_MEMORY:
                    self._logged.clear()
                self._logged.add(key)
                log.warning("foreign back-end job carries a job's key; ignored",
                            backend=backend_name, backend_id=bj.backend_id, job_id=job_id,
                            uid=uid, why=why)
        for bj in own:
            if recorded_id is not None and bj.backend_id == recorded_id:
                return bj
        return own[0] if own else None
