"""The engine places jobs before submitting them (docs/placement.md): the decision
(:func:`bridge.placement_decision.plan_placement`), the ``--switches`` wait, pinning, recording."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bridge.engine import Engine, EngineSettings
from bridge.model import ANN_BACKEND, ANN_SCHEDULING, TrainJob
from bridge.nodes import Inventory
from bridge.placement_decision import booked_in, plan_placement
from bridge.runtimes import RuntimeCatalog
from bridge.scheduling import SchedulingOptions
from bridge.states import JobState
from bridge.store import Store
from bridge.topology import Topology, topology_from_inventory
from tests.unit.builders import ALICE, inventory
from tests.unit.builders import scheduled_trainjob as trainjob
from tests.unit.fakes import FakeBackend, settle

# ALICE, FakeBackend, inventory, settle and trainjob are imported from here by other
# modules (tests/unit/test_ownership.py ...): keep them importable from this module.
__all__ = ["ALICE", "FakeBackend", "inventory", "settle", "trainjob"]


def decide(job: TrainJob, mode: str = "constraints", topo: Topology | None = None,
           waited: float = 0.0) -> Any:
    options = SchedulingOptions.model_validate_json(
        job.metadata.annotations[ANN_SCHEDULING] or "{}")
    plan = RuntimeCatalog().resolve(job)
    topo = topo if topo is not None else topology_from_inventory(inventory())
    return plan_placement(job, plan, options, mode, topo, admitted_at=1000.0,
                          now=1000.0 + waited, backend="slurm")


# --- the decision ------------------------------------------------------------------


def test_constraints_mode_predicts_and_does_not_pin() -> None:
    d = decide(trainjob())
    assert d.placement.hosts == ("node1", "node2") and not d.pin and not d.wait
    assert d.options == {}
    rec = d.record(1000.0)
    assert rec["mode"] == "constraints" and rec["hosts"] == ["node1", "node2"]
    assert rec["score"] == "leaf:1,level1:1" and rec["pinned"] is False


def test_nodelist_mode_pins() -> None:
    d = decide(trainjob(switches=1), "nodelist")
    assert d.pin and d.placement.hosts == ("node1", "node2")
    # The pin enforces the switch count: --switches is not passed on.
    assert d.options == {"switches": None, "switches_wait_minutes": None}


def test_nodelist_mode_does_not_pin_what_it_cannot_evaluate() -> None:
    d = decide(trainjob(constraint="a|b"), "nodelist")
    assert not d.pin and "not evaluated" in d.note


def test_switches_wait_then_relax() -> None:
    busy = topology_from_inventory(inventory(busy=("node1", "node3")))
    job = trainjob(switches=1, switches_wait_minutes=2)
    d = decide(job, topo=busy, waited=60)
    assert d.wait and not d.placement.fits
    assert d.note.startswith("--switches=1: does not fit within 1 leaf switch(es) now")
    assert "best placement now uses 2 (leaf1, leaf2)" in d.note
    assert "waiting until 1970-01-01T00:18:40Z" in d.note  # admitted 1000 s + 120 s
    d = decide(job, topo=busy, waited=120)
    assert not d.wait and d.relaxed and d.placement.hosts == ("node2", "node4")
    assert d.options == {"switches": None, "switches_wait_minutes": None}
    assert "submitted without the constraint" in d.note


def test_switches_default_wait_is_slurms_max_switch_wait() -> None:
    busy = topology_from_inventory(inventory(busy=("node1", "node3")))
    assert decide(trainjob(switches=1), topo=busy, waited=299).wait
    assert decide(trainjob(switches=1), topo=busy, waited=300).relaxed


def test_switches_that_fit_keep_the_wait_that_is_left_in_constraints_mode() -> None:
    d = decide(trainjob(switches=1, switches_wait_minutes=5), waited=90)
    assert not d.wait and d.placement.leaf_domains == ("leaf1",)
    assert d.options == {"switches_wait_minutes": 4}


@pytest.mark.parametrize(("mode", "options", "topo", "note"), [
    ("none", {}, "bed", "placement is off"),
    ("constraints", {"nodelist": "node3"}, "bed", "names its nodes"),
    ("nodelist", {}, None, "no inventory of slurm yet"),
])
def test_no_placement(mode: str, options: dict[str, Any], topo: str | None, note: str) -> None:
    job = trainjob(**options)
    opts = SchedulingOptions(**options)
    d = plan_placement(job, RuntimeCatalog().resolve(job), opts, mode,
                       topology_from_inventory(inventory()) if topo else None, 0.0, 0.0,
                       backend="slurm")
    assert d.placement is None and not d.pin and note in d.note


def test_a_job_that_fits_nowhere_now_goes_unpinned() -> None:
    d = decide(trainjob(nodes=3), "nodelist",
               topo=topology_from_inventory(inventory(busy=("node1", "node2"))))
    assert not d.pin and not d.wait and "slurm queues it" in d.note


# --- the engine with a fake back end -------------------------------------------------


def engine(tmp_path: Path, backend: FakeBackend, mode: str = "constraints") -> Engine:
    return Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": backend}, RuntimeCatalog(),
                  EngineSettings(default_backend="slurm", placement={"slurm": mode},
                                 placement_max_age=0.0))


async def test_a_pass_places_jobs_without_double_booking(tmp_path: Path) -> None:
    backend = FakeBackend(inventory())
    e = engine(tmp_path, backend, "nodelist")
    first = e.admit(trainjob(cpus_per_task=2), ALICE)  # each takes both CPUs of 2 nodes
    second = e.admit(trainjob(cpus_per_task=2), ALICE)
    third = e.admit(trainjob(nodes=1), ALICE)
    await settle(e)
    pins = [r.placement.hosts if r.placement else None for r in backend.submitted]
    assert pins == [("node1", "node2"), ("node3", "node4"), None]
    assert "queues it" in (e.store.get(third.id).placement or {})["note"]
    rec = e.store.get(first.id)
    assert rec.state is JobState.SUBMITTED and rec.placement is not None
    assert rec.placement["pinned"] is True and rec.placement["hosts"] == ["node1", "node2"]
    assert e.store.get(second.id).placement["levels"][0]["domains"] == ["leaf2"]  # type: ignore[index]


async def test_switches_job_waits_then_goes_when_it_fits(tmp_path: Path) -> None:
    backend = FakeBackend(inventory(busy=("node1", "node3")))
    e = engine(tmp_path, backend)
    rec = e.admit(trainjob(switches=1, switches_wait_minutes=10), ALICE)
    await settle(e)
    await settle(e)
    waiting = e.store.get(rec.id)
    assert waiting.state is JobState.PENDING and waiting.reason == "WaitingForTopology"
    assert "--switches=1" in waiting.message and waiting.attempts == 0
    assert waiting.placement is not None and waiting.placement["waiting"] is True
    assert not backend.submitted
    # Only the state change is a transition; waiting passes do not add history.
    assert len(e.store.transitions(rec.id)) == 1
    backend.inv = inventory(busy=("node1",))
    await settle(e)
    done = e.store.get(rec.id)
    assert done.state is JobState.SUBMITTED
    sent = backend.submitted[0]
    assert sent.placement is None  # constraints mode: slurmctld chooses...
    assert sent.options.switches == 1 and sent.options.switches_wait_minutes == 10  # ...within 1
    assert done.placement is not None and done.placement["hosts"] == ["node3", "node4"]


async def test_a_switch_request_an_outside_queue_places_is_not_waited_for(
        tmp_path: Path) -> None:
    """A back end whose pods an outside queue places (Kueue, which got the request:
    k8s_adapter/kueue_topology.py) submits such a job at once: the bridge's inventory
    may disagree with the queue's, which enforces the request itself."""

    class Queued(FakeBackend):
        def queue_places(self, job: TrainJob) -> bool:
            return True

    backend = Queued(inventory(busy=("node1", "node3")))
    e = engine(tmp_path, backend)
    rec = e.admit(trainjob(switches=1, switches_wait_minutes=10), ALICE)
    await settle(e)
    assert e.store.get(rec.id).state is JobState.SUBMITTED
    assert backend.submitted[0].options.switches == 1  # the job's own options, as asked


