"""Leader election with a ``coordination.k8s.io/v1`` Lease (entry point
``hpc_bridge.leader_election: kubernetes``; the contract is :mod:`bridge.leader`).

The election rules are kubernetes_asyncio's (``leaderelection``, a port of
client-go's): a candidate takes the Lease when it is absent, released (no holder), or
not renewed for ``lease_duration`` seconds *as observed locally* (no clock comparison
between hosts); updates carry the Lease's resourceVersion, so two candidates never
both win. Around one attempt (:meth:`LeaderElection.try_acquire_or_renew`) this module
keeps its own loops, because the library's ``run`` lets a connection error escape and
times its renew deadline with the wall clock: here every attempt has a timeout, an
error counts as a failed attempt, and the renew deadline is monotonic.

Settings (``[leader_election]``, ``kind = "kubernetes"``): ``lease`` (name, default
``hpc-bridge``), ``namespace`` (default: the pod's own, from its service account),
``identity`` (default: ``$POD_NAME`` or the host name, plus the pid),
``lease_duration`` (15 s), ``renew_deadline`` (10 s), ``retry_period`` (2 s),
``kubeconfig``, ``context``, ``request_timeout``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from k8s_adapter.kube import Kube, KubeSettings, kube_settings

log = structlog.get_logger(__name__)

POD_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
KNOWN_SETTINGS = frozenset({"lease", "namespace", "identity", "lease_duration",
                            "renew_deadline", "retry_period", "kubeconfig", "context",
                            "request_timeout", "watch_timeout"})


class LeaseElector:
    """See the module docstring."""

    def __init__(self, kube: KubeSettings, lease: str, namespace: str, identity: str,
                 lease_duration: int, renew_deadline: float, retry_period: float):
        self.kube = Kube(kube)
        self.lease = lease
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._election: Any = None
        self._renewed = 0.0  # monotonic time of the last successful acquire/renew
        self._held = False

    async def _setup(self) -> Any:
        if self._election is None:
            from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
            from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

            while True:
                try:
                    await self.kube.connect()
                    break
                except Exception as exc:  # the apiserver may be down: keep waiting
                    log.warning("leader election: cannot reach Kubernetes: %s", exc)
                    await asyncio.sleep(self.retry_period)
            lock = LeaseLock(self.lease, self.namespace, self.identity, self.kube.api_client)

            async def unused() -> None:  # the library's callbacks: this module's loops
                return None                # call try_acquire_or_renew directly

            config = electionconfig.Config(lock, self.lease_duration, self.renew_deadline,
                                           self.retry_period, unused, unused)
            self._election = leaderelection.LeaderElection(config)
        return self._election

    async def _attempt(self) -> bool:
        election = await self._setup()
        try:
            async with asyncio.timeout(min(self.kube.settings.request_timeout,
                                           self.renew_deadline)):
                ok = bool(await election.try_acquire_or_renew())
        except Exception as exc:  # a timeout, a connection error, a bad answer
            log.warning("leader election: lease %s/%s: %s", self.namespace, self.lease,
                        exc or type(exc).__name__)
            return False
        if ok:
            self._renewed = time.monotonic()
        return ok

    def valid_until(self) -> float:
        return self._renewed + self.renew_deadline if self._held else 0.0

    async def acquire(self) -> None:
        log.info("leader election: %s waits for lease %s/%s", self.identity,
                 self.namespace, self.lease)
        while not await self._attempt():  # noqa: ASYNC110 - polling the apiserver is the protocol
            await asyncio.sleep(self.retry_period)
        self._held = True
        log.info("leader election: %s leads (lease %s/%s)", self.identity, self.namespace,
                 self.lease)

    async def hold(self) -> None:
        while True:
            await asyncio.sleep(self.retry_period)
            while not await self._attempt():
                if time.monotonic() > self._renewed + self.renew_deadline:
                    self._held = False
                    log.error("leader election: %s could not renew lease %s/%s within %ss",
                              self.identity, self.namespace, self.lease, self.renew_deadline)
                    return
                await asyncio.sleep(self.retry_period)

    async def release(self) -> None:
        """Clear the holder (client-go's ReleaseOnCancel) so a standby takes over at
        its next attempt, if this replica still holds the lease."""
        if not self._held:
            await self.kube.close()
            return
        self._held = False
        try:
            from kubernetes_asyncio import client

            api = client.CoordinationV1Api(self.kube.api_client)
            lease = await api.read_namespaced_lease(self.lease, self.namespace)
            if lease.spec is not None and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = None  # type: ignore[assignment]
                lease.spec.lease_duration_seconds = 1
                await api.replace_namespaced_lease(self.lease, self.namespace, lease)
                log.info("leader election: %s released lease %s/%s", self.identity,
                         self.namespace, self.lease)
        except Exception as exc:  # the lease then runs out by itself
            log.warning("leader election: releasing lease %s/%s: %s", self.namespace,
                        self.lease, exc)
        finally:
            await self.kube.close()


def _number(settings: Mapping[str, Any], key: str, default: float) -> float:
    value = settings.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 1:
        raise ValueError(f"leader_election.{key} must be a number >= 1, got {value!r}")
    return float(value)


def create(name: str, settings: Mapping[str, Any]) -> LeaseElector:
    """Entry point ``hpc_bridge.leader_election: kubernetes``; ValueError for bad
    settings (unknown keys, durations the election rules refuse, no namespace)."""
    unknown = set(settings) - KNOWN_SETTINGS - {"kind"}
    if unknown:
        raise ValueError(f"{name}: unknown setting(s) {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(sorted(KNOWN_SETTINGS))}")
    duration = _number(settings, "lease_duration", 15)
    if duration != int(duration):
        raise ValueError(f"{name}.lease_duration must be whole seconds (a Lease field), "
                         f"got {duration}")
    deadline = _number(settings, "renew_deadline", 10)
    retry = _number(settings, "retry_period", 2)
    if not duration > deadline > 1.2 * retry:
        raise ValueError(f"{name}: need lease_duration > renew_deadline > 1.2 * "
                         f"retry_period, got {duration}, {deadline}, {retry}")
    namespace = settings.get("namespace")
    if namespace is None and POD_NAMESPACE_FILE.exists():
        namespace = POD_NAMESPACE_FILE.read_text().strip()
    if not isinstance(namespace, str) or not namespace:
        raise ValueError(f"{name}.namespace is needed outside a pod")
    identity = settings.get("identity") or (
        f"{os.environ.get('POD_NAME') or socket.gethostname()}_{os.getpid()}")
    lease = settings.get("lease", "hpc-bridge")
    if not isinstance(lease, str) or not isinstance(identity, str):
        raise ValueError(f"{name}.lease and {name}.identity must be strings")
    kube = kube_settings(name, {k: v for k, v in settings.items()
                                if k in ("kubeconfig", "context", "request_timeout")})
    return LeaseElector(kube, lease, namespace, identity, int(duration), deadline, retry)
