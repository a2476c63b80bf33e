"""Reading a job's output file on behalf of its owner (for ``tlog``).

The daemon usually runs as root and the path is the user's choice (``--output``),
so a file is read only if it is a regular file, reached without following a final
symlink, and owned by the job's owner (the user the back end wrote it as). A file
that is not read for one of these reasons raises :class:`OutputRefused` saying why
(the API answers 403 with it and ``tlog`` exits non-zero); a missing file is no
error (the job has written nothing yet).
"""

from __future__ import annotations

import errno
import os
import stat

import structlog

from bridge.errors import BridgeError

log = structlog.get_logger("hpc_bridge.output")

#: At most this many bytes per read (the API streams in chunks).
MAX_CHUNK = 1 << 20


class OutputRefused(BridgeError):
    """The output file exists but will not be read; ``str()`` says which and why."""


def read_owned(path: str, owner_uid: int, offset: int, limit: int = MAX_CHUNK) -> bytes:
    """Up to ``limit`` bytes of ``path`` from ``offset``; ``b""`` when the file is
    missing. :class:`OutputRefused` when it is a symlink, not a regular file, owned by
    someone other than ``owner_uid`` (root's jobs may read any file) or cannot be
    opened."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return b""
        log.warning("cannot open job output", path=path, error=exc.strerror)
        if exc.errno == errno.ELOOP:
            raise OutputRefused(f"{path} is a symbolic link; not following it") from None
        raise OutputRefused(f"cannot open {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            log.warning("job output is not a regular file", path=path)
            raise OutputRefused(f"{path} is not a regular file")
        if owner_uid != 0 and st.st_uid != owner_uid:
            log.warning("job output belongs to another user", path=path, file_uid=st.st_uid,
                        owner_uid=owner_uid)
            raise OutputRefused(f"{path} belongs to uid {st.st_uid}, not to the job's owner "
                                f"(uid {owner_uid}); not reading it")
        return os.pread(fd, limit, offset)
    finally:
        os.close(fd)
