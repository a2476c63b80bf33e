"""File modes of what the daemon keeps: private state, refused open secrets.

The daemon runs as root for every user; its state directory holds every user's
TrainJob (environment values, batch scripts), so nobody else may read it:

* :data:`DAEMON_UMASK` (``077``) is set when the daemon starts: every file and
  directory it makes is its own only (the API socket is made ``0666`` on purpose,
  and its directory ``0755``, by :func:`bridge.api.serve`). Commands run for a user
  get :data:`JOB_UMASK` instead (their jobs inherit it), or, for ``sbatch``, the job's
  own ``SLURM_UMASK`` (the submitter's umask: slurm_adapter/cli.py ``job_umask``).
* :func:`secure_state_dir` makes ``state_dir`` ``0700`` and the database files in it
  (``bridge.sqlite`` and its ``-wal``/``-shm``/``-journal``) ``0600``, fixing what an
  older daemon left more open; each fix is returned so that the daemon logs it. A
  ``state_dir`` or database file owned by another user (made first by a local user
  where an admin put ``state_dir`` in a shared place), or a database file that is a
  symbolic link, is refused (:class:`InsecureFile`): that user could read the
  database or swap in one of their own (jobs "of root").
* :func:`untrusted_component` finds a directory or file on the way to a program the
  daemon runs as root (a ``client_root`` chroot's ``squeue``) that another user owns or
  may write to (a sticky root-owned directory such as ``/tmp`` excepted).
* :func:`check_secret_file` refuses a secret (the API token file) that group or
  others may read or write, or that another user owns, as ssh refuses such a key.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from bridge.errors import BridgeError

#: The daemon's umask: files 0600, directories 0700.
DAEMON_UMASK = 0o077
#: The umask of commands the daemon runs for a user (``sbatch``, ``flux job submit``):
#: Slurm and Flux hand the submitter's umask on to the job, which must get a user's
#: usual one (as through slurmrestd), not the daemon's 077.
JOB_UMASK = 0o022
STATE_DIR_MODE = 0o700
DB_FILE_MODE = 0o600
#: Suffixes SQLite adds to the database name for its side files.
DB_SIDE_FILES = ("", "-wal", "-shm", "-journal")


class InsecureFile(BridgeError, ValueError):
    """A secret file others may read: the daemon will not use it."""


def secure_state_dir(state_dir: Path, db_name: str = "bridge.sqlite") -> list[str]:
    """Create ``state_dir`` if needed and bring it and its database files to
    ``0700``/``0600``. Returns one line per mode changed
    (``"/var/lib/hpc-bridge: 0755 -> 0700"``), empty when all was right;
    :class:`InsecureFile` when one of them is another user's, or a database file is a
    symbolic link."""
    fixed: list[str] = []
    state_dir.mkdir(mode=STATE_DIR_MODE, parents=True, exist_ok=True)
    owner = state_dir.stat().st_uid  # an admin's symlink to the real directory is fine
    if owner not in (0, os.geteuid()):
        raise InsecureFile(f"state_dir {state_dir} is owned by uid {owner}, not by the "
                           f"daemon's user or root: that user could read or replace the "
                           f"database (choose another state_dir, or chown it)")
    targets = [(state_dir, STATE_DIR_MODE)]
    targets += [(state_dir / f"{db_name}{suffix}", DB_FILE_MODE) for suffix in DB_SIDE_FILES]
    for path, mode in targets:
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue
        if path != state_dir and (stat.S_ISLNK(st.st_mode)
                                  or st.st_uid not in (0, os.geteuid())):
            raise InsecureFile(f"database file {path} is a symbolic link or owned by uid "
                               f"{st.st_uid}, not by the daemon's user or root")
        if stat.S_ISLNK(st.st_mode):
            continue  # never chmod through a link
        current = stat.S_IMODE(st.st_mode)
        if current != mode:
            os.chmod(path, mode)
            fixed.append(f"{path}: {current:04o} -> {mode:04o}")
    return fixed


def check_secret_file(path: Path, what: str = "token file") -> None:
    """Raise :class:`InsecureFile` if group or others may read or write ``path``, or if
    it is owned by neither the daemon's user nor root (ssh's rule for private keys)."""
    st = path.stat()
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise InsecureFile(
            f"{what} {path} is mode {mode:04o}: group/others may access it; "
            f"it must be readable by its owner only (chmod 600 {path})")
    if st.st_uid not in (0, os.geteuid()):
        raise InsecureFile(f"{what} {path} is owned by uid {st.st_uid}, not by the "
                           f"daemon's user or root")


def untrusted_component(path: str | Path) -> str | None:
    """Why another user could change what ``path`` (symbolic links resolved) is, or
    None: each directory from ``/`` down to it and the file itself must be owned by
    root or the daemon's user and not group- or other-writable (a directory with the
    sticky bit and owned by root, such as ``/tmp``, may be)."""
    real = Path(os.path.realpath(path))
    trusted = {0, os.geteuid()}
    for part in [*reversed(real.parents), real]:
        try:
            st = part.stat()
        except OSError as exc:
            return f"{part}: {exc.strerror}"
        if st.st_uid not in trusted:
            return f"{part} is owned by uid {st.st_uid}"
        sticky = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX and st.st_uid == 0
        if st.st_mode & 0o022 and not sticky:
            return f"{part} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None
