"""Why Slurm could not launch a batch job, in words (``JobLaunchFailure``).

When slurmd cannot open a batch job's ``--output``/``--error`` file (a directory that
does not exist, or that the job's user may not write), Slurm 22.05 ends the job
``FAILED`` with reason ``JobLaunchFailure`` and a raw exit status whose low bits read
as "signal 53" — an internal error code, not a signal (a script killed by a real
signal, e.g. SIGKILL, also reads ``JobLaunchFailure``; the back end treats a
"signal" of 32 or more as the error code). The job record does not name
the file, so :func:`launch_failure_detail` looks at the output paths as the job's
user would (the daemon sees the same shared file system as the nodes, as ``tlog``
needs anyway) and says which one could not be opened and why.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Iterable
from pathlib import Path

#: Slurm's state reason for a batch job slurmd could not start.
LAUNCH_FAILURE = "JobLaunchFailure"


def _groups(uid: int) -> set[int]:
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return set()
    return set(os.getgrouplist(pw.pw_name, pw.pw_gid))


def _may(st: os.stat_result, uid: int, groups: set[int], bits: int) -> bool:
    """Whether ``uid`` (in ``groups``) has the permission ``bits`` (an ``rwx`` mask of
    one triple, e.g. ``0o3`` for write+search) on a file with status ``st``."""
    if uid == 0:
        return True
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid == uid:
        have = mode >> 6
    elif st.st_gid in groups:
        have = mode >> 3
    else:
        have = mode
    return have & bits == bits


def unopenable(path: str, uid: int) -> str | None:
    """Why user ``uid`` cannot create or append to ``path`` (None: it looks possible)."""
    groups = _groups(uid)
    target = Path(path)
    parent = target.parent
    try:
        st = parent.stat()
    except FileNotFoundError:
        return f"directory {parent} does not exist"
    except OSError as exc:
        return f"directory {parent}: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{parent} is not a directory"
    for ancestor in [*reversed(parent.parents), parent]:
        try:
            if not _may(ancestor.stat(), uid, groups, 0o1):
                return f"directory {ancestor} is not searchable by uid {uid}"
        except OSError:
            break
    try:
        existing = target.stat()
    except FileNotFoundError:
        if not _may(st, uid, groups, 0o3):
            return f"directory {parent} is not writable by uid {uid}"
        return None
    except OSError as exc:
        return exc.strerror
    if not _may(existing, uid, groups, 0o2):
        return f"the file is not writable by uid {uid}"
    return None


def launch_failure_detail(paths: Iterable[str | None], uid: int | None) -> str:
    """The message for a ``JobLaunchFailure``: the output file(s) that could not be
    opened and why, else a general hint naming the paths."""
    distinct = [p for p in dict.fromkeys(paths) if p]
    if uid is not None:
        for path in distinct:
            why = unopenable(path, uid)
            if why is not None:
                return f"{LAUNCH_FAILURE}: could not open output file {path} ({why})"
    where = f" (output: {', '.join(distinct)})" if distinct else ""
    return (f"{LAUNCH_FAILURE}: slurmd could not start the batch script; check that its "
            f"output files can be created by the job's user{where}")
