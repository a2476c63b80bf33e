"""The Slurm-like commands: ``tbatch``, ``tqueue``, ``tshow``, ``tcancel``, ``tlog``.

Each entry point is ``(argv: list[str] | None = None) -> int`` (``None``: ``sys.argv``)
and returns the exit status. User errors (bad options, unreachable daemon, refused
request) print ``<prog>: error: <message>`` on stderr and return 1 -- never a
traceback. A request refused by a per-user limit of the daemon (429) is asked again
after its ``Retry-After`` when that is at most 10 s, at most 3 times
(:class:`bridge.client.BridgeClient`); then the daemon's message is printed. Ctrl-C
returns 130; a closed stdout pipe (``tlog ... | head``) returns 1 quietly.

* ``tbatch [OPTIONS] [script.sh [ARGS]]`` / ``--wrap CMD`` / ``-f TRAINJOB.yaml``: submit
  (the script comes from stdin when none is named, like sbatch); prints
  ``Submitted batch job <id>`` or, with ``--parsable``, ``<id>``.
* ``tqueue``: squeue's default table (``JOBID PARTITION NAME USER ST TIME NODES
  NODELIST(REASON)``), ``-u/--user``, ``--me``, ``-t/--states``, ``-j/--jobs``,
  ``-h/--noheader``, ``--json``, ``-M/--clusters NAMES|all`` (only those back ends'
  jobs, with a CLUSTER column: the back end's name).
* ``tshow REF``: ``scontrol show job``-like ``Key=Value`` lines (``--json``, ``--yaml``).
* ``tcancel REF...``: cancel; one scancel-like error line per failure, exit 1 if any.
* ``tlog [-f] [-e] REF``: the job's output (``-f`` follows until the job has ended).

Start-up time matters (these commands run hundreds of times a day, in loops and
``watch``): only ``tbatch`` imports the TrainJob model (pydantic) and the sbatch
parser, ``tshow --yaml`` PyYAML, ``--version`` importlib.metadata, ``tqueue``/``tshow``
python-hostlist -- each where it is needed. Keep new imports at module level light.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn

from bridge.client import BridgeClient, BridgeClientError, JobView
from bridge.slurmtime import format_minutes, format_seconds

__all__ = [
    "COMPACT_STATES",
    "format_queue",
    "format_show",
    "tbatch_main",
    "tcancel_main",
    "tlog_main",
    "tqueue_main",
    "tshow_main",
]

#: squeue's compact state codes for the bridge's job states.
COMPACT_STATES = {
    "Pending": "PD",
    "Submitted": "PD",
    "Running": "R",
    "Suspended": "S",
    "Succeeded": "CD",
    "Failed": "F",
    "Cancelled": "CA",
}
_NOT_STARTED = frozenset({"Pending", "Submitted", "Suspended"})
_ALL_STATES = ("Pending", "Suspended", "Submitted", "Running", "Succeeded", "Failed", "Cancelled")
#: ``-t`` words (compact codes, Slurm's long names, the bridge's names) -> bridge states.
_STATE_WORDS: dict[str, tuple[str, ...]] = {
    "PD": ("Pending", "Submitted"),
    "PENDING": ("Pending", "Submitted"),
    "SUBMITTED": ("Submitted",),
    "R": ("Running",),
    "RUNNING": ("Running",),
    "S": ("Suspended",),
    "SUSPENDED": ("Suspended",),
    "CD": ("Succeeded",),
    "COMPLETED": ("Succeeded",),
    "SUCCEEDED": ("Succeeded",),
    "F": ("Failed",),
    "FAILED": ("Failed",),
    "CA": ("Cancelled",),
    "CANCELLED": ("Cancelled",),
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_LOG_RETRIES = 5
#: bridge.model's ANN_BATCH_SCRIPT and ANN_SCHEDULING, copied so that tshow does not
#: import the model (pydantic); tests/unit/test_cli.py checks that they are the same.
_ANN_BATCH_SCRIPT = "hpc-bridge.io/batch-script"
_ANN_SCHEDULING = "hpc-bridge.io/scheduling"


class _UserError(Exception):
    """A user error to print as ``prog: error: message`` (exit 1)."""


class _ArgumentParser(argparse.ArgumentParser):
    """argparse that reports errors as ``prog: error: ...`` and exit status 1."""

    def error(self, message: str) -> NoReturn:
        raise _UserError(message)


def _err(prog: str, message: str) -> None:
    for line in message.split("\n"):
        print(f"{prog}: error: {line}", file=sys.stderr)


def _run(prog: str, body: Callable[[], int]) -> int:
    """Run a command body, turning user errors into messages and exit statuses."""
    try:
        return body()
    except (BridgeClientError, _UserError) as exc:
        _err(prog, str(exc))
    except KeyboardInterrupt:
        return 130
    except SystemExit as exc:  # argparse's --help
        return exc.code if isinstance(exc.code, int) else 0
    except BrokenPipeError:
        # Output consumer went away (``| head``); keep Python quiet at shutdown.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 1


def _clean(value: object) -> str:
    """A value for a terminal: control characters (ESC, newline ...) shown escaped."""
    text = "" if value is None else str(value)
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def _client() -> BridgeClient:
    return BridgeClient.from_env()


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("hpc-bridge")
    except metadata.PackageNotFoundError:
        return "unknown"


# ------------------------------------------------------------------------ tbatch


def _find_script(path: str) -> str:
    """sbatch's lookup: the path as given, else (a bare name) the first match on PATH."""
    if os.path.exists(path) or "/" in path:
        return path
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(directory or ".", path)
        if os.path.isfile(candidate) and os.access(candidate, os.R_OK):
            return candidate
    return path


