"""pool_adapter.backend with both worlds faked at the seam (the real beds are in
tests/integration/test_k8s_on_slurm.py): who a holder belongs to, what a forged JobSet,
holder or annotation can make the bridge do (nothing to others), and the bookkeeping
of jobs whose JobSet or holder goes first."""

from __future__ import annotations

import asyncio
import os
import pwd
from typing import Any

import pytest

from bridge.backend import BackendJob, BackendRejected, BackendState, StatusBatch
from k8s_adapter.jobset_status import backend_job_from_jobset
from pool_adapter import pinning
from pool_adapter.backend import PoolBackend
from pool_adapter.nodemap import NodeMap

S = BackendState
UID = "uid-alice"
ALICE = os.getuid()  # owner_of() must resolve it
NOTE = "k8s-on-slurm:pool "


def jobset(ns: str, name: str, uid: str, *, pool: str | None = "pool",
           owner: str = str(ALICE), pinned: str | None = None, suspend: bool = True,
           done: bool = False) -> dict[str, Any]:
    ann = {pinning.ANN_POOL: pool, pinning.ANN_OWNER_UID: owner} if pool else {}
    sel = {pinning.LABEL_PREFIX + pinned: "true"} if pinned else {}
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": ns, "resourceVersion": "1",
                     "labels": {"hpc-bridge.io/job-uid": uid,
                                "app.kubernetes.io/managed-by": "hpc-bridge"},
                     "annotations": ann},
        "spec": {"suspend": suspend, "replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": {
                "nodeSelector": sel}}}}}]}}
    if done:
        obj["status"] = {"conditions": [{"type": "Completed", "status": "True"}]}
    return obj


class Kube:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.core = self
        self.custom = self

    async def call(self, what: str, *a: Any, **k: Any) -> Any:
        self.calls.append(what)
        return {}

    async def raw(self, what: str, *a: Any, **k: Any) -> Any:
        self.calls.append(what)
        return {"items": [{"metadata": {"name": "node1"}}]}

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


class K8s:
    def __init__(self) -> None:
        self.amend = None
        self.objs: dict[str, dict[str, Any]] = {}
        self.kube = Kube()

    def jobset_object(self, ns: str, name: str) -> dict[str, Any] | None:
        return self.objs.get(f"{ns}/{name}")

    def state_of(self, obj: Any) -> BackendJob | None:
        return backend_job_from_jobset(obj)

    def known_nodes(self) -> list[dict[str, Any]]:
        return []

    async def submit(self, request: Any) -> str:
        return "alice/job"


class Slurm:
    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.signalled: list[tuple[str, str]] = []

    async def cancel(self, jid: str, owner: Any) -> None:
        self.cancelled.append(jid)

    async def signal(self, jid: str, sig: str, owner: Any) -> None:
        self.signalled.append((jid, sig))

    async def lookup(self, uids: Any) -> list[BackendJob]:
        return []

    async def submit(self, request: Any, script: str) -> str:
        raise BackendRejected("sbatch: error: invalid partition specified: nope")


def holder(state: BackendState, *, jid: str = "42", uid: str = UID, owner: int = ALICE,
           jobset_id: str = "alice/job") -> BackendJob:
    return BackendJob(jid, uid, state, native_state=state.value, nodes=("node1",),
                      owner_uid=owner, note=NOTE + jobset_id)


def backend() -> tuple[PoolBackend, K8s, Slurm]:
    k8s, slurm = K8s(), Slurm()
    b = PoolBackend("pool", slurm, k8s, NodeMap(), "t", None)  # type: ignore[arg-type]
    return b, k8s, slurm


def see_jobsets(b: PoolBackend, k8s: K8s, *ids: str, complete: bool = False,
                gone: dict[str, dict[str, Any]] | None = None) -> StatusBatch | None:
    jobs = [backend_job_from_jobset(k8s.objs[i]) for i in ids]
    jobs += [backend_job_from_jobset(o, deleted=True) for o in (gone or {}).values()]
    return b._batch("k8s", StatusBatch(tuple(j for j in jobs if j), complete, 0.0))


