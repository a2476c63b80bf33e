"""The only module that touches flux-python, and the ``flux`` commands run as a job's owner.

Contract:

* :func:`import_flux` imports ``flux`` LAZILY (never at module import) and turns every
  way it can fail into :class:`bridge.backend.BackendUnavailable` with a message that
  says what to do: the module is missing (``pip install flux-python==<flux-core
  version>``), ``libflux-core.so.2`` cannot be loaded (flux-core not installed or not
  on the library path), or ``ply`` is missing (``import flux.job`` needs it; the wheel
  does not declare it).
* :class:`FluxConnection` is the seam the back end calls, synchronously, from ONE
  thread per connection (a Flux handle is not thread-safe): :class:`PythonFlux` is the
  real one; tests pass fakes. Its methods raise ``OSError`` as flux-python does (errno
  and the broker's message), ``TimeoutError`` after ``timeout`` seconds, or
  :class:`BackendUnavailable` when the broker cannot be reached at all.
* :func:`run_flux_as` runs ``flux job submit`` / ``flux cancel`` as a job's owner (uid,
  gid, groups; switched by ``setpriv`` in a vforked child, :mod:`bridge.runas`), for a
  multi-user (system) instance: the command signs the jobspec as that user
  (flux-security: munge or curve), so the instance's IMP runs the job as the user. No
  shell: the jobspec goes to the command's stdin.
"""

from __future__ import annotations

import asyncio
import errno
import importlib
import json
import os
import pwd
import shutil
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

from bridge import subproc
from bridge.backend import BackendError, BackendRejected, BackendUnavailable, Owner
from bridge.filemodes import JOB_UMASK
from bridge.runas import SYSTEM_PATH, Spawn, Switch, switcher_for

__all__ = [
    "CONNECTION_ERRNOS",
    "LIST_ATTRS",
    "FluxConnection",
    "FluxModules",
    "PythonFlux",
    "RunResult",
    "classify",
    "import_flux",
    "is_transient",
    "owner_command_env",
    "run_flux_as",
]

#: errnos that mean "the broker or a service is not there now": retry later.
CONNECTION_ERRNOS = frozenset({
    errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.EHOSTUNREACH,
    errno.ENETUNREACH, errno.ETIMEDOUT, errno.EPIPE, errno.ENOTCONN, errno.ENOSYS,
    errno.EAGAIN, errno.EIO, errno.ESHUTDOWN, errno.EHOSTDOWN,
})
#: job-list attributes the back end reads (RFC 43).
LIST_ATTRS = ("userid", "name", "queue", "state", "result", "waitstatus", "priority",
              "t_submit", "t_run", "t_cleanup", "t_inactive", "nodelist",
              "exception_occurred", "exception_type", "exception_severity", "exception_note")
#: FLUX_USERID_UNKNOWN: "all users" in a job-list query.
ALL_USERS = 0xFFFFFFFF
#: PATH of the flux commands run as a job's owner.
SAFE_PATH = SYSTEM_PATH
_JOURNAL_TOPIC = "job-manager.events-journal"


@dataclass(frozen=True)
class FluxModules:
    """The imported flux-python modules."""

    flux: ModuleType
    job: ModuleType
    constants: ModuleType


def import_flux() -> FluxModules:
    """Import flux-python; :class:`BackendUnavailable` with the fix when it cannot be."""
    try:
        flux = importlib.import_module("flux")
        job = importlib.import_module("flux.job")
        constants = importlib.import_module("flux.constants")
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing == "ply" or missing.startswith("ply."):
            raise BackendUnavailable(
                "flux-python needs the 'ply' package, which its wheel does not declare: "
                "pip install ply") from None
        if missing == "flux" or missing.startswith("flux."):
            raise BackendUnavailable(
                "flux-python is not installed: pip install flux-python==<flux-core version> "
                "(the bindings must match the flux-core the broker runs; they need "
                "libflux-core.so.2 from flux-core)") from None
        raise BackendUnavailable(f"flux-python cannot be imported: {exc}") from None
    except (ImportError, OSError) as exc:
        text = str(exc)
        if "libflux" in text:
            raise BackendUnavailable(
                f"libflux-core.so.2 not found ({text}): flux-python needs flux-core's "
                f"library; install flux-core (the version the bindings were built for) or "
                f"add its lib directory to LD_LIBRARY_PATH") from None
        raise BackendUnavailable(f"flux-python cannot be loaded: {text}") from None
    return FluxModules(flux=flux, job=job, constants=constants)


