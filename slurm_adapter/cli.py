"""Slurm through its commands (``sbatch``, ``squeue``, ``scancel``, ``sinfo``,
``scontrol``), for when no slurmrestd is configured.

Contract:

* Commands run with :func:`bridge.subproc.communicate` (never a shell), in
  ``/``, with a timeout; a command that overruns is killed and gives
  :class:`BackendUnavailable`.
* ``sbatch``, ``scancel`` and ``scontrol`` on a job run AS THE JOB'S OWNER (uid, gid
  and the groups ``os.getgrouplist`` gives), switched by ``setpriv`` then ``env`` in a
  child made with ``vfork`` (:mod:`bridge.runas`: CPython's ``user=`` would fork the
  daemon), or by CPython where setpriv does not switch. That needs root unless the
  owner is the daemon's own user; otherwise :class:`BackendRejected`.
* The job's environment is exactly the one given (the back end passes
  :func:`slurm_adapter.script.job_environment`), plus ``SLURM_CONF`` when the
  daemon has it, handed to ``sbatch --export=ALL --export-file=FD`` through an anonymous
  memory file: no value appears on a command line, multi-line values survive, and
  sbatch itself never sees the user's variables (an ``SBATCH_*`` variable in the
  plan cannot change the submission). Verified on Slurm 22.05: with
  ``--export-file`` the job gets exactly the file's variables (plus Slurm's own),
  not sbatch's environment.
* sbatch's own environment is ``PATH`` and ``SLURM_CONF`` only.
* With ``root`` (a directory), every command runs as ``chroot [--userspec=+U:+G
  --groups=+G,…] ROOT CMD`` (``+``: ids, never looked up as names): the cluster's
  own client programs, ``slurm.conf`` and munge socket live there (another Slurm
  release, another munge key). The switch to the owner is then chroot's, made as
  root. The program (and ``ROOT``) must be
  root's and writable by root only (:func:`bridge.filemodes.untrusted_component`):
  otherwise :class:`BackendUnavailable` naming the file, and nothing runs.
* Every child gets ``PR_SET_PDEATHSIG`` = SIGKILL through util-linux ``setpriv
  --pdeathsig KILL`` (when ``setpriv`` works): if the daemon dies mid-call, no
  ``sbatch`` lingers, and no ``preexec_fn`` runs Python in the forked child (not
  safe with threads). The flag survives the uid switch because ``setpriv`` sets
  it after the switch and ``sbatch`` is not set-uid. Not so with ``root``: there
  ``setpriv`` runs before ``chroot``, whose switch to the owner clears it (as root,
  no switch, it holds). A submission cut short this way is found again by its
  comment (the idempotency key).
* Error text: "Unable to contact slurm controller", "Socket timed out" …
  -> :class:`BackendUnavailable`; other sbatch failures -> :class:`BackendRejected`
  with sbatch's own message. ``squeue --json`` and ``sinfo --json`` exit 0 even
  when the controller is down: their ``errors`` list is checked.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from bridge import subproc
from bridge.backend import BackendRejected, BackendUnavailable, Owner
from bridge.filemodes import JOB_UMASK, untrusted_component
from bridge.runas import SYSTEM_PATH, Switch, Switcher, switcher_for
from slurm_adapter.errors import classify, is_transient_message
from slurm_adapter.ids import is_slurm_id
from slurm_adapter.listing import decode_listing

__all__ = ["Completed", "SlurmCli"]

log = structlog.get_logger(__name__)

#: PATH of the Slurm commands themselves.
SAFE_PATH = SYSTEM_PATH
#: squeue states (``%T``: a flag state where one is set) of a job on its nodes
#: (``requeuehold`` takes it off them) and of one waiting (``hold`` keeps it there).
_RUNNING_STATES = frozenset({"RUNNING", "SUSPENDED", "CONFIGURING", "STOPPED", "SIGNALING",
                             "RESIZING"})
_WAITING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
                             "SPECIAL_EXIT", "RESV_DEL_HOLD"})
#: scancel / REST messages that make a cancellation a no-op.
_CANCEL_NOOP = ("invalid job id specified", "already completing or completed")


_UMASK = re.compile(r"0?[0-7]{1,3}")


def job_umask(env: Mapping[str, str]) -> int:
    """The umask sbatch runs under for a job with environment ``env``: its
    ``SLURM_UMASK`` (the submitter's, which tbatch sends as sbatch does) when that is
    one, else :data:`JOB_UMASK`. sbatch puts its own umask into the job's
    ``SLURM_UMASK`` over the ``--export-file``'s, and Slurm creates the job's output
    files under it."""
    text = env.get("SLURM_UMASK", "")
    return int(text, 8) if _UMASK.fullmatch(text) else JOB_UMASK


@dataclass(frozen=True)
class Completed:
    """A finished command."""

    argv: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def message(self) -> str:
        """stderr as text without the ``prog: error:`` prefixes, one line per message."""
        lines = []
        for line in self.stderr.decode(errors="replace").splitlines():
            text = line.strip()
            for prefix in (f"{os.path.basename(self.argv[0])}: error: ", "error: "):
                text = text.removeprefix(prefix)
            if text:
                lines.append(text)
        return "; ".join(lines)


class SlurmCli:
    """Runs Slurm commands for the back end."""

    def __init__(self, *, timeout: float = 10.0, slurm_conf: str | None = None,
                 path: str | None = None, pdeathsig: bool = True, root: str | None = None):
        """``slurm_conf``: passed on to every command (default: the daemon's
        ``SLURM_CONF``; none with ``root``). ``path``: where to look for the commands
        (default: the daemon's ``PATH``, then the usual system directories; with
        ``root``: the system directories inside it). ``root``: run every command
        chrooted there (see the module docstring)."""
        self.timeout = timeout
        self.root = root
        host_conf = None if root else os.environ.get("SLURM_CONF")
        self.slurm_conf = slurm_conf if slurm_conf is not None else host_conf
        host_path = os.pathsep.join(p for p in (os.environ.get("PATH"), SAFE_PATH) if p)
        self.path = path or (SAFE_PATH if root else host_path)
        #: setpriv and env, from the system's directories (bridge.runas): the switch
        #: to a job's owner in a vforked child and, with ``pdeathsig``, the child's
        #: parent-death signal. Probed at the first command (None: not yet).
        self._switcher: Switcher | None = None
        self._pdeathsig = pdeathsig
        self._chroot = shutil.which("chroot", path=host_path) if root else None

    def _lookup_path(self) -> str:
        if self.root is None:
            return self.path
        return os.pathsep.join(self.root.rstrip("/") + p for p in self.path.split(os.pathsep))

    def has(self, name: str) -> bool:
        """Whether the command ``name`` is installed (inside ``root`` if set)."""
        return shutil.which(name, path=self._lookup_path()) is not None

    def _which(self, name: str) -> str:
        found = shutil.which(name, path=self._lookup_path())
        if found is None:
            raise BackendUnavailable(f"{name} not found (PATH={self.path}); is the Slurm client "
                                     f"installed?")
        if self.root is not None:  # run as root inside a tree: nobody else may change it
            why = untrusted_component(self.root) or untrusted_component(found)
            if why is not None:
                raise BackendUnavailable(f"client_root {self.root}: {why}; not running {name}")
        return found

    def _env(self, command: str) -> dict[str, str]:
        env = {"PATH": SAFE_PATH}
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        if command == "squeue":
            # An array's pending tasks listed whole (else cut at 64 characters with
            # "..."): slurm_adapter/records.py reads each as a job.
            env["SLURM_BITSTR_LEN"] = "0"
        return env

    @staticmethod
    def _as_owner(owner: Owner | None) -> Switch | None:
        """The switch to ``owner`` (None: stay the daemon's user)."""
        if owner is None or owner.uid == os.geteuid():
            return None
        if os.geteuid() != 0:
            raise BackendRejected("the daemon must run as root to submit for other users "
                                  f"(job owner {owner.user!r}, uid {owner.uid})")
        return Switch.to(owner)

    async def run(self, argv: Sequence[str], *, owner: Owner | None = None,
                  stdin: bytes | None = None, pass_fds: Sequence[int] = (),
                  umask: int = JOB_UMASK) -> Completed:
        """Run ``argv`` (``argv[0]`` looked up on the path) and collect its output."""
        program = self._which(argv[0])
        switch = self._as_owner(owner)
        full = [program, *argv[1:]]
        if self.root is not None:
            if self._chroot is None:
                raise BackendUnavailable("chroot not found: cannot use client_root")
            inside = program.removeprefix(self.root.rstrip("/"))
            userspec = switch.chroot_options() if switch is not None else []
            full = [self._chroot, *userspec, self.root, inside, *argv[1:]]
            wrappers: tuple[str, ...] = (self._chroot,)
            switch = None
        else:
            wrappers = ()
        if self._switcher is None:
            self._switcher = await switcher_for(SYSTEM_PATH)
        # setpriv switches in a vforked child; CPython's own switch forks the daemon.
        spawn = self._switcher.spawn(switch, full, pdeathsig=self._pdeathsig,
                                     wrappers=wrappers)
        limit = self.timeout
        try:
            async with asyncio.timeout(limit):
                returncode, out, err = await subproc.communicate(
                    spawn.argv, stdin=stdin, env=self._env(argv[0]),
                    cwd="/", pass_fds=tuple(pass_fds),
                    umask=umask,  # sbatch hands it on to the job (SLURM_UMASK)
                    **spawn.kwargs)
        except TimeoutError:  # before OSError: TimeoutError is one of its subclasses
            raise BackendUnavailable(f"{argv[0]} did not finish within {limit:g}s") from None
        except OSError as exc:
            raise BackendUnavailable(f"cannot run {argv[0]}: {exc}") from exc
        failed = spawn.failed(returncode, err)
        if failed is not None:
            raise BackendUnavailable(f"cannot run {argv[0]}: {failed}")
        return Completed(tuple(argv), returncode, out, err)

    async def ping(self) -> None:
        """``scontrol ping``; :class:`BackendUnavailable` unless slurmctld is UP."""
        done = await self.run(["scontrol", "ping"])
        text = done.stdout.decode(errors="replace")
        if done.returncode != 0 or " is UP" not in text:
            raise BackendUnavailable(f"slurmctld does not answer: "
                                     f"{text.strip().splitlines()[0] if text.strip() else ''} "
                                     f"{done.message}".strip())

    async def run_plain(self, argv: list[str]) -> tuple[int, bytes, bytes]:
        """``(returncode, stdout, stderr)`` of ``argv`` run as the daemon."""
        done = await self.run(argv)
        return done.returncode, done.stdout, done.stderr

    # --- jobs -----------------------------------------------------------------------

    async def submit(self, script: str, args: Sequence[str], env: Mapping[str, str],
                     owner: Owner, script_args: Sequence[str] = ()) -> str:
        """``sbatch --parsable`` as ``owner``; the new job id.

        The script and the environment travel in memory files (``memfd``) passed as
        descriptors: the script as ``/proc/self/fd/N`` followed by ``script_args``
        (stdin could not carry arguments), the environment via ``--export-file``.
        Nothing the user wrote is on a command line but the script arguments, which
        are argv elements, never shell text.
        """
        done = await self._sbatch("--parsable", script, args, env, owner, script_args)
        self._raise_for(done)
        first = done.stdout.decode(errors="replace").strip().splitlines()
        job_id = first[-1].split(";", 1)[0].strip() if first else ""
        if not is_slurm_id(job_id):
            raise BackendUnavailable(f"sbatch printed no job id: {done.stdout!r} "
                                     f"{done.message}")
        if done.message:
            log.warning("sbatch accepted job %s with a warning: %s", job_id, done.message)
        return job_id

    async def test_only(self, script: str, args: Sequence[str], env: Mapping[str, str],
                        owner: Owner, script_args: Sequence[str] = ()) -> str:
        """``sbatch --test-only`` as ``owner`` (as :meth:`submit` hands it the job): Slurm's
        estimate (``Job 12 to start at ... using 2 processors on nodes node[1-2] in
        partition debug``); nothing is submitted."""
        done = await self._sbatch("--test-only", script, args, env, owner, script_args)
        self._raise_for(done)
        lines = [ln.removeprefix("sbatch: ") for ln in done.message.splitlines()]
        estimate = next((ln for ln in lines if " to start at " in ln), None)
        if estimate is None:
            raise BackendUnavailable(f"sbatch --test-only printed no estimate: "
                                     f"{done.message!r}")
        return estimate

    async def _sbatch(self, mode: str, script: str, args: Sequence[str],
                      env: Mapping[str, str], owner: Owner,
                      script_args: Sequence[str]) -> Completed:
        """``sbatch MODE`` as ``owner`` with the script and environment in memory files."""
        job_env = dict(env)
        if self.slurm_conf:
            job_env.setdefault("SLURM_CONF", self.slurm_conf)
        env_fd = os.memfd_create("hpc-bridge-env", os.MFD_CLOEXEC)
        script_fd = os.memfd_create("hpc-bridge-script", os.MFD_CLOEXEC)
        try:
            payload = b"".join(f"{k}={v}".encode() + b"\0" for k, v in job_env.items())
            os.write(env_fd, payload)
            os.lseek(env_fd, 0, os.SEEK_SET)
            os.write(script_fd, script.encode("utf-8", "surrogateescape"))  # its own bytes
            os.lseek(script_fd, 0, os.SEEK_SET)
            return await self.run(
                ["sbatch", mode, "--ignore-pbs", "--export=ALL",
                 f"--export-file={env_fd}", *args, f"/proc/self/fd/{script_fd}",
                 *script_args],
                owner=owner, pass_fds=(env_fd, script_fd), umask=job_umask(job_env),
            )
        finally:
            os.close(env_fd)
            os.close(script_fd)

    @staticmethod
    def _raise_for(done: Completed) -> None:
        """A failed sbatch as BackendUnavailable (transient) or BackendRejected."""
        if done.returncode != 0:
            message = done.message or f"sbatch exited with {done.returncode}"
            if is_transient_message(message):
                raise BackendUnavailable(f"sbatch: {message}")
            raise BackendRejected(f"sbatch: {message}")

    async def _json(self, argv: list[str], what: str) -> dict[str, Any]:
        """``argv``'s JSON (:meth:`_checked_json`), decoded in a worker thread: a busy
        cluster's ``squeue --json`` is megabytes."""
        done = await self.run(argv)
        return await asyncio.to_thread(self._checked_json, done, argv, what)

    @staticmethod
    def _checked_json(done: Completed, argv: list[str], what: str) -> dict[str, Any]:
        """The JSON document ``done`` printed, with a ``what`` list and no ``errors``."""
        if done.returncode != 0:
            raise BackendUnavailable(f"{' '.join(argv)} failed ({done.returncode}): "
                                     f"{done.message}")
        # squeue's listing: only the fields the bridge reads (slurm_adapter/listing.py).
        data = decode_listing(done.stdout) if what == "jobs" else None
        if data is None:
            try:
                data = json.loads(done.stdout)
            except ValueError as exc:
                raise BackendUnavailable(f"{' '.join(argv)} printed no JSON: {exc}") from exc
        if not isinstance(data, dict) or not isinstance(data.get(what), list):
            raise BackendUnavailable(f"{' '.join(argv)} printed no {what!r} list")
        errors = data.get("errors")
        if errors:
            # Exit status 0 with errors: the controller could not be asked.
            raise classify(errors, context=" ".join(argv), read=True)
        return data

    async def jobs(self) -> dict[str, Any]:
        """``squeue --json --states=all``: ALL jobs the controller holds, finished ones
        included (22.05's ``--json`` ignores the state filter and lists them anyway;
        from 23.x on, ``--json`` honours it and lists only pending and running jobs
        without ``--states=all``; 22.05's ``scontrol`` has no ``--json``)."""
        return await self._json(["squeue", "--json", "--states=all"], "jobs")

    async def nodes(self) -> dict[str, Any]:
        """Every node, in the shape of slurmrestd's ``/nodes``: ``sinfo --json`` on
        22.05; from 23.x on, ``sinfo --json`` lists partition/state groups instead
        (``"sinfo"``) and ``scontrol show nodes --json`` has the node records."""
        argv = ["sinfo", "--json"]
        done = await self.run(argv)
        try:
            data = json.loads(done.stdout) if done.returncode == 0 else None
        except ValueError:
            data = None
        if isinstance(data, dict) and "nodes" not in data and "sinfo" in data:
            return await self._json(["scontrol", "show", "nodes", "--json"], "nodes")
        return self._checked_json(done, argv, "nodes")

    async def cancel(self, job_id: str, owner: Owner) -> None:
        """``scancel JOB`` as ``owner``; an unknown or finished job is no error."""
        if not is_slurm_id(job_id):
            raise BackendRejected(f"not a Slurm job id: {job_id!r}")
        done = await self.run(["scancel", job_id], owner=owner)
        if done.returncode == 0:
            return
        message = done.message or f"scancel exited with {done.returncode}"
        if any(m in message.lower() for m in _CANCEL_NOOP):
            return
        if is_transient_message(message):
            raise BackendUnavailable(f"scancel {job_id}: {message}")
        raise BackendRejected(f"scancel {job_id}: {message}")

    async def signal(self, job_id: str, signame: str, owner: Owner) -> None:
        """``scancel --batch --signal=SIG JOB`` as ``owner``: the signal reaches only
        the batch shell (an allocation holder's, :mod:`pool_adapter.holder`); an unknown
        or finished job is no error."""
        if not (is_slurm_id(job_id) and signame.isascii()
                and signame.isalnum()):
            raise BackendRejected(f"not a Slurm job id and signal: {job_id!r} {signame!r}")
        done = await self.run(["scancel", "--batch", f"--signal={signame}", job_id],
                              owner=owner)
        if done.returncode == 0:
            return
        message = done.message or f"scancel exited with {done.returncode}"
        if any(m in message.lower() for m in _CANCEL_NOOP):
            return
        if is_transient_message(message):
            raise BackendUnavailable(f"scancel --signal={signame} {job_id}: {message}")
        raise BackendRejected(f"scancel --signal={signame} {job_id}: {message}")

    async def hold(self, job_id: str, owner: Owner, *, requeue: bool = True) -> None:
        """Take the job off its nodes until released, as ``owner`` (Slurm checks that
        they may): ``scontrol requeuehold`` for a running job (it is requeued, held,
        and starts again from the beginning when released: Kubernetes' suspend), and
        ``scontrol hold`` for one still waiting. Slurm would requeue a finished job too
        (and run it again): a job neither running nor waiting is refused
        (BackendRejected), as is one Slurm will not requeue (``--no-requeue``). A job
        that starts (or is requeued) between the look and the command gets the other
        command; a job that ends in that instant could still be requeued by Slurm.

        ``requeue=False`` (``tcontrol hold`` of a waiting job): ``scontrol hold`` only;
        a job that is not waiting is refused (BackendRejected), as scontrol refuses it."""
        if not is_slurm_id(job_id):
            raise BackendRejected(f"not a Slurm job id: {job_id!r}")
        if not requeue:
            self._check(await self.run(["scontrol", "hold", job_id], owner=owner),
                        f"scontrol hold {job_id}")
            return
        state = await self.job_state(job_id)
        if state in _RUNNING_STATES:
            order = ("requeuehold", "hold")
        elif state in _WAITING_STATES:
            order = ("hold", "requeuehold")
        else:
            raise BackendRejected(f"job {job_id} is {state or 'not known to Slurm'}: "
                                  f"nothing to suspend")
        done = await self.run(["scontrol", order[0], job_id], owner=owner)
        verb = order[0]
        # "Job is pending execution" / "is no longer pending execution": it moved.
        if done.returncode != 0 and "pending execution" in done.message.lower():
            done = await self.run(["scontrol", order[1], job_id], owner=owner)
            verb = order[1]
        self._check(done, f"scontrol {verb} {job_id}")

    async def job_state(self, job_id: str) -> str:
        """The job's state as ``squeue --states=all -j JOB -o %T`` prints it ("" when
        Slurm does not know it, or shows nothing)."""
        return await self.job_state_if_known(job_id) or ""

    async def job_state_if_known(self, job_id: str) -> str | None:
        """As :meth:`job_state`, but None only when Slurm says it does not know the job
        ("Invalid job id"), and "" when squeue shows nothing (a job hidden by
        ``PrivateData``, say: not proof that it is gone)."""
        done = await self.run(["squeue", "-h", "--states=all", "-j", job_id, "-o", "%T"])
        if done.returncode != 0:
            message = done.message or f"exit {done.returncode}"
            if "invalid job id" in message.lower():
                return None
            self._check(done, f"squeue -j {job_id}")
        lines = done.stdout.decode(errors="replace").split()
        return lines[0] if lines else ""

    async def release(self, job_id: str, owner: Owner) -> None:
        """``scontrol release`` as ``owner``: the held job may start again (a job that
        Slurm requeued waits for its EligibleTime first)."""
        if not is_slurm_id(job_id):
            raise BackendRejected(f"not a Slurm job id: {job_id!r}")
        self._check(await self.run(["scontrol", "release", job_id], owner=owner),
                    f"scontrol release {job_id}")

    @staticmethod
    def _check(done: Completed, what: str) -> None:
        if done.returncode == 0:
            return
        message = done.message or f"exit {done.returncode}"
        if is_transient_message(message):
            raise BackendUnavailable(f"{what}: {message}")
        raise BackendRejected(f"{what}: {message}")

    async def topology(self, name: str | None = None) -> str:
        """``scontrol show topology [NAME]`` text ("" when the cluster has none).

        ``name`` is one of the cluster's topologies (Slurm 25.05+, topology.yaml); an
        older ``scontrol`` would read it as a switch name, so only names a partition's
        ``Topology=`` gave are passed. It exits 0 even when the controller is down;
        the error is on stderr.
        """
        return await self._show(["topology"] if name is None else ["topology", name])

    async def partitions(self) -> str:
        """``scontrol show partition -o`` text (one partition a line; "" on error)."""
        return await self._show(["partition", "-o"])

    async def _show(self, what: list[str]) -> str:
        argv = ["scontrol", "show", *what]
        done = await self.run(argv)
        message = done.message
        if message and is_transient_message(message):
            raise BackendUnavailable(f"{' '.join(argv)}: {message}")
        if done.returncode != 0 or message:
            log.info("%s: %s", " ".join(argv), message or f"exit {done.returncode}")
        return done.stdout.decode(errors="replace") if done.returncode == 0 else ""