def _read_limited(path: str | None) -> bytes:
    from bridge.sbatch import MAX_SCRIPT_BYTES, SbatchError

    if path is None:
        if sys.stdin.isatty():
            print(
                "tbatch: reading the batch script from standard input (end with Ctrl-D)",
                file=sys.stderr,
            )
        return sys.stdin.buffer.read(MAX_SCRIPT_BYTES + 1)
    try:
        with open(path, "rb") as fh:
            return fh.read(MAX_SCRIPT_BYTES + 1)
    except OSError:
        raise SbatchError(f"Unable to open file {path}") from None


def _read_script(path: str | None) -> str:
    from bridge.sbatch import MAX_SCRIPT_BYTES, SbatchError

    data = _read_limited(None if path in (None, "-") else _find_script(str(path)))
    if len(data) > MAX_SCRIPT_BYTES:
        raise SbatchError(f"Batch script is too large (more than {MAX_SCRIPT_BYTES} bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not data.startswith(b"#!"):
            return data.decode("utf-8", "replace")  # check_script says what is wrong
        line = data.count(b"\n", 0, exc.start) + 1
        raise SbatchError(f"{path or '<stdin>'}:{line}: the batch script is not UTF-8 text "
                          f"(byte {data[exc.start]:#04x})") from None


def _getcwd() -> str:
    from bridge.sbatch import SbatchError

    try:
        return os.getcwd()
    except OSError as exc:
        raise SbatchError(f"getcwd failed: {exc.strerror}") from None


def _tbatch(argv: list[str]) -> int:
    from bridge.sbatch import SbatchError

    try:
        return _submit(argv)
    except SbatchError as exc:  # already worded "tbatch: error: ..."
        print(str(exc), file=sys.stderr)
        return 1


def _submit(argv: list[str]) -> int:
    from bridge.sbatch import (
        SbatchError,
        help_text,
        parse_command_line,
        parse_tbatch,
        to_trainjob,
        trainjob_from_file,
    )

    cmd = parse_command_line(argv)
    if cmd.help:
        sys.stdout.write(help_text())
        return 0
    if cmd.version:
        print(f"tbatch (hpc-bridge {_version()})")
        return 0
    if cmd.trainjob_file is not None:
        request = parse_tbatch(argv)
        try:
            with open(cmd.trainjob_file, encoding="utf-8") as fh:
                text = fh.read(8 * 1024 * 1024)
        except (OSError, UnicodeDecodeError):
            raise SbatchError(f"Unable to open file {cmd.trainjob_file}") from None
        job = trainjob_from_file(request, text)
    else:
        script = None if cmd.wrap is not None else _read_script(cmd.script_path)
        request = parse_tbatch(argv, script)
        job = to_trainjob(request, cwd=_getcwd(), environ=os.environ)
    with _client() as client:
        result = client.submit(job)
    print(result.id if request.parsable else f"Submitted batch job {result.id}")
    return 0


def tbatch_main(argv: list[str] | None = None) -> int:
    """``tbatch``: submit a batch script, a ``--wrap`` command or a TrainJob file."""
    args = sys.argv[1:] if argv is None else list(argv)
    return _run("tbatch", lambda: _tbatch(args))


# ------------------------------------------------------------------------ tqueue


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _elapsed(job: JobView, now: datetime) -> str:
    start = _parse_time(job.get("startTime"))
    if start is None:
        return format_seconds(0)
    end = _parse_time(job.get("endTime")) or now
    return format_seconds(max(0, int((end - start).total_seconds())))


def _nodelist(nodes: Iterable[str] | None) -> str:
    names = [str(n) for n in nodes or [] if n]
    if not names:
        return ""
    import hostlist  # python-hostlist: sorts and folds like Slurm's own hostlist

    try:
        return str(hostlist.collect_hostlist(names))
    except (hostlist.BadHostlist, ValueError):  # a name it cannot compress is still shown
        return ",".join(names)


def _nodes_or_reason(job: JobView) -> str:
    state = job.get("state") or ""
    reason = job.get("reason")
    nodes = _nodelist(job.get("nodes"))
    if state in _NOT_STARTED:
        return f"({reason or 'None'})"
    if not nodes and reason:
        return f"({reason})"
    return nodes


def _compact(state: str | None) -> str:
    return COMPACT_STATES.get(state or "", (state or "?")[:2].upper())


def _cell(value: object, width: int) -> str:
    """squeue's ``%.Nx``: right-justified, cut to ``width``."""
    return _clean(value)[:width].rjust(width)


_QUEUE_COLUMNS = (
    (18, "JOBID"),
    (9, "PARTITION"),
    (8, "NAME"),
    (8, "USER"),
    (2, "ST"),
    (10, "TIME"),
    (6, "NODES"),
)


_CLUSTER_WIDTH = 12


def format_queue(
    jobs: Sequence[JobView], *, header: bool = True, now: datetime | None = None,
    cluster: bool = False,
) -> str:
    """The squeue-like table (``%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R``); with
    ``cluster``, a first CLUSTER column (the job's back end), as ``squeue -M``."""
    now = now or datetime.now(UTC)
    lines = []

    def prefix(value: object) -> str:
        return _cell(value, _CLUSTER_WIDTH) + " " if cluster else ""

    if header:
        lines.append(prefix("CLUSTER")
                     + " ".join(title.rjust(w) for w, title in _QUEUE_COLUMNS)
                     + " NODELIST(REASON)")
    for job in jobs:
        nodes = job.get("nodes") or []
        row = (
            job.get("id"),
            job.get("partition") or "",
            job.get("jobName") or job.get("name"),
            job.get("user"),
            _compact(job.get("state")),
            _elapsed(job, now),
            len(nodes) if nodes else job.get("numNodes", 1),
        )
        cells = [_cell(v, w) for (w, _), v in zip(_QUEUE_COLUMNS, row, strict=True)]
        lines.append(prefix(job.get("backend") or "") + " ".join(cells) + " "
                     + _clean(_nodes_or_reason(job)))
    return "\n".join(lines) + ("\n" if lines else "")


def _states(words: str) -> tuple[list[str], bool]:
    """``-t`` words -> (bridge states, all)."""
    states: list[str] = []
    for word in (w.strip() for w in words.split(",")):
        if not word:
            continue
        if word.upper() == "ALL":
            return [], True
        mapped = _STATE_WORDS.get(word.upper())
        if mapped is None:
            raise _UserError(f"Invalid job state specified: {word}")
        states += [s for s in mapped if s not in states]
    return states, False


def _current_user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def _tqueue(argv: list[str]) -> int:
    parser = _ArgumentParser(
        prog="tqueue", add_help=False, description="Show jobs known to hpc-bridge (like squeue)."
    )
    parser.add_argument("-u", "--user", help="only these users' jobs (comma-separated)")
    parser.add_argument("--me", action="store_true", help="only my jobs")
    parser.add_argument("-t", "--states", help="states: PD,R,S,CD,F,CA,... or all")
    parser.add_argument("-j", "--jobs", help="only these jobs (comma-separated ids/names)")
    parser.add_argument("-h", "--noheader", action="store_true", help="no header line")
    parser.add_argument("--json", action="store_true", help="print the jobs as JSON")
    parser.add_argument("-M", "--clusters",
                        help="only these back ends' jobs (comma-separated, or all), "
                             "with a CLUSTER column")
    parser.add_argument("--help", action="help", help="show this help")
    args = parser.parse_args(argv)
    clusters = {c for c in (args.clusters or "").split(",") if c}
    users = [u for u in (args.user or "").split(",") if u]
    if args.me:
        users.append(_current_user())
    states, all_states = _states(args.states) if args.states else ([], False)
    wanted = [j for j in (args.jobs or "").split(",") if j]
    if wanted and not args.states:
        all_states = True  # like squeue -j: show the job whatever its state
    collected: list[JobView] = []
    header = not args.noheader and not args.json
    with _client() as client:
        # The daemon pages oldest first: each page is printed as it arrives.
        for page in client.iter_pages(
            states=states or None,
            all_states=all_states,
            user=users[0] if len(set(users)) == 1 else None,
        ):
            jobs = sorted(page, key=lambda j: j.get("id") or 0)  # pages come in id order
            if users:
                jobs = [j for j in jobs if j.get("user") in users]
            if wanted:
                jobs = [j for j in jobs
                        if {str(j.get("id")), j.get("name"), j.get("uid")} & set(wanted)]
            if clusters and "all" not in clusters:
                jobs = [j for j in jobs if j.get("backend") in clusters]
            if args.json:
                collected += jobs
            elif jobs or header:
                sys.stdout.write(format_queue(jobs, header=header, cluster=bool(clusters)))
                header = False
    if args.json:
        print(json.dumps({"items": collected}, indent=2, ensure_ascii=False))
    return 0


def tqueue_main(argv: list[str] | None = None) -> int:
    """``tqueue``: list jobs, like squeue."""
    args = sys.argv[1:] if argv is None else list(argv)
    return _run("tqueue", lambda: _tqueue(args))


# ------------------------------------------------------------------------- tshow


def _local_time(value: str | None) -> str:
    parsed = _parse_time(value)
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
    return " ".join(f"{k}={_clean('None' if v is None or v == '' else v)}" for k, v in pairs)


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
        ("Placement", _nodelist(placement.get("hosts")) or None),
        ("Switches", ",".join(str(d) for d in leaves or []) or None),
        ("Score", placement.get("score") or None),
        ("Mode", mode or None),
    ])]
    note = placement.get("note") or placement.get("reason")
    if note:
        lines.append(_pairs([("PlacementNote", note)]))
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
        _pairs([("JobId", job.get("id")), ("JobName", job.get("jobName"))]),
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
            [("NodeList", _nodelist(job.get("nodes")) or None), ("ExitCode", job.get("exitCode"))]
        ),
        *_placement_lines(job.get("placement")),
        _pairs(
            [
                ("Command", "(batch script)" if script else trainer.get("command")),
                ("Args", " ".join(trainer.get("args") or []) or None),
                ("Image", trainer.get("image")),
            ]
        ),
        _pairs([("WorkDir", sched.get("chdir"))]),
        _pairs([("StdOut", job.get("stdout"))]),
        _pairs([("StdErr", job.get("stderr"))]),
    ]
    text = lines[0] + "\n" + "".join(f"   {line}\n" for line in lines[1:])
    transitions = job.get("transitions") or []
    if transitions:
        text += "   Transitions:\n"
        for t in transitions:
            text += (
                f"     {_local_time(t.get('at'))} {_clean(t.get('from') or '-')} -> "
                f"{_clean(t.get('to'))} "
                + _pairs([("Reason", t.get("reason")), ("Message", t.get("message"))])
                + "\n"
            )
    return text


