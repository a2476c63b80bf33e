"""Commands run as a job's owner without forking the daemon.

Given ``user=``/``group=``/``extra_groups=``, CPython's subprocess makes the child with
``fork``: the child copies the daemon's page tables before it can switch and exec, and
asyncio makes it in the event loop's thread. So every command a root daemon ran as a
job's owner (``sbatch``, ``scancel``, ``scontrol``, ``flux``) stopped the event loop
for 5.8 ms (p95 7.1) at 90 MB of RSS and 14.9 ms at 300 MB (``bench/spawn.py``).
Without those arguments CPython makes the child with ``vfork`` (0.5 to 0.6 ms), so the
switch is left to programs that child runs: util-linux ``setpriv``, then ``env``.

* ``setpriv --reuid=+U --regid=+G --groups=+G1,+G2``: setpriv reads an id as a user
  or group *name* first (an LDAP group named ``1001`` would be taken for gid 1001);
  ``+1001`` is no name the system's databases give (glibc's files skip ``+`` lines;
  ``useradd``/``groupadd`` and Active Directory refuse the character), and setpriv then
  reads it as the number. ``--inh-caps=-all`` empties the inheritable set, and so the
  ambient one.
* ``env``: setpriv keeps root's capabilities until its own ``exec`` (it needs them to
  set the groups), so a command it executed directly would be executed with
  ``CAP_DAC_OVERRIDE``: a program the owner may not execute (``chmod 750``, a
  directory they may not search) would run. ``env`` is executed by setpriv and left
  with no capability; it executes the command as the owner alone. A program whose
  path holds ``=`` (which ``env`` would read as a variable) is switched by CPython.
* ``--pdeathsig KILL``: set after the switch (a change of uid clears it) and kept
  across both ``exec``s.

Contract:

* :meth:`Switch.to` says whom to become: the owner's uid and gid, and the groups
  ``os.getgrouplist`` gives the owner (the owner's gid alone when the lookup fails).
* :meth:`Switcher.spawn` gives the argv and the subprocess keyword arguments that run a
  command as a switch says (None: as the daemon), with SIGKILL as its parent-death
  signal when asked: through setpriv when it works (probed once per path), else
  CPython's own switch. Either way the command runs with real, effective and saved uid
  and gid the owner's, exactly those groups, no inheritable, ambient, permitted or
  effective capability (a unit test compares ``/proc/self/status`` with CPython's
  switch; the bounding set stays the daemon's, as with CPython's), and keeps the pid
  of the child that was made. A relative program is taken from ``/``, the child's
  working directory.
* :meth:`Switcher.failed` tells the switch's own failure (setpriv or env refused, or
  the command not executable by the owner: status 1, 126 or 127 with their message)
  from the command's: callers report it as the command not starting, as they reported
  CPython's ``OSError``.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from bridge.backend import Owner

__all__ = ["Switch", "Switcher", "find_switcher"]

log = structlog.get_logger(__name__)

#: Exit statuses of setpriv and env that failed themselves: setpriv's usage errors (1),
#: a program that could not be executed (126, 127; 127 also setpriv's refused switch).
_OWN_FAILURE = (1, 126, 127)
#: Seconds a probe of setpriv may take.
_PROBE_TIMEOUT = 5.0
_PROBE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Switch:
    """Whom a child process becomes before it runs the command."""

    uid: int
    gid: int
    groups: tuple[int, ...]

    @classmethod
    def to(cls, owner: Owner) -> Switch:
        """The switch to ``owner``, with the supplementary groups the system gives them."""
        try:
            groups = tuple(os.getgrouplist(owner.user, owner.gid))
        except OSError:
            groups = (owner.gid,)
        return cls(owner.uid, owner.gid, groups or (owner.gid,))

    def setpriv_options(self) -> list[str]:
        """setpriv's options for this switch (``+``: read as numbers, see above)."""
        return [f"--reuid=+{self.uid}", f"--regid=+{self.gid}",
                "--groups=" + ",".join(f"+{g}" for g in self.groups), "--inh-caps=-all"]

    def chroot_options(self) -> list[str]:
        """coreutils chroot's options for this switch (``+``: numbers, never names)."""
        return [f"--userspec=+{self.uid}:+{self.gid}",
                "--groups=" + ",".join(f"+{g}" for g in self.groups)]

    def popen_kwargs(self) -> dict[str, Any]:
        """subprocess keyword arguments for this switch (CPython then forks)."""
        return {"user": self.uid, "group": self.gid, "extra_groups": list(self.groups)}


@dataclass(frozen=True)
class Switcher:
    """The host's ``setpriv`` and ``env`` (None: setpriv does not work here; CPython
    switches, and no parent-death signal is set)."""

    setpriv: str | None
    env: str | None

    def spawn(self, switch: Switch | None, command: Sequence[str], *,
              pdeathsig: bool = False) -> tuple[list[str], dict[str, Any]]:
        """The argv and subprocess keyword arguments that run ``command`` as ``switch``
        says (None: as the daemon)."""
        program = os.path.join("/", command[0])
        options = ["--pdeathsig", "KILL"] if pdeathsig else []
        if self.setpriv is None:
            return [program, *command[1:]], switch.popen_kwargs() if switch else {}
        if switch is None:
            argv = [self.setpriv, *options, "--", program, *command[1:]]
            return (argv, {}) if options else ([program, *command[1:]], {})
        if self.env is None or "=" in program:
            # CPython switches in the child; setpriv, run as the owner, sets the signal.
            argv = [self.setpriv, *options, "--", program, *command[1:]]
            return (argv if options else [program, *command[1:]]), switch.popen_kwargs()
        return [self.setpriv, *switch.setpriv_options(), *options, "--", self.env, "--",
                program, *command[1:]], {}

    def failed(self, returncode: int | None, stderr: bytes) -> str | None:
        """The switch's message when the command did not start (None: it did)."""
        if returncode not in _OWN_FAILURE:
            return None
        line = stderr.decode(errors="replace").strip().partition("\n")[0]
        names = [p for p in (self.setpriv, self.env) if p is not None]
        prefixes = tuple(f"{n}: " for p in names for n in (p, os.path.basename(p)))
        return line if prefixes and line.startswith(prefixes) else None


def _works(argv: list[str]) -> str | None:
    """None when ``argv`` ran and exited 0, else why not."""
    try:
        done = subprocess.run(argv, capture_output=True, timeout=_PROBE_TIMEOUT, cwd="/",
                              env={"PATH": _PROBE_PATH}, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    if done.returncode != 0:
        return done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
    return None


@functools.cache
def find_switcher(path: str | None) -> Switcher:
    """setpriv and env on ``path``, setpriv kept only if a probe shows it does here what
    :meth:`Switcher.spawn` asks of it (as root: a switch to root itself; a warning
    otherwise). Once per ``path``."""
    setpriv, env = shutil.which("setpriv", path=path), shutil.which("env", path=path)
    true = shutil.which("true", path=path) or "/bin/true"
    if setpriv is not None:
        probe = [setpriv, "--pdeathsig", "KILL", "--", true]
        if os.geteuid() == 0 and env is not None:
            me = Switch(0, os.getegid(), (os.getegid(),))
            probe = [setpriv, *me.setpriv_options(), "--pdeathsig", "KILL", "--", env, "--",
                     true]
        why = _works(probe)
        if why is not None:
            log.warning("setpriv does not work here: commands run as a job's owner fork the "
                        "daemon, and are not killed with it", setpriv=setpriv, error=why)
            setpriv = None
    return Switcher(setpriv, env)