async def test_switches_job_relaxed_after_its_wait(tmp_path: Path) -> None:
    backend = FakeBackend(inventory(busy=("node1", "node3")))
    e = engine(tmp_path, backend)
    rec = e.admit(trainjob(switches=1, switches_wait_minutes=0), ALICE)
    await settle(e)
    done = e.store.get(rec.id)
    assert done.state is JobState.SUBMITTED
    assert "submitted without the constraint" in done.message
    assert backend.submitted[0].options.switches is None
    assert done.placement is not None and done.placement["relaxed"] is True


async def test_inventory_is_read_again_when_stale(tmp_path: Path) -> None:
    backend = FakeBackend(inventory())
    e = Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": backend}, RuntimeCatalog(),
               EngineSettings(default_backend="slurm", placement_max_age=3600,
                              placement_min_reread=0.0))
    e.admit(trainjob(), ALICE)
    await settle(e)
    e.admit(trainjob(), ALICE)
    await settle(e)
    # Read once for the first job, again after the submission made it stale.
    assert backend.inventory_calls == 2
    await settle(e)  # nothing to place: nothing read
    assert backend.inventory_calls == 2


async def test_a_stream_of_submissions_reads_once_and_books_what_it_placed(
        tmp_path: Path) -> None:
    """Stale after each submission, the inventory is read again only once it is
    ``placement_min_reread`` old; until then the jobs placed since the read are taken
    off it, across passes: no host is booked twice."""
    backend = FakeBackend(inventory())
    e = Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": backend}, RuntimeCatalog(),
               EngineSettings(default_backend="slurm", placement={"slurm": "nodelist"},
                              placement_max_age=3600, placement_min_reread=3600))
    first = e.admit(trainjob(cpus_per_task=2), ALICE)  # each takes both CPUs of 2 nodes
    await settle(e)
    second = e.admit(trainjob(cpus_per_task=2), ALICE)
    await settle(e)
    third = e.admit(trainjob(nodes=1), ALICE)
    await settle(e)
    assert backend.inventory_calls == 1
    pins = [r.placement.hosts if r.placement else None for r in backend.submitted]
    assert pins == [("node1", "node2"), ("node3", "node4"), None]
    assert e.store.get(first.id).state is JobState.SUBMITTED
    assert e.store.get(second.id).state is JobState.SUBMITTED
    assert "queues it" in (e.store.get(third.id).placement or {})["note"]