def classify(exc: BaseException, what: str, *, permanent: frozenset[int] = frozenset()
             ) -> BackendError:
    """The bridge error for a failed Flux call: errnos in ``permanent`` (and messages that
    say the request itself is wrong) -> :class:`BackendRejected`; everything else ->
    :class:`BackendUnavailable` (retried)."""
    if isinstance(exc, BackendError):
        return exc
    if isinstance(exc, TimeoutError):
        return BackendUnavailable(f"{what}: no answer from Flux in time")
    if isinstance(exc, OSError):
        message = exc.strerror or str(exc)
        if exc.errno in permanent and "disabled" not in message.lower():
            return BackendRejected(f"{what}: {message}")
        return BackendUnavailable(f"{what}: {message}")
    return BackendUnavailable(f"{what}: {type(exc).__name__}: {exc}")


class FluxConnection(Protocol):
    """One connection to a Flux instance; every method blocks (call it off the event loop,
    always from the same thread)."""

    def version(self) -> str:
        """flux-core version of the broker (attribute ``version``)."""

    def instance_owner(self) -> int:
        """Unix uid of the instance owner (attribute ``security.owner``)."""

    def submit(self, jobspec: Mapping[str, Any]) -> int:
        """Submit as the connection's user; the job id."""

    def cancel(self, job_id: int, reason: str) -> None:
        """Raise a ``cancel`` exception on the job."""

    def list_jobs(self, since: float = 0.0) -> list[dict[str, Any]]:
        """``job-list.list``: every job of every user active since ``since`` (0: all
        that Flux retains), with :data:`LIST_ATTRS`."""

    def jobspecs(self, job_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The jobspecs of these jobs (``job-info.lookup``, pipelined); jobs that cannot
        be read (unknown, or another user's for a guest) are left out."""

    def resource_status(self) -> dict[str, Any]:
        """``{"all": R, "allocated": R, "down": R}`` (what ``flux resource list`` reads)."""

    def config(self) -> dict[str, Any]:
        """The instance configuration (``config.get``), ``{}`` if not readable."""

    def journal(self, stop: threading.Event) -> Iterator[dict[str, Any]]:
        """The ``job-manager.events-journal`` stream (``full: false``): one response per
        job of the backlog of active jobs, ``{"id": -1, "events": []}`` after it, then one
        response per event, until ``stop`` is set. Needs the instance owner's role
        (``EPERM`` otherwise). A lost broker raises ``OSError`` (``ECONNRESET``)."""

    def close(self) -> None:
        """Disconnect (ends a journal stream)."""


class PythonFlux:
    """:class:`FluxConnection` through flux-python (``flux.Flux(uri)``)."""

    def __init__(self, uri: str | None, timeout: float = 10.0,
                 modules: FluxModules | None = None) -> None:
        self.mods = modules or import_flux()
        self.uri = uri
        self.timeout = timeout
        where = uri or os.environ.get("FLUX_URI") or "the local instance (FLUX_URI unset)"
        try:
            self.handle: Any = self.mods.flux.Flux(uri) if uri else self.mods.flux.Flux()
        except OSError as exc:
            raise BackendUnavailable(
                f"the Flux broker at {where} is unreachable: {exc.strerror or exc}") from None

    def _wait(self, future: Any) -> Any:
        return future.wait_for(self.timeout)

    def version(self) -> str:
        return str(self.handle.attr_get("version"))

    def instance_owner(self) -> int:
        return int(self.handle.attr_get("security.owner"))

    def _validate(self, jobspec: Mapping[str, Any]) -> None:
        cls = getattr(self.mods.job, "JobspecV1", None)
        if cls is None:
            return
        try:
            cls(**jobspec)
        except (ValueError, TypeError) as exc:
            raise BackendRejected(f"flux-python refuses the jobspec: {exc}") from None
        except Exception:  # noqa: S110 - validation needs no broker; skip if it wants one
            pass

    def submit(self, jobspec: Mapping[str, Any]) -> int:
        self._validate(jobspec)
        future = self.mods.job.submit_async(self.handle, json.dumps(jobspec))
        return int(self._wait(future).get_id())

    def cancel(self, job_id: int, reason: str) -> None:
        self._wait(self.mods.job.cancel_async(self.handle, job_id, reason)).get()

    def list_jobs(self, since: float = 0.0) -> list[dict[str, Any]]:
        users = getattr(self.mods.constants, "FLUX_USERID_UNKNOWN", ALL_USERS)
        try:
            rpc = self.mods.job.job_list(self.handle, max_entries=0, attrs=list(LIST_ATTRS),
                                         userid=users, since=since)
        except TypeError:  # flux-python before RFC 43 "since": the whole list
            rpc = self.mods.job.job_list(self.handle, max_entries=0, attrs=list(LIST_ATTRS),
                                         userid=users)
        jobs = self._wait(rpc).get_jobs()
        return [dict(j) for j in jobs if isinstance(j, Mapping)]

    def jobspecs(self, job_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        lookup = importlib.import_module("flux.job.kvslookup")
        futures = [(jid, lookup.job_info_lookup(self.handle, jid, keys=["jobspec"]))
                   for jid in job_ids]
        found: dict[int, dict[str, Any]] = {}
        for jid, future in futures:
            try:
                data = self._wait(future).get_decode()
            except OSError:
                continue
            spec = data.get("jobspec") if isinstance(data, Mapping) else None
            if isinstance(spec, str):
                try:
                    spec = json.loads(spec)
                except ValueError:
                    spec = None
            if isinstance(spec, dict):
                found[jid] = spec
        return found

    def _rpc(self, topic: str, payload: Mapping[str, Any] | None = None) -> Any:
        return self._wait(self.handle.rpc(topic, payload, 0)).get()

    def resource_status(self) -> dict[str, Any]:
        try:
            data = self._rpc("resource.sched-status")
        except OSError as exc:
            if exc.errno != errno.ENOSYS:
                raise
            data = self._rpc("sched.resource-status")  # older flux-core, Fluxion
        return dict(data) if isinstance(data, Mapping) else {}

    def config(self) -> dict[str, Any]:
        try:
            data = self._rpc("config.get")
        except OSError:
            return {}
        return dict(data) if isinstance(data, Mapping) else {}

    def journal(self, stop: threading.Event) -> Iterator[dict[str, Any]]:
        streaming = getattr(self.mods.constants, "FLUX_RPC_STREAMING", 2)
        future = self.handle.rpc(_JOURNAL_TOPIC, {"full": False}, 0, streaming)
        while not stop.is_set():
            try:
                resp = future.wait_for(1.0).get()
            except OSError as exc:
                if exc.errno == errno.ETIMEDOUT:
                    continue
                if exc.errno == errno.ENODATA:
                    return
                raise
            future.reset()
            if resp is None:
                # What flux-python (0.88) answers, at once and forever, once the broker
                # has died: no error. Every journal response has a payload, so None means
                # the connection is gone; raise, so the caller reconnects.
                raise OSError(errno.ECONNRESET, "the Flux broker connection was lost "
                                                "(the event journal answered nothing)")
            if isinstance(resp, Mapping):
                yield dict(resp)

    def close(self) -> None:
        close = getattr(self.handle, "close", None)
        if callable(close):
            close()


# --------------------------------------------------------------------------- as the owner


@dataclass(frozen=True)
class RunResult:
    """A finished ``flux`` command."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def message(self) -> str:
        lines = [ln for ln in self.stderr.strip().splitlines() if ln.strip()]
        return lines[-1] if lines else ""


def owner_command_env(owner: Owner, uri: str | None, flux_command: str) -> dict[str, str]:
    """The whole environment of a ``flux`` command run as ``owner``: a fixed PATH (with the
    directory of an absolute ``flux_command``), HOME, ``FLUX_URI`` when configured, and
    ASCII job ids."""
    try:
        home = pwd.getpwuid(owner.uid).pw_dir or "/"
    except KeyError:
        home = "/"
    path = SAFE_PATH
    if os.path.isabs(flux_command):
        path = f"{os.path.dirname(flux_command)}:{path}"
    env = {"PATH": path, "HOME": home, "USER": owner.user, "LOGNAME": owner.user,
           "LANG": "C.UTF-8", "FLUX_F58_FORCE_ASCII": "1"}
    if uri:
        env["FLUX_URI"] = uri
    elif os.environ.get("FLUX_URI"):
        env["FLUX_URI"] = os.environ["FLUX_URI"]
    return env


async def run_flux_as(owner: Owner, argv: Sequence[str], *, env: Mapping[str, str],
                      stdin: bytes = b"", time_limit: float = 30.0) -> RunResult:
    """Run ``argv`` (a ``flux`` command) as ``owner`` in ``/``, killed after ``time_limit`` s.

    Raises :class:`BackendRejected` when the daemon may not switch to that user (it is
    not root), :class:`BackendUnavailable` when the command cannot start or overruns.
    """
    if os.geteuid() not in (0, owner.uid):
        raise BackendRejected(f"the daemon (uid {os.geteuid()}) cannot run Flux commands "
                              f"as {owner.user} (uid {owner.uid}): it needs root")
    program = argv[0]
    if shutil.which(program, path=env.get("PATH")) is None:
        raise BackendUnavailable(f"{program!r} not found on PATH {env.get('PATH')!r}")
    spawn = Spawn(list(argv))
    if os.geteuid() == 0 and owner.uid != 0:
        # setpriv switches in a vforked child; CPython's own switch forks the daemon.
        switcher = await switcher_for(SYSTEM_PATH)
        found = shutil.which(program, path=env.get("PATH")) or program
        spawn = switcher.spawn(Switch.to(owner), [found, *argv[1:]])
    try:
        async with asyncio.timeout(time_limit):
            returncode, out, err = await subproc.communicate(
                spawn.argv, stdin=stdin, cwd="/", env=dict(env), umask=JOB_UMASK,
                **spawn.kwargs)
    except TimeoutError:  # before OSError: TimeoutError is one of its subclasses
        raise BackendUnavailable(f"{' '.join(argv[:3])} did not finish in {time_limit:.0f}s"
                                 ) from None
    except OSError as exc:
        raise BackendUnavailable(f"cannot run {program}: {exc.strerror or exc}") from None
    failed = spawn.failed(returncode, err)
    if failed is not None:
        raise BackendUnavailable(f"cannot run {program} as {owner.user}: {failed}")
    return RunResult(returncode=returncode,
                     stdout=out.decode(errors="replace"), stderr=err.decode(errors="replace"))


#: Messages of a failed ``flux`` command that mean "try again later".
_TRANSIENT = ("connection refused", "no such file or directory", "connection reset",
              "timed out", "function not implemented", "resource temporarily unavailable",
              "disabled", "unable to connect", "broken pipe")


def is_transient(message: str) -> bool:
    """Does a ``flux`` command's error say the instance is unreachable, not the request
    wrong?"""
    low = message.lower()
    return any(t in low for t in _TRANSIENT)
