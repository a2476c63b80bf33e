"""Slurm's records read into the bridge's terms: job states, jobs (``BackendJob``), nodes
(``NodeInfo``) and a whole listing, for every REST dialect and ``squeue``/``sinfo
--json``.

Contract: pure functions of the records and the dialect (no I/O): safe in a worker
thread. :func:`job_from_slurm` gives None for a job without a bridge key;
:func:`convert_listing` keeps, of several jobs with one key and one owner, the
unfinished one (else the newest) and every job of another owner (for the engine to tell
the real one from a forgery).

A native Slurm array carries one key for all its tasks, :func:`bridge.arrays.array_key`
``K+F``. :func:`jobs_from_slurm` reads each of its records as the bridge's tasks: a task
Slurm has split off (its own record: started, or held or changed on its own) is one job,
id ``S_I`` (``S`` the array's Slurm id, as squeue shows it) and uid
:func:`bridge.arrays.uid_in_array`; the array's pending remainder (one record, its tasks
as a list in ``array_task_string``) is one pending job per listed task, each with the
remainder's state and reason. A list Slurm cut short (``...``: longer than
``SLURM_BITSTR_LEN``, which the commands are run with at 0 and slurmrestd must be
started with) gives the tasks before the cut, and is logged. A list of more than
:data:`MAX_REMAINDER` tasks, or a key on a record of no array, is nobody's (a user's
own job with a forged key).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog

from bridge.arrays import MAX_ARRAY_SIZE, expand_listed, parse_array_key, uid_in_array
from bridge.backend import (
    BackendJob,
    BackendState,
    NodeInfo,
)
from slurm_adapter import hostlist
from slurm_adapter.dialects import (
    Dialect,
)
from slurm_adapter.ids import slurm_id_order
from slurm_adapter.launch import LAUNCH_FAILURE, launch_failure_detail
from slurm_adapter.script import (
    COMMENT_PREFIX,
    DEFAULT_OUTPUT,
    expand_output_pattern,
)

__all__ = ["CUT", "MAX_REMAINDER", "backend_state", "convert_listing", "cut_lists",
           "gpu_count", "job_from_slurm", "jobs_from_slurm", "node_from_slurm"]

#: The most pending tasks one native array's remainder is read as: the bridge's own
#: largest array (bridge/arrays.py), so more is a forged key.
MAX_REMAINDER = MAX_ARRAY_SIZE
#: Slurm's ``NO_VAL`` (and ``INFINITE``): no task index.
NO_TASK = 0xFFFFFFFE
#: The id suffix of the marker :func:`jobs_from_slurm` gives for a list Slurm cut short
#: (``S_...``): not a job; the reading that holds one is incomplete.
CUT = "_..."

#: The back end's own logger (what it logged from here before the split).
log = structlog.get_logger("slurm_adapter.backend")

_BASE_STATES: dict[str, BackendState] = {
    "PENDING": BackendState.PENDING,
    "RUNNING": BackendState.RUNNING,
    "SUSPENDED": BackendState.SUSPENDED,
    "COMPLETED": BackendState.COMPLETED,
    "CANCELLED": BackendState.CANCELLED,
    "FAILED": BackendState.FAILED,
    "TIMEOUT": BackendState.TIMEOUT,
    "NODE_FAIL": BackendState.FAILED,
    "PREEMPTED": BackendState.FAILED,
    "BOOT_FAIL": BackendState.FAILED,
    "DEADLINE": BackendState.FAILED,
    "OUT_OF_MEMORY": BackendState.FAILED,
}
#: State flags that override the base state, in Slurm's own order of precedence
#: (``job_state_string``: a COMPLETING job shows as COMPLETING, whatever its base).
_FLAG_STATES: tuple[tuple[str, BackendState], ...] = (
    ("COMPLETING", BackendState.RUNNING),
    ("STAGE_OUT", BackendState.RUNNING),
    ("CONFIGURING", BackendState.PENDING),
    ("POWER_UP_NODE", BackendState.PENDING),
    ("RESIZING", BackendState.RUNNING),
    ("REQUEUED", BackendState.PENDING),
    ("REQUEUE_FED", BackendState.PENDING),
    ("REQUEUE_HOLD", BackendState.PENDING),
    ("SPECIAL_EXIT", BackendState.PENDING),
    ("RESV_DEL_HOLD", BackendState.PENDING),
    ("STOPPED", BackendState.SUSPENDED),
    ("REVOKED", BackendState.CANCELLED),
    ("LAUNCH_FAILED", BackendState.FAILED),
    ("RECONFIG_FAIL", BackendState.FAILED),
    ("SIGNALING", BackendState.RUNNING),
)
#: The reason of a pending job its owner holds (``scontrol hold``/``requeuehold``, as
#: the bridge suspends a job in Slurm): it is suspended, as a Kubernetes JobSet with
#: ``spec.suspend`` (bridge/outcome.py). An operator's hold (``JobHeldAdmin``) stays a
#: pending reason: the bridge, acting as the owner, could not release it anyway.
HELD_REASONS = frozenset({"JobHeldUser"})
#: ... with no description (``scontrol hold``) or the one ``requeuehold`` gives: Slurm
#: sets JobHeldUser itself too ("launch failed requeued held", RequeueExitHold), and
#: those are Slurm's reasons to keep, not a suspension for the bridge to undo.
HELD_DESCRIPTIONS = frozenset({"", "None", "job requeued in held state"})
#: Node states/flags under which a node takes no new work (its free capacity is 0).
#: Node states (or flags) that take a node out of use.
UNUSABLE_NODE_STATES = _UNUSABLE_NODE = frozenset({
    "DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "FUTURE", "UNKNOWN",
    "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "MAINTENANCE",
    "REBOOT_REQUESTED", "REBOOT_ISSUED", "INVALID", "INVALID_REG",
})


def backend_state(names: Iterable[str]) -> BackendState:
    """The bridge state for Slurm's state names (base state and flags, any order)."""
    found = {n.upper() for n in names}
    for flag, state in _FLAG_STATES:
        if flag in found:
            return state
    for name in found:
        if name in _BASE_STATES:
            return _BASE_STATES[name]
    return BackendState.UNKNOWN


