"""The shapes of the daemon's answers, as the client hands them on (type information).

Only the type checker sees the classes below: at run time :data:`JobView` and
:data:`Transition` are ``dict`` and :class:`SubmitResult` a ``collections.namedtuple``
with the same fields and defaults. Importing :mod:`typing` (for ``TypedDict`` and
``NamedTuple``) costs every t* command ~2 ms of its start (``tbatch`` is measured
against ``python -c pass``, docs/operations.md). ``TYPE_CHECKING`` is this module's
own ``False`` for the same reason; mypy treats any name spelled so as its own.
"""

TYPE_CHECKING = False

__all__ = ["JobView", "SubmitResult", "Transition"]

if TYPE_CHECKING:
    from typing import Any, NamedTuple, TypedDict

    Transition = TypedDict(
        "Transition",
        {"from": str | None, "to": str, "reason": str | None, "message": str | None,
         "at": str | None},
        total=False,
    )

    class JobView(TypedDict, total=False):
        """A job as the API shows it (times are RFC 3339 strings or ``None``)."""

        id: int
        uid: str
        name: str
        namespace: str
        jobName: str
        user: str
        unixUid: int
        backend: str | None
        backendId: str | None
        state: str
        reason: str | None
        message: str | None
        runtime: str
        numNodes: int
        nodes: list[str] | None
        exitCode: int | None
        partition: str | None
        timeLimitMinutes: int | None
        submitTime: str | None
        startTime: str | None
        endTime: str | None
        stdout: str | None
        stderr: str | None
        #: The engine's placement decision: hosts, levels, score, mode, pinned, note.
        placement: dict[str, Any] | None
        #: A task of a job array (bridge/arrays.py): the array's job id, the task's index
        #: and the array's indexes (normal form); absent for a plain job.
        arrayJobId: int
        arrayTaskId: int
        arrayTasks: str
        #: tqueue's: the indexes of the pending tasks folded into this row (squeue's view).
        foldedTasks: list[int]
        #: The job's latest progress report (bridge/trainer_status.py); in listings
        #: without ``metrics``.
        trainerStatus: dict[str, Any]
        trainJob: dict[str, Any]
        transitions: list[Transition]

    class SubmitResult(NamedTuple):
        """The daemon's answer to a submission.

        (A NamedTuple, not a dataclass: importing :mod:`dataclasses` costs the commands
        ~10 ms of start-up, through :mod:`inspect`.)
        """

        id: int
        uid: str
        name: str
        state: str
        #: sbatch's ``--parsable`` (command line, ``#SBATCH`` line or input variable), as the
        #: daemon read it from a ``POST /v1/sbatch``; False for a TrainJob.
        parsable: bool = False
        #: ``--test-only``: the back end's estimate of when and where the job would start;
        #: nothing was submitted (``id`` 0, ``uid``/``name``/``state`` empty).
        estimate: str | None = None

else:
    from collections import namedtuple

    Transition = dict
    JobView = dict
    SubmitResult = namedtuple(
        "SubmitResult", ["id", "uid", "name", "state", "parsable", "estimate"],
        defaults=[False, None],
    )
