"""``tshow``: show one job in detail, like ``scontrol show job``.

::

    tshow [--json | --yaml] REF

``REF`` is a job id, TrainJob uid or name. Prints :func:`format_show`'s ``Key=Value``
lines (times in the local zone, values with control characters escaped, ``None`` for
what is unset), then the job's state transitions; ``--json`` or ``--yaml`` print the
daemon's job view instead. A job the caller may not see, or that does not exist, is
the daemon's error (exit 1); errors and exit statuses as every command
(:mod:`bridge.cli.common`). PyYAML is imported only for ``--yaml``, python-hostlist
only when there are nodes to fold.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from bridge.cli.args import ArgumentParser
from bridge.cli.common import clean, connect, expand_tasks, nodelist, run
from bridge.cli.queue_format import parse_time
from bridge.client import JobView
from bridge.slurmtime import format_minutes, format_seconds

__all__ = ["format_show", "tshow_main"]

#: bridge.model's ANN_BATCH_SCRIPT and ANN_SCHEDULING, copied so that tshow does not
#: import the model (pydantic); tests/unit/test_cli.py checks that they are the same.
_ANN_BATCH_SCRIPT = "hpc-bridge.io/batch-script"
_ANN_SCHEDULING = "hpc-bridge.io/scheduling"


def _local_time(value: str | None) -> str:
    parsed = parse_time(value)
    if parsed is None:
        return value or "Unknown"
    return parsed.astimezone().strftime("%Y-%m-%dT%H:%M:%S")


def _scheduling(job: JobView) -> dict[str, Any]:
    annotations = (job.get("trainJob") or {}).get("metadata", {}).get("annotations") or {}
    try:
        options = json.loads(annotations.get(_ANN_SCHEDULING) or "{}")
    except (TypeError, ValueError):
        return {}
    return options if isinstance(options, dict) else {}


def _pairs(pairs: Sequence[tuple[str, object]]) -> str:
    return " ".join(f"{k}={clean('None' if v is None or v == '' else v)}" for k, v in pairs)


def _placement_lines(placement: Any) -> list[str]:
    """``Placement=node[1-2] Switches=leaf1 Score=leaf:1,level1:1 Mode=constraints`` and,
    when there is one, a ``PlacementNote=`` line (nothing for jobs never placed)."""
    if not isinstance(placement, dict):
        return []
    levels = placement.get("levels") or []
    leaves = levels[0].get("domains") if levels and isinstance(levels[0], dict) else None
    mode = str(placement.get("mode") or "")
    if placement.get("pinned"):
        mode += "(pinned)"
    elif placement.get("waiting"):
        mode += "(waiting)"
    elif placement.get("hosts") and mode == "constraints":
        mode += "(predicted)"
    lines = [_pairs([
        ("Placement", nodelist(placement.get("hosts")) or None),
        ("Switches", ",".join(str(d) for d in leaves or []) or None),
        ("Score", placement.get("score") or None),
        ("Mode", mode or None),
    ])]
    note = placement.get("note") or placement.get("reason")
    if note:
        lines.append(_pairs([("PlacementNote", note)]))
    return lines


def _progress_lines(status: Any) -> list[str]:
    """What the job last reported from inside (bridge/trainer_status.py)."""
    if not isinstance(status, dict) or not status:
        return []
    eta = status.get("estimatedRemainingSeconds")
    percent = status.get("progressPercentage")
    lines = [_pairs([("Progress", None if percent is None else f"{percent}%"),
                     ("EstimatedRemaining", None if eta is None else format_seconds(int(eta))),
                     ("ProgressTime", _local_time(status.get("lastUpdatedTime")))])]
    metrics = status.get("metrics") or []
    if metrics:
        lines.append(_pairs([("Metrics", ",".join(
            f"{m.get('name')}={m.get('value')}" for m in metrics if isinstance(m, dict)))]))
    return lines


def format_show(job: JobView) -> str:
    """``scontrol show job``-like text: ``Key=Value`` lines, then the state transitions."""
    spec = (job.get("trainJob") or {}).get("spec") or {}
    trainer = spec.get("trainer") or {}
    sched = _scheduling(job)
    resources = (trainer.get("resourcesPerNode") or {}).get("requests") or {}
    script = ((job.get("trainJob") or {}).get("metadata", {}).get("annotations") or {}).get(
        _ANN_BATCH_SCRIPT
    )
    limit = job.get("timeLimitMinutes")
    lines = [
        _pairs([("JobId", job.get("id")),
                *([("ArrayJobId", job["arrayJobId"]), ("ArrayTaskId", job.get("arrayTaskId")),
                   ("ArrayTasks", job.get("arrayTasks"))] if job.get("arrayJobId") else []),
                ("JobName", job.get("jobName"))]),
        _pairs(
            [
                ("UserId", f"{job.get('user')}({job.get('unixUid')})"),
                ("Namespace", job.get("namespace")),
                ("Name", job.get("name")),
                ("Uid", job.get("uid")),
            ]
        ),
        _pairs(
            [
                ("JobState", job.get("state")),
                ("Reason", job.get("reason")),
                ("Message", job.get("message")),
            ]
        ),
        _pairs([("Backend", job.get("backend")), ("BackendJobId", job.get("backendId"))]),
        _pairs([("Dependency", sched.get("dependency")),
                ("KillOInvalidDependent", "Yes" if sched.get("kill_on_invalid_dep") else "No")]),
        _pairs(
            [
                ("Runtime", job.get("runtime")),
                ("NumNodes", job.get("numNodes")),
                ("NumProcPerNode", trainer.get("numProcPerNode")),
                ("NumTasks", sched.get("ntasks")),
                ("CPUs/Task", sched.get("cpus_per_task")),
            ]
        ),
        _pairs(
            [
                ("Partition", job.get("partition")),
                ("Account", sched.get("account")),
                ("QOS", sched.get("qos")),
                ("TimeLimit", "Partition_Limit" if limit is None else format_minutes(limit)),
            ]
        ),
        _pairs(
            [
                ("TRES/Node", ",".join(f"{k}={v}" for k, v in resources.items()) or None),
                ("Exclusive", "Yes" if sched.get("exclusive") else "No"),
                ("Features", sched.get("constraint")),
                ("ReqNodeList", sched.get("nodelist")),
                ("ExcNodeList", sched.get("exclude")),
            ]
        ),
        _pairs(
            [
                ("SubmitTime", _local_time(job.get("submitTime"))),
                ("StartTime", _local_time(job.get("startTime"))),
                ("EndTime", _local_time(job.get("endTime"))),
            ]
        ),
        _pairs(
            [("NodeList", nodelist(job.get("nodes")) or None), ("ExitCode", job.get("exitCode"))]
        ),
        *_placement_lines(job.get("placement")),
        *_progress_lines(job.get("trainerStatus")),
        _pairs(
            [
                ("Command", "(batch script)" if script else trainer.get("command")),
                ("Args", " ".join(trainer.get("args") or []) or None),
                ("Image", trainer.get("image")),
            ]
        ),
        _pairs([("WorkDir", sched.get("chdir") or sched.get("submit_dir"))]),
        _pairs([("StdOut", job.get("stdout"))]),
        _pairs([("StdErr", job.get("stderr"))]),
    ]
    text = lines[0] + "\n" + "".join(f"   {line}\n" for line in lines[1:])
    transitions = job.get("transitions") or []
    if transitions:
        text += "   Transitions:\n"
        for t in transitions:
            text += (
                f"     {_local_time(t.get('at'))} {clean(t.get('from') or '-')} -> "
                f"{clean(t.get('to'))} "
                + _pairs([("Reason", t.get("reason")), ("Message", t.get("message"))])
                + "\n"
            )
    return text


def _tshow(argv: list[str]) -> int:
    parser = ArgumentParser(prog="tshow", description="Show one job (like scontrol show job).")
    parser.add_argument("job", help="job id, TrainJob uid or name")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print the job as JSON")
    output.add_argument("--yaml", action="store_true", help="print the job as YAML")
    args = parser.parse_args(argv)
    with connect() as client:
        job = client.get_job(args.job)
        array = job.get("arrayJobId")
        if (not (args.json or args.yaml) and array is not None and array == job.get("id")
                and args.job == str(array)):
            # scontrol show job A: every task of the array, a record each.
            spec = str(job.get("arrayTasks") or "").partition("%")[0]
            refs = expand_tasks(f"{array}_[{spec}]") if spec else []
            first = f"{array}_{job.get('arrayTaskId')}"
            tasks = [client.get_job(ref) for ref in refs if ref != first]
            sys.stdout.write("\n".join(format_show(j) for j in [job, *tasks]))
            return 0
    if args.json:
        print(json.dumps(job, indent=2, ensure_ascii=False))
    elif args.yaml:
        import yaml

        sys.stdout.write(yaml.safe_dump(dict(job), sort_keys=False, allow_unicode=True))
    else:
        sys.stdout.write(format_show(job))
    return 0


def tshow_main(argv: list[str] | None = None) -> int:
    """``tshow``: show one job in detail (``argv`` ``None``: ``sys.argv``); returns the
    exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    return run("tshow", lambda: _tshow(args))
