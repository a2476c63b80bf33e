"""The back-end call wrapper of bridge/metrics_backend.py: timing, failures, and the
optional protocols seen exactly as the wrapped back end has them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from prometheus_client import CollectorRegistry

from bridge.backend import BackendUnavailable, Owner, ReportsJobsStatus, StatusBatch, Suspendable
from bridge.metrics_backend import instrument


class _Plain:
    """Enough of a back end for the wrapper (it only forwards)."""

    packs_units = True

    async def submit(self, request: object) -> str:
        return "42"

    async def cancel(self, backend_id: str, owner: object) -> None:
        raise BackendUnavailable("down")

    async def watch(self, interval: float) -> AsyncIterator[StatusBatch]:
        yield StatusBatch(jobs=(), complete=True, at=0.0)


class _Suspending(_Plain):
    async def set_suspended(self, backend_id: str, suspend: bool, owner: Owner) -> None:
        return None


async def test_calls_are_timed_failures_counted_and_batches_sized() -> None:
    registry = CollectorRegistry()
    backend = instrument({"slurm": _Plain()}, registry)["slurm"]
    assert await backend.submit(None) == "42"
    with pytest.raises(BackendUnavailable):
        await backend.cancel("1", None)
    batches = [b async for b in backend.watch(1.0)]
    assert len(batches) == 1
    value = registry.get_sample_value
    assert value("hpcbridge_backend_call_seconds_count",
                 {"backend": "slurm", "call": "submit"}) == 1
    assert value("hpcbridge_backend_call_failures_total",
                 {"backend": "slurm", "call": "cancel", "error": "BackendUnavailable"}) == 1
    assert value("hpcbridge_backend_poll_jobs_count",
                 {"backend": "slurm", "complete": "true"}) == 1
    assert getattr(backend, "packs_units", False) is True


def test_optional_protocols_are_those_of_the_wrapped_back_end() -> None:
    wrapped = instrument({"a": _Plain(), "b": _Suspending()},
                         CollectorRegistry())
    assert not isinstance(wrapped["a"], Suspendable)
    assert isinstance(wrapped["b"], Suspendable)


class _Reporting(_Plain):
    def jobs_status(self, namespace: str, job_uid: str) -> list[dict[str, object]] | None:
        return [{"name": "node", "active": 1}]

    def on_jobs_status(self, listener: Callable[[str], None]) -> Callable[[], None]:
        return lambda: None


def test_the_jobs_status_seam_is_seen_through_the_wrapper() -> None:
    """The TrainJob door asks a back end for ``jobsStatus`` through this protocol: with
    metrics on every back end is wrapped, and a check of the concrete class (as the door
    once made) saw none, so every TrainJob's jobsStatus was the synthetic one."""
    from k8s_adapter.backend import KubernetesBackend

    assert issubclass(KubernetesBackend, ReportsJobsStatus)
    wrapped = instrument({"a": _Plain(), "k": _Reporting()}, CollectorRegistry())
    assert not isinstance(wrapped["a"], ReportsJobsStatus)
    assert isinstance(wrapped["k"], ReportsJobsStatus)
    assert wrapped["k"].jobs_status("ns", "u") == [{"name": "node", "active": 1}]


def test_the_grafana_dashboard_uses_only_metrics_the_daemon_exports() -> None:
    import json
    import re
    from pathlib import Path

    from bridge.metrics import Metrics
    from bridge.metrics_backend import BackendMetrics
    from bridge.store import Store

    metrics = Metrics(Store.open(":memory:"))
    BackendMetrics(metrics.registry)
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"],
                "gauge": [""]}
    exported = {family.name + suffix for family in metrics.registry.collect()
                for suffix in suffixes[family.type]}
    exported |= {"hpcbridge_mqtt_connected"}  # only with [events.mqtt]
    dashboard = Path(__file__).parents[2] / "charts/hpc-bridge/files/grafana-dashboard.json"
    exprs = [t["expr"] for p in json.loads(dashboard.read_text())["panels"]
             for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"hpcbridge_[a-z_]+", e)}
    assert used and used <= exported, used - exported


def test_the_optional_protocols_hold_as_python_3_12_checks_them() -> None:
    """From Python 3.12 ``isinstance`` against a runtime-checkable protocol looks each
    member up with ``inspect.getattr_static`` (never ``__getattr__``): done here by
    hand, on this interpreter too. The real back ends are wrapped as the daemon wraps
    them."""
    import inspect
    import typing

    import bridge.backend as seam
    from flux_adapter.backend import FluxBackend
    from k8s_adapter.backend import KubernetesBackend
    from slurm_adapter.backend import SlurmBackend

    protocols = [p for p in vars(seam).values()
                 if isinstance(p, type) and issubclass(p, typing.Protocol)  # type: ignore[arg-type]
                 and getattr(p, "_is_runtime_protocol", False)]
    assert {p.__name__ for p in protocols} >= {"Backend", "Suspendable", "ReportsJobsStatus",
                                               "Admitting", "QueueHolding"}

    def holds_statically(obj: object, proto: type) -> bool:
        missing = object()
        return all(inspect.getattr_static(obj, m, missing) is not missing
                   for m in typing_members(proto))

    def typing_members(proto: type) -> set[str]:
        return set(getattr(proto, "__protocol_attrs__", None)
                   or typing._get_protocol_attrs(proto))  # type: ignore[attr-defined]

    wrapped = instrument({"a": _Plain(), "k": _Reporting(), "b": _Suspending()},
                         CollectorRegistry())
    for proto in protocols:
        for key, inner in (("a", _Plain()), ("k", _Reporting()), ("b", _Suspending())):
            assert holds_statically(wrapped[key], proto) == holds_statically(inner, proto), (
                proto.__name__, key)
    assert holds_statically(wrapped["k"], ReportsJobsStatus)
    assert holds_statically(wrapped["b"], Suspendable)
    for cls in (KubernetesBackend, SlurmBackend, FluxBackend):
        for proto in protocols:
            if holds_statically(cls, proto):
                fake = object.__new__(cls)  # the names are the class's
                (one,) = instrument({"x": fake}, CollectorRegistry()).values()
                assert holds_statically(one, proto), (cls.__name__, proto.__name__)
