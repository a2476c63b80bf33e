"""Commands run as a job's owner without forking the daemon.

Given ``user=``/``group=``/``extra_groups=``, CPython's subprocess makes the child with
``fork``: the child copies the daemon's page tables before it can switch and exec, and
asyncio makes it in the event loop's thread. So every command a root daemon ran as a
job's owner (``sbatch``, ``scancel``, ``scontrol``, ``flux``) stopped the event loop
for 4 to 8 ms at 120 MB of RSS, more as the daemon grows (``bench/spawn.py``). Without
those arguments CPython makes the child with ``vfork`` (0.1 to 0.2 ms), so the switch
is left to programs that child runs: util-linux ``setpriv``, then ``env``.

Why ``env`` between them: ``setpriv`` keeps its capabilities across the uid change
(it needs them to set the groups) until its own ``exec``, so a command it ran directly
would be executed with root's ``CAP_DAC_OVERRIDE``: a program the owner may not
execute (``chmod 750``, a directory they may not search) would run anyway. ``env``,
executed by ``setpriv`` and left without any capability, executes the command as the
owner alone, as CPython's switch does (``EACCES`` otherwise).

Contract:

* :meth:`Switch.to` says whom to become: the owner's uid and gid, and the groups
  ``os.getgrouplist`` gives the owner (the owner's gid alone when the lookup fails).
* :meth:`Switcher.argv` runs a command as a switch says: real, effective and saved uid
  and gid the owner's, exactly those supplementary groups, no capability (inheritable
  and so ambient emptied; permitted and effective lost at ``exec``), with
  ``PR_SET_PDEATHSIG`` = SIGKILL when asked (set after the switch, so it holds). A unit
  test compares ``/proc/self/status`` with CPython's switch. The command keeps the
  pid of the child that was made.
* :meth:`Switcher.failed` tells the switch's own failure (refused, or the command not
  executable by the owner: status 126 or 127 and ``setpriv``'s or ``env``'s message)
  from the command's: callers report it as the command not starting, as they reported
  CPython's ``OSError``.
* :meth:`Switch.popen_kwargs` is CPython's own switch, for a host without ``setpriv``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bridge.backend import Owner

__all__ = ["Switch", "Switcher", "find_switcher"]

#: Exit statuses of a program that could not be executed (util-linux and coreutils;
#: 127 is also setpriv's for a refused switch).
_EXEC_FAILED = (126, 127)


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

    def popen_kwargs(self) -> dict[str, Any]:
        """subprocess keyword arguments for this switch (CPython then forks)."""
        return {"user": self.uid, "group": self.gid, "extra_groups": list(self.groups)}


@dataclass(frozen=True)
class Switcher:
    """``setpriv`` and ``env``, found on the host."""

    setpriv: str
    env: str

    def argv(self, switch: Switch | None, command: Sequence[str], *,
             pdeathsig: bool = False) -> list[str]:
        """``command`` (its program an absolute path) run as ``switch`` says (None: as
        the daemon), with SIGKILL as its parent-death signal if ``pdeathsig``."""
        options = ["--pdeathsig", "KILL"] if pdeathsig else []
        if switch is None:
            return [self.setpriv, *options, "--", *command]
        groups = ",".join(str(g) for g in switch.groups)
        return [self.setpriv, f"--reuid={switch.uid}", f"--regid={switch.gid}",
                f"--groups={groups}", "--inh-caps=-all", *options, "--",
                self.env, "--", *command]

    def failed(self, returncode: int | None, stderr: bytes) -> str | None:
        """The switch's message when the command did not start (None: it did)."""
        if returncode not in _EXEC_FAILED:
            return None
        if not stderr.startswith((b"setpriv: ", self.env.encode() + b": ")):
            return None
        return stderr.decode(errors="replace").strip().splitlines()[0]


def find_switcher(path: str | None) -> Switcher | None:
    """``setpriv`` and ``env`` on ``path`` (None: either is missing)."""
    setpriv, env = shutil.which("setpriv", path=path), shutil.which("env", path=path)
    if setpriv is None or env is None:
        return None
    return Switcher(setpriv, env)