async def test_placement_none_mode_reads_nothing(tmp_path: Path) -> None:
    backend = FakeBackend(inventory())
    e = engine(tmp_path, backend, "none")
    rec = e.admit(trainjob(), ALICE)
    await settle(e)
    assert backend.inventory_calls == 0 and backend.submitted[0].placement is None
    assert e.store.get(rec.id).placement is None


async def test_partition_routing_rule_picks_the_back_end(tmp_path: Path) -> None:
    """``route_partitions``: a job naming a routed partition and no back end goes
    there; an explicit back end (``-M``/``--backend``) wins; others take the default."""
    old, new = FakeBackend(inventory()), FakeBackend(inventory())
    e = Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": old, "slurm2411": new},
               RuntimeCatalog(),
               EngineSettings(default_backend="slurm", partition_routes={"gpu": "slurm2411"}))
    routed = e.admit(trainjob(partition="gpu"), ALICE)
    plain = e.admit(trainjob(partition="debug"), ALICE)
    explicit = trainjob(partition="gpu")
    explicit.metadata.annotations[ANN_BACKEND] = "slurm"
    pinned = e.admit(explicit, ALICE)
    assert [r.backend for r in (routed, plain, pinned)] == ["slurm2411", "slurm", "slurm"]
    await settle(e)
    assert [r.options.partition for r in new.submitted] == ["gpu"]
    assert sorted(r.options.partition or "" for r in old.submitted) == ["debug", "gpu"]


