"""Back-end call metrics: a wrapper that times a back end's calls for Prometheus.

:func:`instrument` wraps each configured back end before the engine gets it. Calls of
:data:`TIMED` are timed (``hpcbridge_backend_call_seconds{backend,call}``) and their
exceptions counted (``hpcbridge_backend_call_failures_total{backend,call,error}``, the
exception's class, e.g. ``BackendUnavailable``); each batch of the status stream counts
its jobs (``hpcbridge_backend_poll_jobs{backend,complete}``). Everything else passes
through unchanged, so the optional protocols (``Suspendable``, ``Admitting``,
``ReportsJobsStatus`` …) are seen exactly as the back end implements them: each wrapper
is of a class made for its back end, with a forwarding attribute for each public name
the back end has and none for those it lacks. (From Python 3.12 ``isinstance`` against a
runtime-checkable protocol looks names up with ``inspect.getattr_static``, which never
calls ``__getattr__``: a wrapper that forwarded only through ``__getattr__`` would
satisfy no optional protocol, and every wrapped back end would lose suspend, admission
checks and ``jobsStatus``.)
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, cast

from prometheus_client import CollectorRegistry, Counter, Histogram

from bridge.backend import Backend, StatusBatch

#: The calls timed: each a coroutine function of the back end.
TIMED = frozenset({"submit", "lookup", "cancel", "inventory", "set_suspended", "read_log"})
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class BackendMetrics:
    """The metrics of back-end calls, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = Histogram("hpcbridge_backend_call_seconds", "Back-end call durations",
                               ["backend", "call"], buckets=_BUCKETS, registry=registry)
        self.failures = Counter("hpcbridge_backend_call_failures", "Back-end calls that "
                                "raised, by exception class", ["backend", "call", "error"],
                                registry=registry)
        self.poll_jobs = Histogram("hpcbridge_backend_poll_jobs", "Jobs per status batch",
                                   ["backend", "complete"],
                                   buckets=(0, 1, 10, 100, 1000, 10_000), registry=registry)


class _Forward:
    """A class attribute of a wrapper that forwards to the wrapped back end's."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: _Instrumented | None, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        return obj._resolve(self.name)


class _Instrumented:
    """A back end whose :data:`TIMED` calls and status stream are measured. Made by
    :func:`wrap`, which gives it a forwarding attribute per public name of the back end."""

    def __init__(self, inner: Backend, name: str, metrics: BackendMetrics) -> None:
        self._inner = inner
        self._name = name
        self._metrics = metrics

    def __getattr__(self, attr: str) -> Any:
        # Names the back end got after it was wrapped (and private ones).
        return self._resolve(attr)

    def _resolve(self, attr: str) -> Any:
        value = getattr(self._inner, attr)
        if attr == "watch":
            return self._watch(value)
        if attr in TIMED:
            return self._timed(attr, value)
        return value

    def _timed(self, call: str, method: Callable[..., Any]) -> Callable[..., Any]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await method(*args, **kwargs)
            except Exception as exc:
                self._metrics.failures.labels(self._name, call, type(exc).__name__).inc()
                raise
            finally:
                self._metrics.calls.labels(self._name, call).observe(
                    time.perf_counter() - started)
        return timed

    def _watch(self, method: Callable[[float], AsyncIterator[StatusBatch]]
               ) -> Callable[[float], AsyncIterator[StatusBatch]]:
        async def watch(interval: float) -> AsyncIterator[StatusBatch]:
            async for batch in method(interval):
                self._metrics.poll_jobs.labels(self._name, str(batch.complete).lower()
                                               ).observe(len(batch.jobs))
                yield batch
        return watch


def wrap(backend: Backend, name: str, metrics: BackendMetrics) -> Backend:
    """``backend`` measured into ``metrics`` as back end ``name``."""
    names = {n for n in dir(backend) if not n.startswith("_")}
    cls = type(f"Instrumented{type(backend).__name__}", (_Instrumented,),
               {n: _Forward(n) for n in sorted(names)})
    return cast(Backend, cls(backend, name, metrics))


def instrument(backends: Mapping[str, Backend], registry: CollectorRegistry
               ) -> dict[str, Backend]:
    """``backends`` with every one wrapped (see the module's documentation)."""
    metrics = BackendMetrics(registry)
    return {name: wrap(backend, name, metrics) for name, backend in backends.items()}
