"""The allocation holder: its batch script, and what a holder and a JobSet mean together.

A holder is a Slurm batch job of the TrainJob's whole shape whose script only waits:
Slurm's scheduler, fair share and accounting see the Kubernetes work as that job. The
bridge ends it the way the JobSet ended: ``SIGUSR1`` (the batch shell exits 0,
``COMPLETED``) or ``SIGUSR2`` (exit 1, ``FAILED``), sent to the batch shell only
(``scancel --batch --signal``). ``SIGTERM`` (``scancel``, the time limit) ends it as
Slurm reports it.

:func:`compose` is pure: from the holder and the JobSet as their worlds last showed
them, the job's state for the engine and the one action (if any) that brings the two
worlds back in line. It is called again on every change, so every action must be
idempotent and is repeated until its effect shows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from bridge.backend import BackendJob, BackendState

#: The word in the holder's Slurm comment, after the bridge's key.
HOLDER_COMMENT = "k8s-on-slurm"
#: Signals the batch shell maps to its exit status.
SIGNAL_SUCCESS = "USR1"
SIGNAL_FAILURE = "USR2"
#: Reason of a job whose allocation ended before its JobSet did.
ALLOCATION_ENDED = "AllocationEnded"
#: Reason of a job whose JobSet disappeared while its allocation was held.
JOBSET_DELETED = "JobSetDeleted"


def holder_script(jobset: str, job_uid: str) -> str:
    """The holder's batch script: wait until signalled; USR1 exits 0, USR2 exits 1.

    ``wait`` returns when a trapped signal arrives, so the trap runs at once (a plain
    ``sleep`` in the foreground would delay it until the sleep ends). ``jobset`` and
    ``job_uid`` are written in a comment only, and are checked to be a Kubernetes name
    and a uid (no quoting needed)."""
    for part in jobset.split("/"):
        if not part or not all(c.isalnum() or c in "-." for c in part):
            raise ValueError(f"not a namespace/name: {jobset!r}")
    if not all(c.isalnum() or c == "-" for c in job_uid):
        raise ValueError(f"not a uid: {job_uid!r}")
    return (
        "#!/bin/sh\n"
        f"# hpc-bridge allocation holder of JobSet {jobset} (TrainJob uid {job_uid}):\n"
        "# the JobSet's pods run on this job's nodes; the bridge ends this job as the\n"
        "# JobSet ends (USR1: completed, USR2: failed).\n"
        f"trap 'exit 0' {SIGNAL_SUCCESS}\n"
        f"trap 'exit 1' {SIGNAL_FAILURE}\n"
        "trap 'exit 143' TERM\n"
        "while :; do sleep 3600 & wait $!; done\n"
    )


class Do(StrEnum):
    """What brings a holder and its JobSet in line."""

    NOTHING = "nothing"
    #: The holder runs: label its nodes, pin the JobSet's pods to them, unsuspend it.
    PIN = "pin"
    #: The holder waits again (requeued, held): suspend the JobSet, its pods go.
    UNPIN = "unpin"
    #: The JobSet ended: end the holder with USR1 (completed) or USR2 (failed).
    END_HOLDER = "end-holder"
    #: The JobSet is gone while the holder lives: cancel the holder.
    CANCEL_HOLDER = "cancel-holder"
    #: The holder ended first: delete the JobSet.
    DELETE_JOBSET = "delete-jobset"


@dataclass(frozen=True)
class JobSetView:
    """What :func:`compose` needs of a JobSet: its state as the Kubernetes back end
    reads it, whether it is suspended, and which allocation its pods are pinned to."""

    job: BackendJob
    suspended: bool
    pinned_to: str | None


@dataclass(frozen=True)
class Composed:
    job: BackendJob | None
    action: Do = Do.NOTHING
    #: For END_HOLDER: the signal.
    signal: str | None = None


def compose(backend_id: str, holder: BackendJob | None, jobset: JobSetView | None,
            synced: bool) -> Composed:
    """The job's state from its ``holder`` (None: not in Slurm's listing) and ``jobset``
    (None: not in Kubernetes; meaningful only when ``synced``, the JobSet watch has
    listed once), with ``backend_id`` as its id, and the action to take.

    * neither: nothing to report (the engine's lost-job rule applies);
    * no holder: once both worlds have listed (``synced``), the JobSet's state if it
      finished; else nothing (not submitted yet, purged from Slurm's table, or Slurm
      not listed yet since a start: the holder's id, part of the job's, is not known),
      and a JobSet pinned or running without one is unpinned;
    * no JobSet (synced): a living holder is cancelled, the job reported ``CANCELLED``
      (the engine's ``CancelledInBackend``; the detail says the JobSet was deleted); an
      ended holder is reported as it ended;
    * the holder waits (``PENDING``/``SUSPENDED``): its state and Slurm's reason; a
      JobSet pinned or running meanwhile is unpinned (suspended); a JobSet that has
      finished is the job's state, and the holder is cancelled;
    * the holder runs: a finished JobSet ends it (USR1/USR2) and is the job's state; an
      unpinned or suspended one is pinned; else ``RUNNING`` on the holder's nodes;
    * the holder ended: a finished JobSet is the job's state; else the JobSet is deleted
      and the job ends with the holder's state (``FAILED`` for a cancel, a node failure
      or a preemption, ``TIMEOUT`` for the time limit), reason ``AllocationEnded``.
    """
    if holder is None:
        if synced and jobset is not None and jobset.job.state.finished:
            return Composed(replace(jobset.job, backend_id=backend_id))
        if synced and jobset is not None and (jobset.pinned_to or not jobset.suspended):
            return Composed(None, Do.UNPIN)  # no allocation: no pod may run
        return Composed(None)
    base = replace(holder, backend_id=backend_id,
                   namespace=jobset.job.namespace if jobset is not None else None)
    if jobset is None:
        if not synced:
            return Composed(None)
        if holder.state.finished:
            return Composed(base)
        return Composed(replace(base, state=BackendState.CANCELLED, reason=JOBSET_DELETED,
                                detail=f"the JobSet was deleted; Slurm job "
                                       f"{holder.backend_id} is cancelled"),
                        Do.CANCEL_HOLDER)
    js = jobset.job
    pinned = jobset.pinned_to == holder.backend_id
    if holder.state in (BackendState.PENDING, BackendState.SUSPENDED, BackendState.UNKNOWN):
        if js.state.finished:  # nothing left to hold nodes for
            return Composed(replace(js, backend_id=backend_id, owner_uid=holder.owner_uid),
                            Do.CANCEL_HOLDER)
        action = Do.UNPIN if (jobset.pinned_to or not jobset.suspended) else Do.NOTHING
        return Composed(base, action)
    if holder.state is BackendState.RUNNING:
        if js.state.finished:
            ok = js.state is BackendState.COMPLETED
            return Composed(replace(js, backend_id=backend_id, nodes=holder.nodes,
                                    owner_uid=holder.owner_uid, start_time=holder.start_time),
                            Do.END_HOLDER, SIGNAL_SUCCESS if ok else SIGNAL_FAILURE)
        if not pinned or jobset.suspended:
            return Composed(replace(base, state=BackendState.PENDING, reason="Binding",
                                    native_state="RUNNING"), Do.PIN)
        return Composed(replace(base, state=BackendState.RUNNING, reason=None))
    # The holder ended.
    if js.state.finished:
        return Composed(replace(js, backend_id=backend_id, nodes=holder.nodes,
                                owner_uid=holder.owner_uid, start_time=holder.start_time))
    state = BackendState.TIMEOUT if holder.state is BackendState.TIMEOUT \
        else BackendState.FAILED
    return Composed(replace(base, state=state, reason=ALLOCATION_ENDED,
                            failure_reason=ALLOCATION_ENDED,
                            detail=f"Slurm job {holder.backend_id} ended "
                                   f"{holder.native_state or holder.state.value} "
                                   f"before the JobSet; the JobSet is deleted"),
                    Do.DELETE_JOBSET)