def test_a_malformed_hostlist_is_refused_at_admission() -> None:
    """A bad ``--exclude``/``--nodelist`` (python-hostlist's own error is not a
    ValueError) once reached placement and ended every pass for every user."""
    for options in ({"exclude": "node[1-"}, {"nodelist": "n[3-1]"},
                    {"exclude": "n[1-99999999]"}):
        with pytest.raises(ValueError, match=r"brackets|reversed range|more than 65536 hosts"):
            SchedulingOptions(**options)


async def test_one_jobs_failing_placement_does_not_stop_the_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bridge.engine as engine_module

    backend = FakeBackend(inventory())
    e = engine(tmp_path, backend, "nodelist")
    bad = e.admit(trainjob(nodes=1), ALICE)
    good = e.admit(trainjob(nodes=1), ALICE)
    real = engine_module.plan_placement

    def placement(job: TrainJob, *args: Any, **kwargs: Any) -> Any:
        if job.metadata.uid == bad.uid:
            raise RuntimeError("a job whose data placement cannot read")
        return real(job, *args, **kwargs)

    monkeypatch.setattr(engine_module, "plan_placement", placement)
    await settle(e)
    assert {r.job_uid for r in backend.submitted} == {bad.uid, good.uid}
    assert backend.submitted[0].placement is None  # the bad one: the back end chooses
    assert e.store.get(good.id).state is JobState.SUBMITTED


async def test_a_partition_with_its_own_topology_is_placed_in_it(tmp_path: Path) -> None:
    """Slurm 25.05+: the partition ``blocks`` has a block topology that pairs other
    nodes than the switch tree does; each job is placed in its partition's topology,
    and a pass books the hosts one takes for every other."""
    blocks = {"b1": ((), ("node1", "node3")), "b2": ((), ("node2", "node4")),
              "b[1-2]": (("b1", "b2"), ())}
    both = tuple(replace(n, partitions=("debug", "blocks")) for n in inventory().nodes)
    inv = replace(inventory(), nodes=both, partition_switches={"blocks": blocks},
                  default_partition="debug")
    backend = FakeBackend(inv)
    e = engine(tmp_path, backend, "nodelist")
    in_blocks = e.admit(trainjob(cpus_per_task=2, partition="blocks"), ALICE)
    e.admit(trainjob(cpus_per_task=2), ALICE)
    await settle(e)
    pins = [r.placement.hosts if r.placement else None for r in backend.submitted]
    assert pins == [("node1", "node3"), ("node2", "node4")]
    assert e.store.get(in_blocks.id).placement["levels"][0]["domains"] == ["b1"]  # type: ignore[index]


async def test_a_pass_reads_the_inventory_once_whatever_partitions_its_jobs_name(
        tmp_path: Path) -> None:
    """A user's many partition spellings cost no extra inventory reads, even when the
    back end cannot answer (each read would wait for it)."""
    backend = FakeBackend(inventory())
    reads = 0
    real = backend.inventory

    async def counted() -> Inventory:
        nonlocal reads
        reads += 1
        return await real()

    backend.inventory = counted  # type: ignore[method-assign]
    e = engine(tmp_path, backend, "nodelist")
    for i in range(6):
        e.admit(trainjob(nodes=1, partition=f"debug,x{i}"), ALICE)
    await e.reconcile_once()
    assert reads == 1


async def test_booking_skips_a_host_another_topology_lacks(tmp_path: Path) -> None:
    """booked_in: a placed host missing from a topology (it left between two reads)
    takes nothing there instead of failing the pass."""
    topo = topology_from_inventory(inventory())
    short = topology_from_inventory(replace(inventory(), nodes=inventory().nodes[1:]))
    decision = decide(trainjob(cpus_per_task=2), "nodelist", topo)
    assert decision.placement.hosts == ("node1", "node2")
    after = booked_in(short, [decision])
    assert after is not None and "node1" not in after.hosts
    assert after.hosts["node2"].free_cpu_millis == 0