def _text(raw: Any) -> str:
    return raw if isinstance(raw, str) else ""


def job_from_slurm(raw: Any, dialect: Dialect) -> BackendJob | None:
    """A :class:`BackendJob` for one Slurm job record (a dict, or
    :class:`slurm_adapter.listing.JobFields`), or None if the bridge did not
    submit it (its comment lacks the ``hpc-bridge:`` prefix)."""
    comment = _text(raw.get("comment"))
    # The user's own --comment follows the key after a space.
    job_uid = comment[len(COMMENT_PREFIX):].partition(" ")[0]
    if not comment.startswith(COMMENT_PREFIX) or not job_uid:
        return None
    job_id = dialect.number(raw.get("job_id"))
    if job_id is None:
        return None
    names = dialect.states(raw.get("job_state"))
    state = backend_state(names)
    held = (state is BackendState.PENDING and _text(raw.get("state_reason")) in HELD_REASONS
            and _text(raw.get("state_description")) in HELD_DESCRIPTIONS)
    if held:
        state = BackendState.SUSPENDED  # its owner's hold (scontrol hold/requeuehold)
    completing = "COMPLETING" in names
    ended = state.finished or completing

    start = dialect.number(raw.get("start_time"))
    end = dialect.number(raw.get("end_time"))
    exit_code, signal = (dialect.exit_status(raw.get("exit_code")) if state.finished
                         else (None, None))
    try:
        nodes = tuple(hostlist.expand(_text(raw.get("nodes"))))
    except hostlist.HostlistError as exc:
        log.warning("job %s: %s", job_id, exc)
        nodes = ()

    array_job = dialect.number(raw.get("array_job_id")) or None
    array_task = dialect.number(raw.get("array_task_id"))
    default_out = "slurm-%A_%a.out" if array_job else DEFAULT_OUTPUT
    out_pattern = _text(raw.get("standard_output")) or default_out
    err_pattern = _text(raw.get("standard_error")) or out_pattern
    chdir = _text(raw.get("current_working_directory")) or "/"

    def resolve(pattern: str) -> str:
        return expand_output_pattern(
            pattern, job_id, _text(raw.get("name")), _text(raw.get("user_name")), chdir,
            array_job_id=array_job, array_task_id=array_task,
            node=_text(raw.get("batch_host")) or None,
        )

    stdout, stderr = resolve(out_pattern), resolve(err_pattern)
    reason = _text(raw.get("state_reason"))
    description = _text(raw.get("state_description"))
    detail: str | None = None
    owner_uid = dialect.number(raw.get("user_id"))
    if state is BackendState.FAILED and reason == LAUNCH_FAILURE and (signal or 0) >= 32:
        # Not a signal the script got (a script killed by SIGKILL also reads
        # JobLaunchFailure, with signal 9) but slurmd's error code: say which output
        # file could not be opened instead of "killed by signal 53".
        exit_code, signal = None, None
        detail = _launch_detail(job_id, (stdout, stderr), owner_uid)
    if description:
        reason = f"{reason}: {description}" if reason and reason != "None" else description
    return BackendJob(
        backend_id=str(job_id),
        job_uid=job_uid,
        state=state,
        native_state="+".join(names) or "UNKNOWN",
        exit_code=exit_code,
        signal=signal,
        reason=reason if reason and reason != "None" else None,
        nodes=nodes,
        # A pending (or held) job's start_time is Slurm's expectation, not a start.
        start_time=(float(start) if start and state is not BackendState.PENDING and not held
                    else None),
        end_time=float(end) if end and ended else None,
        stdout_path=stdout,
        stderr_path=stderr,
        queue=str(raw.get("partition") or "") or None,
        owner_uid=owner_uid,
        detail=detail,
        note=comment[len(COMMENT_PREFIX) + len(job_uid):].strip() or None,
    )