def see_slurm(b: PoolBackend, *jobs: BackendJob) -> StatusBatch | None:
    return b._batch("slurm", StatusBatch(jobs, True, 0.0))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def alice_runs(b: PoolBackend, k8s: K8s) -> None:
    k8s.objs["alice/job"] = jobset("alice", "job", UID, pinned="42", suspend=False)
    see_jobsets(b, k8s, "alice/job", complete=True)
    out = see_slurm(b, holder(S.RUNNING))
    assert out is not None and [j.state for j in out.jobs] == [S.RUNNING]


async def test_a_forged_jobset_with_alices_uid_never_reaches_alices_holder() -> None:
    b, k8s, slurm = backend()
    alice_runs(b, k8s)
    # bob: a JobSet in his namespace with alice's uid, with and without the pool's marks
    k8s.objs["bob/evil"] = jobset("bob", "evil", UID, suspend=False)
    k8s.objs["bob/plain"] = jobset("bob", "plain", UID, pool=None, suspend=False)
    see_jobsets(b, k8s, "bob/evil", "bob/plain")
    out = see_slurm(b, holder(S.RUNNING))
    await settle()
    assert slurm.cancelled == [] and slurm.signalled == []
    assert not any("bob/" in c for c in k8s.kube.calls if "pin" in c or "delete" in c), \
        k8s.kube.calls
    assert out is not None
    assert {j.backend_id: j.state for j in out.jobs} == {"alice/job@42": S.RUNNING}
    # bob's JobSet ends or goes: still nothing happens to alice's holder
    k8s.objs["bob/evil"] = jobset("bob", "evil", UID, done=True)
    gone = {"bob/plain": k8s.objs.pop("bob/plain")}
    see_jobsets(b, k8s, "bob/evil", gone=gone)
    see_slurm(b, holder(S.RUNNING))
    await settle()
    assert slurm.cancelled == [] and slurm.signalled == []


async def test_an_owner_annotation_cannot_point_at_another_users_slurm_job() -> None:
    """bob's JobSet names carol's uid and carol's plain Slurm job's key: carol's job has
    no holder comment naming bob's JobSet, so it is never pinned, signalled or
    cancelled."""
    b, k8s, slurm = backend()
    k8s.objs["bob/evil"] = jobset("bob", "evil", "uid-carol", owner="1003", suspend=False,
                                  done=True)
    see_jobsets(b, k8s, "bob/evil", complete=True)
    carol = BackendJob("77", "uid-carol", S.RUNNING, owner_uid=1003, nodes=("node2",))
    see_slurm(b, carol)
    await settle()
    assert slurm.cancelled == [] and slurm.signalled == []
    assert not any("label node" in c for c in k8s.kube.calls)


@pytest.mark.parametrize("annotation", ["²", "1" * 5000, "-1", " 7", "0x10"])
async def test_a_malformed_owner_annotation_is_no_pair_and_stops_nothing(
        annotation: str) -> None:
    b, k8s, _slurm = backend()
    k8s.objs["bob/odd"] = jobset("bob", "odd", "uid-bob", owner=annotation)
    see_jobsets(b, k8s, "bob/odd", complete=True)
    alice_runs(b, k8s)
    assert "bob/odd" not in b.pairs.by_jobset


async def test_a_holder_slurm_refuses_takes_its_jobset_with_it() -> None:
    b, k8s, _slurm = backend()

    class Options:
        def model_copy(self, update: Any) -> Options:
            return self

        partition = None

    class Request:
        job_uid = UID
        placement = None
        options = Options()

        class owner:
            uid = ALICE

    import pool_adapter.backend as pb
    real = pb.replace
    pb.replace = lambda r, **k: r  # type: ignore[assignment]
    try:
        with pytest.raises(BackendRejected, match="invalid partition"):
            await b.submit(Request())  # type: ignore[arg-type]
    finally:
        pb.replace = real
    assert "delete JobSet alice/job" in k8s.kube.calls


