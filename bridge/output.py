"""Reading a job's output file on behalf of its owner (for ``tlog``).

The daemon usually runs as root and the path is the user's choice (``--output``),
so a file is read only if it is a regular file, reached without following a final
symlink, and owned by the job's owner (the user the back end wrote it as).
"""

from __future__ import annotations

import errno
import os
import stat

import structlog

log = structlog.get_logger("hpc_bridge.output")

#: At most this many bytes per read (the API streams in chunks).
MAX_CHUNK = 1 << 20


def read_owned(path: str, owner_uid: int, offset: int, limit: int = MAX_CHUNK) -> bytes:
    """Up to ``limit`` bytes of ``path`` from ``offset``; ``b""`` when the file is
    missing, not a regular file, or owned by someone other than ``owner_uid`` (root's
    jobs may read any file root owns or not)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
            log.warning("cannot open job output", path=path, error=exc.strerror)
        return b""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            log.warning("job output is not a regular file", path=path)
            return b""
        if owner_uid != 0 and st.st_uid != owner_uid:
            log.warning("job output belongs to another user", path=path, file_uid=st.st_uid,
                        owner_uid=owner_uid)
            return b""
        return os.pread(fd, limit, offset)
    finally:
        os.close(fd)