def jobs_from_slurm(raw: Any, dialect: Dialect, arrays: bool = False
                    ) -> tuple[BackendJob, ...]:
    """The bridge's jobs one Slurm record stands for (module docstring): none, one
    (:func:`job_from_slurm`), or, for a back end that submits native arrays
    (``arrays``), a native array's tasks; without it a record keyed as an array's is
    nobody's (no daemon of this back end made it: a user's own job cannot make it read
    one record as many)."""
    job = job_from_slurm(raw, dialect)
    if job is None:
        return ()
    if parse_array_key(job.job_uid) is None:
        return (job,)
    if not arrays:
        return ()
    key = job.job_uid
    array_id = dialect.number(raw.get("array_job_id"))
    task = dialect.number(raw.get("array_task_id"))
    if task is not None and task >= NO_TASK:
        task = None  # Slurm's NO_VAL: the remainder, in a dialect that says so
    if not array_id:
        return ()  # an array's key on a job of no array: not the bridge's
    if task is not None:
        uid = uid_in_array(key, task)
        assert uid is not None  # the key parsed above
        return (dataclasses.replace(job, backend_id=f"{array_id}_{task}", job_uid=uid),)
    text = _text(raw.get("array_task_string"))
    if not text:
        # No pending task left in the record: an array whose pending tasks were all
        # cancelled at once (``scancel S``) lists none. Its tasks are cancelled one by
        # one (``S_I``) by the bridge, each then a record of its own.
        return ()
    listed = expand_listed(text, MAX_REMAINDER)
    if listed is None:
        log.warning("array %s: its pending tasks are not a list of at most %d tasks; "
                    "not the bridge's", array_id, MAX_REMAINDER)
        return ()
    indexes, cut = listed
    tasks = tuple(dataclasses.replace(job, backend_id=f"{array_id}_{i}",
                                      job_uid=uid_in_array(key, i) or key,
                                      stdout_path=out, stderr_path=err)
                  for i in indexes for out, err in (_task_paths(raw, dialect, i),))
    if cut:  # the tasks after the cut are unknown, not gone: the marker says so
        return (*tasks, dataclasses.replace(job, backend_id=f"{array_id}{CUT}"))
    return tasks


def _task_paths(raw: Any, dialect: Dialect, index: int) -> tuple[str | None, str | None]:
    """The output paths of a pending task ``index`` of a remainder record (the record's
    own are resolved with no task)."""
    task = job_from_slurm({key: raw.get(key) for key in _PATH_FIELDS} | {
        "array_task_id": index}, dialect)
    return (task.stdout_path, task.stderr_path) if task is not None else (None, None)


#: The fields of a record the output paths are resolved from.
_PATH_FIELDS = ("comment", "job_id", "array_job_id", "standard_output", "standard_error",
                "current_working_directory", "name", "user_name", "batch_host",
                "job_state")


@functools.lru_cache(maxsize=4096)
def _launch_detail(job_id: object, paths: tuple[str, str], owner_uid: int | None) -> str:
    """:func:`launch_failure_detail`, once per failed job: a finished job stays in every
    listing for MinJobAge, and the explanation walks directories and the user database
    (on the event loop) that need not be walked at every poll."""
    return launch_failure_detail(paths, owner_uid)


def _split_gres(text: str) -> list[str]:
    """``gpu:a100:2(S:0-1),mps:100`` -> items (commas inside parentheses kept)."""
    items, depth, current = [], 0, ""
    for c in text:
        depth += (c == "(") - (c == ")")
        if c == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += c
    items.append(current)
    return [i.strip() for i in items if i.strip()]


