"""Which job a reference (``tshow REF``, ``/v1/jobs/{ref}``) names, for a given caller.

Rules (:func:`resolve`), so that another user's names or uids never capture a caller's
reference (``tshow train`` must show *my* ``train``, ``tcancel train`` cancel it):

* a numeric reference is the bridge's job id: global, as Slurm job ids are (the store
  answers it directly; it is never ambiguous);
* otherwise the candidates are the jobs whose uid or ``metadata.name`` is the
  reference. The caller's own jobs are considered first; only when the caller has
  none do other users' jobs count (root owns none: it sees everyone's);
* within the considered set an exact uid wins; else, among jobs of one owner in one
  namespace, the unfinished one (names are unique among unfinished jobs) or else the
  newest, as in Kubernetes where a name is reused once its object is gone;
* several owners or namespaces left: :class:`AmbiguousJob`, listing the candidates
  (the caller then names the job by id, or adds the namespace).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from bridge.errors import BridgeError

if TYPE_CHECKING:  # the store calls resolve(): no import cycle at run time
    from bridge.store import JobRecord

#: At most this many candidates are listed in an ambiguity error.
LISTED = 10


class AmbiguousJob(BridgeError, LookupError):
    """A reference names several jobs; ``str()`` lists them (id, owner, namespace/name,
    state) and says how to choose."""

    def __init__(self, ref: str, candidates: Sequence[JobRecord]):
        self.candidates = list(candidates)
        shown = ", ".join(f"{r.id} ({r.owner.user}, {r.namespace}/{r.name}, {r.state.value})"
                          for r in self.candidates[:LISTED])
        more = (f" and {len(self.candidates) - LISTED} more"
                if len(self.candidates) > LISTED else "")
        super().__init__(f"{ref!r} names {len(self.candidates)} jobs: {shown}{more}; "
                         f"name one by its id")


def resolve(ref: str, candidates: Sequence[JobRecord],
            caller_uid: int | None) -> JobRecord | None:
    """The job ``ref`` names among ``candidates`` (jobs whose uid or name is ``ref``)
    for the caller with Unix uid ``caller_uid`` (None: no caller preference); None when
    there are no candidates. Raises :class:`AmbiguousJob` rather than guess across
    owners or namespaces."""
    own = [r for r in candidates if caller_uid is not None and r.owner.uid == caller_uid]
    pool = own or list(candidates)
    if not pool:
        return None
    by_uid = [r for r in pool if r.uid == ref]
    if by_uid:
        return by_uid[0]
    groups = {(r.owner.uid, r.namespace) for r in pool}
    live = [r for r in pool if not r.state.terminal]
    if len(groups) > 1:
        # Several owners/namespaces: one live job among finished ones is still not a
        # safe guess (the caller may mean a finished job of another).
        raise AmbiguousJob(ref, sorted(pool, key=lambda r: r.id))
    if live:
        return max(live, key=lambda r: r.id)
    return max(pool, key=lambda r: r.id)