async def test_a_jobset_deleted_before_its_holder_was_seen_still_ends_the_job() -> None:
    b, k8s, _slurm = backend()
    k8s.objs["alice/job"] = jobset("alice", "job", UID)
    see_jobsets(b, k8s, "alice/job", complete=True)
    see_slurm(b)  # the holder is not listed yet
    see_jobsets(b, k8s, gone={"alice/job": k8s.objs.pop("alice/job")})
    out = see_slurm(b, holder(S.CANCELLED))
    assert out is not None
    assert [(j.backend_id, j.state) for j in out.jobs] == [("alice/job@42", S.CANCELLED)]
    await settle()
    assert any("list nodes labelled slurm.hpc-bridge.io/job-42" in c
               for c in k8s.kube.calls), "its node labels are cleaned up"
    see_slurm(b, holder(S.CANCELLED))
    assert "alice/job" not in b.pairs.by_jobset


async def test_a_running_jobset_without_an_allocation_is_unpinned() -> None:
    b, k8s, _slurm = backend()
    alice_runs(b, k8s)
    see_slurm(b)  # the holder is gone from Slurm (purged while the daemon was down)
    await settle()
    assert "patch JobSet alice/job" in k8s.kube.calls


async def test_an_orphan_of_an_unknown_user_does_not_stop_the_stream() -> None:
    b, k8s, _slurm = backend()
    see_jobsets(b, k8s, complete=True)
    ghost = holder(S.RUNNING, jid="99", owner=4_000_000_000, jobset_id="alice/none")
    b._orphans["99"] = -1e9  # seen long enough
    see_slurm(b, ghost)  # no exception: the owner is resolved in the background
    await settle()
    with pytest.raises(KeyError):
        pwd.getpwuid(4_000_000_000)


async def test_finished_jobs_are_forgotten_with_their_bookkeeping() -> None:
    b, k8s, _slurm = backend()
    for i in range(20):
        k8s.objs[f"alice/j{i}"] = jobset("alice", f"j{i}", f"u{i}", pinned=str(i),
                                         suspend=False)
        see_jobsets(b, k8s, f"alice/j{i}")
        see_slurm(b, holder(S.COMPLETED, jid=str(i), uid=f"u{i}", jobset_id=f"alice/j{i}"))
        see_jobsets(b, k8s, gone={f"alice/j{i}": k8s.objs.pop(f"alice/j{i}")})
        see_slurm(b, holder(S.COMPLETED, jid=str(i), uid=f"u{i}", jobset_id=f"alice/j{i}"))
    await settle()
    assert b.pairs.by_jobset == {} and b._acted == {}


async def test_a_jobset_naming_someone_elses_allocation_removes_no_label() -> None:
    """bob's JobSet, without a holder, pins itself (its own selector) to alice's
    allocation 42: unpinning it touches only bob's JobSet, never the nodes' labels."""
    b, k8s, _slurm = backend()
    alice_runs(b, k8s)
    k8s.objs["bob/evil"] = jobset("bob", "evil", "uid-bob", owner="1002", pinned="42",
                                  suspend=False)
    see_jobsets(b, k8s, "bob/evil")
    see_slurm(b, holder(S.RUNNING))
    await settle()
    assert "patch JobSet bob/evil" in k8s.kube.calls
    assert not any("job-42" in c for c in k8s.kube.calls if "label" in c), k8s.kube.calls


async def test_a_jobset_made_again_under_its_name_is_a_new_job() -> None:
    b, k8s, _slurm = backend()
    alice_runs(b, k8s)
    k8s.objs["alice/job"] = jobset("alice", "job", "uid-second")
    k8s.objs["alice/job"]["metadata"]["uid"] = "object-2"
    see_jobsets(b, k8s, "alice/job")
    pair = b.pairs.by_jobset["alice/job"]
    assert pair.uid == "uid-second" and pair.holder is None
    # the first job's holder still runs: it is no holder of the new JobSet's, and is
    # cancelled as an orphan once the grace is over
    b._orphans["42"] = -1e9
    see_slurm(b, holder(S.RUNNING))
    await asyncio.wait_for(asyncio.gather(*list(b._tasks)), 10)
    assert _slurm.cancelled == ["42"]
    assert not any("pin" in c or "label node" in c for c in k8s.kube.calls[-3:])


