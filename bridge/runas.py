"""Commands run as a job's owner without forking the daemon.

Given ``user=``/``group=``/``extra_groups=``, CPython's subprocess makes the child with
``fork``: the child copies the daemon's page tables before it can switch and exec, and
asyncio makes it in the event loop's thread. So every command a root daemon ran as a
job's owner (``sbatch``, ``scancel``, ``scontrol``, ``flux``) stopped the event loop
for 3.7 to 5.8 ms at 90 MB of RSS and 15 to 17 ms at 300 MB (``bench/spawn.py``).
Without those arguments CPython makes the child with ``vfork`` (0.4 to 1.9 ms), so the
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
* :func:`switcher_for` (awaitable) and :func:`find_switcher` give a path's setpriv and
  env, probed once per path (in a worker thread from the event loop): whether setpriv
  sets a parent-death signal here, and, as root, whether it switches (to uid 65534 and
  back to nothing: a switch of a real kind). A probe that timed out is not kept.
* :meth:`Switcher.spawn` gives what runs a command as a switch says (None: as the
  daemon), with SIGKILL as its parent-death signal when asked and setpriv sets one:
  through setpriv and env when setpriv switches here, else CPython's own switch (a
  fork; warned once at the probe). Through setpriv the command runs with real,
  effective and saved uid and gid the owner's, exactly those groups and no
  inheritable, ambient, permitted or effective capability (a unit test compares
  ``/proc/self/status`` with CPython's switch and seeds the inheritable and ambient
  sets; the bounding set stays the daemon's, as with CPython's, which keeps the
  daemon's inheritable set too), and keeps the pid of the child that was made. A
  relative program is taken from ``/``, the child's working directory.
* :meth:`Spawn.failed` tells a wrapper's own failure (setpriv, env, or a ``chroot``
  the caller put before the command: refused, or the command not executable by the
  owner; status 1 or 125 to 127 with the wrapper's message) from the command's:
  callers report it as the command not starting, as they reported CPython's
  ``OSError``.
* Cost: setpriv looks each ``+N`` up as a name before it reads the number (two
  lookups and one a group, per command; glibc's files answer at once, a directory
  service from its negative cache).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from bridge.backend import Owner

__all__ = ["SYSTEM_PATH", "Spawn", "Switch", "Switcher", "find_switcher", "forget_switchers",
           "switcher_for"]

log = structlog.get_logger(__name__)

#: Where setpriv and env are looked for: system directories only (they run as root).
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Exit statuses of a wrapper that failed itself: setpriv's usage errors (1), env's and
#: chroot's own (125), a program that could not be executed (126, 127; 127 also
#: setpriv's refused switch).
_OWN_FAILURE = (1, 125, 126, 127)
#: Seconds a probe of setpriv may take.
_PROBE_TIMEOUT = 5.0
#: The uid and gid the probe switches to (``nobody`` on most systems; no entry needed).
_PROBE_ID = 65534


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
class Spawn:
    """What to start: the argv, the subprocess keyword arguments, and the wrappers
    (programs run before the command) whose own failure :meth:`failed` tells."""

    argv: list[str]
    kwargs: dict[str, Any] = field(default_factory=dict)
    wrappers: tuple[str, ...] = ()

    def failed(self, returncode: int | None, stderr: bytes) -> str | None:
        """A wrapper's message when the command did not start (None: it did)."""
        if returncode not in _OWN_FAILURE or not self.wrappers:
            return None
        line = stderr.decode(errors="replace").strip().partition("\n")[0]
        prefixes = tuple(f"{n}: " for w in self.wrappers for n in (w, os.path.basename(w)))
        return line if line.startswith(prefixes) else None


@dataclass(frozen=True)
class Switcher:
    """The host's setpriv (None: it sets no parent-death signal here) and env, and
    whether setpriv switches to an owner here."""

    setpriv: str | None
    env: str | None
    switches: bool

    def spawn(self, switch: Switch | None, command: Sequence[str], *,
              pdeathsig: bool = False, wrappers: Sequence[str] = ()) -> Spawn:
        """What runs ``command`` as ``switch`` says (None: as the daemon); ``wrappers``
        are programs the caller put at the head of ``command`` (a ``chroot``)."""
        cmd = [os.path.join("/", command[0]), *command[1:]]
        signal = ["--pdeathsig", "KILL"] if pdeathsig and self.setpriv else []
        if (switch is not None and self.switches and self.setpriv and self.env
                and "=" not in cmd[0]):  # env would read a path with "=" as a variable
            return Spawn([self.setpriv, *switch.setpriv_options(), *signal, "--", self.env,
                          "--", *cmd], {}, (*wrappers, self.setpriv, self.env))
        kwargs = switch.popen_kwargs() if switch is not None else {}
        if signal and self.setpriv:  # after CPython's switch, if any: it would clear it
            return Spawn([self.setpriv, *signal, "--", *cmd], kwargs,
                         (*wrappers, self.setpriv))
        return Spawn(cmd, kwargs, tuple(wrappers))


def _probe(argv: list[str]) -> tuple[str | None, bool]:
    """(None when ``argv`` ran and exited 0, else why not; whether it timed out)."""
    try:
        done = subprocess.run(argv, capture_output=True, timeout=_PROBE_TIMEOUT, cwd="/",
                              env={"PATH": SYSTEM_PATH}, check=False)
    except subprocess.TimeoutExpired:
        return f"no answer within {_PROBE_TIMEOUT:g} s", True
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc), False
    if done.returncode != 0:
        return done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}", False
    return None, False


_found: dict[str | None, Switcher] = {}


def find_switcher(path: str | None = SYSTEM_PATH) -> Switcher:
    """setpriv and env on ``path``, probed (see the module's contract); blocking."""
    if path in _found:
        return _found[path]
    setpriv, env = shutil.which("setpriv", path=path), shutil.which("env", path=path)
    true = shutil.which("true", path=path) or "/bin/true"
    signals = switches = False
    timed_out = False
    if setpriv is not None:
        why, late = _probe([setpriv, "--pdeathsig", "KILL", "--", true])
        signals, timed_out = why is None, late
        if why is not None:
            log.warning("setpriv cannot set a parent-death signal here: commands are not "
                        "killed with the daemon", setpriv=setpriv, error=why)
        if signals and env is not None and os.geteuid() == 0:
            nobody = Switch(_PROBE_ID, _PROBE_ID, (_PROBE_ID,))
            why, late = _probe([setpriv, *nobody.setpriv_options(), "--", env, "--", true])
            switches, timed_out = why is None, late
            if why is not None:
                log.warning("setpriv cannot switch users here: commands run as a job's "
                            "owner fork the daemon", setpriv=setpriv, error=why)
    found = Switcher(setpriv if signals else None, env, switches)
    if not timed_out:
        _found[path] = found
    return found


async def switcher_for(path: str | None = SYSTEM_PATH) -> Switcher:
    """:func:`find_switcher` without blocking the event loop (a probe runs in a worker
    thread, once)."""
    found = _found.get(path)
    return found if found is not None else await asyncio.to_thread(find_switcher, path)


def forget_switchers() -> None:
    """Probe again at the next call (tests that change what the probe sees)."""
    _found.clear()