def gpu_count(gres: str) -> int:
    """The number of GPUs in a gres string (``gpu:2``, ``gpu:a100:4(S:0-1)``)."""
    total = 0
    for item in _split_gres(gres):
        parts = re.sub(r"\(.*\)$", "", item).split(":")
        if parts[0] != "gpu":
            continue
        count = parts[-1] if len(parts) > 1 else "1"
        m = re.match(r"^(\d+)", count)
        total += int(m.group(1)) if m else 1
    return total


def node_from_slurm(raw: Mapping[str, Any], dialect: Dialect) -> NodeInfo:
    """A :class:`NodeInfo` for one Slurm node record (slurmrestd ``/nodes``, ``sinfo --json``).

    ``state`` is Slurm's, upper case, flags joined by ``+`` (``IDLE+DRAIN``). A node
    that cannot take work (down, drained, not responding …) has no free capacity.
    """
    states = list(dialect.states(raw.get("state")))
    flags = raw.get("state_flags")
    if isinstance(flags, list):
        states += [str(f).upper() for f in flags if str(f).upper() not in states]
    cpus = dialect.number(raw.get("cpus")) or 0
    alloc_cpus = dialect.number(raw.get("alloc_cpus")) or 0
    memory = dialect.number(raw.get("real_memory")) or 0
    alloc_memory = dialect.number(raw.get("alloc_memory")) or 0
    gpus = gpu_count(_text(raw.get("gres")))
    used_gpus = gpu_count(_text(raw.get("gres_used")))
    usable = not (set(states) & _UNUSABLE_NODE)
    partitions = raw.get("partitions")
    features = raw.get("active_features") or raw.get("features")
    return NodeInfo(
        name=_text(raw.get("name")),
        state="+".join(states) or "UNKNOWN",
        cpus=cpus,
        free_cpus=max(cpus - alloc_cpus, 0) if usable else 0,
        memory_mb=memory,
        free_memory_mb=max(memory - alloc_memory, 0) if usable else 0,
        gpus=gpus,
        free_gpus=max(gpus - used_gpus, 0) if usable else 0,
        partitions=tuple(str(p) for p in partitions) if isinstance(partitions, list) else (),
        features=dialect.features(features),
    )


def _prefer(a: BackendJob, b: BackendJob) -> BackendJob:
    """Of two Slurm jobs with one uid: the unfinished one, else the newest."""
    if a.state.finished != b.state.finished:
        return b if a.state.finished else a
    return a if slurm_id_order(a.backend_id) > slurm_id_order(b.backend_id) else b



def convert_listing(raw_jobs: list[Any], dialect: Dialect,
                    convert: Callable[[Any, Dialect], tuple[BackendJob, ...]] | None = None
                    ) -> tuple[list[BackendJob], dict[str, int]]:
    """The bridge's jobs in a Slurm listing (see :meth:`SlurmBackend._bridge_jobs`) and
    every listed bridge job's owner uid by Slurm id. Each record (a dict, or anything
    with a dict's ``get``: :class:`slurm_adapter.listing.JobFields`) is converted by
    ``convert`` (default :func:`jobs_from_slurm`; the same answer, perhaps remembered).
    Pure: safe in a worker thread."""
    convert = convert or jobs_from_slurm
    return pick_jobs(job for raw in raw_jobs if hasattr(raw, "get")
                     for job in convert(raw, dialect))


def cut_lists(jobs: list[BackendJob]) -> tuple[list[BackendJob], bool]:
    """``jobs`` without the markers of lists Slurm cut short, and whether there was one
    (the reading then knows the array's other pending tasks as neither there nor gone)."""
    if not any(j.backend_id.endswith(CUT) for j in jobs):
        return jobs, False  # the very list: a reading like the last is told by identity
    return [j for j in jobs if not j.backend_id.endswith(CUT)], True


def pick_jobs(jobs: Iterable[BackendJob | None]) -> tuple[list[BackendJob], dict[str, int]]:
    """Of converted records (None: not the bridge's), one job per key and owner (the
    unfinished one, else the newest), in the order first seen, and every job's owner
    uid by Slurm id."""
    by_key: dict[tuple[str, int | None], BackendJob] = {}
    owners: dict[str, int] = {}
    for job in jobs:
        if job is None:
            continue
        if job.owner_uid is not None:
            owners[job.backend_id] = job.owner_uid
        key = (job.job_uid, job.owner_uid)
        seen = by_key.get(key)
        by_key[key] = job if seen is None else _prefer(seen, job)
    return list(by_key.values()), owners