def _tshow(argv: list[str]) -> int:
    parser = _ArgumentParser(prog="tshow", description="Show one job (like scontrol show job).")
    parser.add_argument("job", help="job id, TrainJob uid or name")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print the job as JSON")
    output.add_argument("--yaml", action="store_true", help="print the job as YAML")
    args = parser.parse_args(argv)
    with _client() as client:
        job = client.get_job(args.job)
    if args.json:
        print(json.dumps(job, indent=2, ensure_ascii=False))
    elif args.yaml:
        import yaml

        sys.stdout.write(yaml.safe_dump(dict(job), sort_keys=False, allow_unicode=True))
    else:
        sys.stdout.write(format_show(job))
    return 0


def tshow_main(argv: list[str] | None = None) -> int:
    """``tshow``: show one job in detail."""
    args = sys.argv[1:] if argv is None else list(argv)
    return _run("tshow", lambda: _tshow(args))


# ----------------------------------------------------------------------- tcancel


def _tcancel(argv: list[str]) -> int:
    parser = _ArgumentParser(prog="tcancel", description="Cancel jobs (like scancel).")
    parser.add_argument("jobs", nargs="+", metavar="job", help="job ids, uids or names")
    args = parser.parse_args(argv)
    failed = False
    with _client() as client:
        for ref in args.jobs:
            try:
                client.cancel(ref)
            except BridgeClientError as exc:
                if exc.status is None:
                    raise  # the daemon is unreachable: say so once
                reason = {403: "Access/permission denied", 404: "Invalid job id specified"}.get(
                    exc.status, exc.message
                )
                _err("tcancel", f"Kill job error on job id {_clean(ref)}: {reason}")
                failed = True
    return 1 if failed else 0


