"""A directory of this user's alone, held open: where a job's cache tasks meet.

Contract: :meth:`PrivateDir.open` makes the directory (``create``: mode 0700; a
directory another task of the job made first is fine) and opens it once, with
``O_DIRECTORY | O_NOFOLLOW``; the open directory must belong to this user and give no
permission to anyone else, else :class:`CacheStartError` (someone else planted it). Every
later read, write, test and removal goes through that descriptor, never the path again:
renaming the directory away and putting a link or another directory in its place (which
anyone who may write the parent can do, in a shared working directory without the
sticky bit) changes nothing. :meth:`read` returns only files of this user that nobody
else may write; :meth:`write` is atomic (a new file, then ``rename``), mode 0600.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

__all__ = ["CacheStartError", "PrivateDir"]


class CacheStartError(Exception):
    """The cache did not start; the message says which server and why."""


def _mine(st: os.stat_result, mask: int) -> bool:
    return st.st_uid == os.getuid() and not stat.S_IMODE(st.st_mode) & mask


class PrivateDir:
    """An open private directory (see the module docstring)."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path

    @classmethod
    def open(cls, path: Path, *, create: bool = False) -> tuple[PrivateDir, bool]:
        """Open (and with ``create`` make) ``path``; also whether this call made it."""
        made = False
        if create:
            try:
                os.mkdir(path, 0o700)
                made = True
            except FileExistsError:
                pass
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as exc:
            raise CacheStartError(f"{path}: {exc.strerror} (a private directory of this "
                                  "user's was expected)") from None
        if not _mine(os.fstat(fd), 0o077):
            os.close(fd)
            raise CacheStartError(f"{path} is not a private directory of this user "
                                  "(someone else made it): the cache does not use it")
        return cls(fd, path), made

    def read(self, name: str, limit: int) -> bytes | None:
        """The first ``limit`` bytes of file ``name`` (None: there is none yet)."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CacheStartError(f"{name}: unreadable: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as fh:
            if not _mine(os.fstat(fh.fileno()), 0o022):
                raise CacheStartError(f"{name}: not written by this user's cache")
            return fh.read(limit)

    def write(self, name: str, data: bytes) -> None:
        """Write file ``name`` atomically, mode 0600."""
        tmp = f".{name}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                     dir_fd=self.fd)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def exists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def remove(self) -> None:
        """Empty the directory (through its descriptor) and remove it, if the path
        still names it."""
        for name in os.listdir(self.fd):
            with contextlib.suppress(OSError):  # not a file (nothing else is ours here)
                os.unlink(name, dir_fd=self.fd)
        mine = os.fstat(self.fd)
        parent = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            there = os.stat(self.path.name, dir_fd=parent, follow_symlinks=False)
            if (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino):
                os.rmdir(self.path.name, dir_fd=parent)
        except OSError:
            pass  # renamed away or replaced: not ours to remove by that name
        finally:
            os.close(parent)

    def close(self) -> None:
        os.close(self.fd)