async def test_a_relisting_marks_the_jobsets_deleted_meanwhile_gone() -> None:
    b, k8s, _slurm = backend()
    alice_runs(b, k8s)
    k8s.objs.pop("alice/job")
    see_jobsets(b, k8s, complete=True)
    assert b.pairs.by_jobset["alice/job"].gone_since is not None


async def test_the_first_holder_is_the_jobs_a_later_one_of_the_owner_is_never_chosen(
        ) -> None:
    b, k8s, _slurm = backend()
    k8s.objs["alice/job"] = jobset("alice", "job", UID)
    see_jobsets(b, k8s, "alice/job", complete=True)
    out = see_slurm(b, holder(S.PENDING, jid="42"), holder(S.RUNNING, jid="50"))
    assert out is not None and [j.backend_id for j in out.jobs] == ["alice/job@42"]
    await settle()
    assert not any("label node" in c for c in k8s.kube.calls)


async def test_orphan_cancels_do_not_pile_up() -> None:
    b, k8s, _slurm = backend()
    see_jobsets(b, k8s, complete=True)
    ghosts = [holder(S.PENDING, jid=str(100 + i), jobset_id=f"alice/none{i}")
              for i in range(50)]
    for g in ghosts:
        b._orphans[g.backend_id] = -1e9
    see_slurm(b, *ghosts)
    for g in ghosts:
        b._orphans[g.backend_id] = -1e9
    see_slurm(b, *ghosts)
    assert len([t for t in b._tasks if "orphan" in t.get_name()]) == 50
    await asyncio.wait_for(asyncio.gather(*list(b._tasks)), 10)


async def test_the_pool_stream_ends_with_the_error_of_a_world_whose_stream_ended() -> None:
    """The Kubernetes back end's watch raises when one of its watches dies: the pool's
    stream ends with it (the engine starts the watch again), rather than the pool
    going on with Slurm's batches and Kubernetes frozen."""
    b, k8s, slurm = backend()

    synced_at_start: list[bool] = []

    async def slurm_watch(interval: float) -> Any:
        synced_at_start.append(b._k8s_synced or b._slurm_synced)
        yield StatusBatch((), True, 0.0)
        await asyncio.Event().wait()

    async def k8s_watch(interval: float) -> Any:
        yield StatusBatch((), True, 0.0)
        raise RuntimeError("pool.kubernetes: watch task watch-nodes ended")

    async def node_states() -> None:
        await asyncio.Event().wait()

    slurm.watch = slurm_watch  # type: ignore[attr-defined]
    k8s.watch = k8s_watch  # type: ignore[attr-defined]
    b.node_states.run = node_states  # type: ignore[method-assign]
    b._sweeper.on_snapshot = lambda jobs, now: None  # type: ignore[method-assign]
    b._k8s_synced = b._slurm_synced = True  # as a stream before this one left them
    stream = b.watch(1.0)
    with pytest.raises(RuntimeError, match="watch-k8s ended") as err:
        async with asyncio.timeout(10):
            async for _ in stream:
                pass
    assert "watch-nodes ended" in str(err.value.__cause__)
    assert synced_at_start == [False]  # a new stream has listed nothing yet


async def test_a_finished_job_whose_holder_slurm_forgot_keeps_its_id() -> None:
    """The daemon was down past MinJobAge: Slurm no longer lists the holder, and this
    process never saw it. The finished JobSet is still reported under the job's id
    (the holder it was pinned to), not the bare JobSet's, which the engine would not
    take as the job's (BackendLost) — and only once both worlds have listed."""
    b, k8s, _slurm = backend()
    k8s.objs["alice/job"] = jobset("alice", "job", UID, pinned="42", suspend=False,
                                   done=True)
    early = see_jobsets(b, k8s, "alice/job", complete=True)
    assert early is None or not early.jobs  # Slurm not listed yet: nothing reported
    out = see_slurm(b)  # the holder is not in Slurm's table any more
    assert out is not None
    assert [(j.backend_id, j.state) for j in out.jobs] == [("alice/job@42", S.COMPLETED)]