def tcancel_main(argv: list[str] | None = None) -> int:
    """``tcancel``: cancel jobs; exit status 1 when any cancellation failed."""
    args = sys.argv[1:] if argv is None else list(argv)
    return _run("tcancel", lambda: _tcancel(args))


# -------------------------------------------------------------------------- tlog


def _tlog(argv: list[str]) -> int:
    parser = _ArgumentParser(prog="tlog", description="Print a job's output.")
    parser.add_argument(
        "-f", "--follow", action="store_true", help="keep printing until the job has ended"
    )
    parser.add_argument(
        "-e",
        "--stderr",
        action="store_true",
        help="the standard error stream instead of standard output",
    )
    parser.add_argument("job", help="job id, TrainJob uid or name")
    args = parser.parse_args(argv)
    stream = "stderr" if args.stderr else "stdout"
    out = sys.stdout.buffer
    offset, retries = 0, 0
    with _client() as client:
        while True:
            try:
                for chunk in client.stream_log(
                    args.job, stream=stream, offset=offset, follow=args.follow
                ):
                    out.write(chunk)
                    out.flush()
                    offset += len(chunk)
                    retries = 0
                return 0
            except BridgeClientError as exc:
                # A dropped connection while following (daemon restart): resume.
                if not args.follow or exc.status is not None or retries >= _LOG_RETRIES:
                    raise
                retries += 1
                time.sleep(min(2.0**retries, 10.0))


def tlog_main(argv: list[str] | None = None) -> int:
    """``tlog``: print (``-f``: follow) a job's standard output or error."""
    args = sys.argv[1:] if argv is None else list(argv)
    return _run("tlog", lambda: _tlog(args))
