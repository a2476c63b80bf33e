"""tbatch --hold, and hold/release (``tcontrol``, ``POST /v1/jobs/{ref}/hold|release``):
a job waits, reason JobHeldUser, until its owner (or root) releases it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from bridge.cli import tcontrol_main, tqueue_main
from bridge.cli.queue_format import parse_format, render
from bridge.sbatch import parse_tbatch, to_trainjob
from bridge.scheduling import scheduling_of
from bridge.states import JobState
from tests.unit.cli_helpers import NOW, Daemon, view
from tests.unit.cli_helpers import daemon as daemon
from tests.unit.conftest import ApiClient
from tests.unit.fakes import settle

SCRIPT = "#!/bin/sh\ntrue\n"


@pytest.mark.parametrize(("argv", "script", "environ"), [
    (["-H", "job.sh"], SCRIPT, {}),
    (["job.sh"], "#!/bin/sh\n#SBATCH --hold\n", {}),
])
def test_tbatch_hold_makes_a_suspended_job(argv: list[str], script: str,
                                           environ: dict[str, str]) -> None:
    request = parse_tbatch(argv, script, environ=environ)
    job = to_trainjob(request, cwd="/home/alice", environ={})
    assert job.spec.suspend is True and scheduling_of(job).hold is True


async def submit(api: ApiClient, *argv: str) -> int:
    answer = await api.call("POST", "/v1/sbatch",
                            doc={"argv": [*argv, "--wrap", "true"], "cwd": "/tmp", "environ": {}})
    assert answer.status == 201, answer.body
    job_id: int = answer.body["id"]
    return job_id


async def test_held_until_released_by_its_owner(api_client: ApiClient) -> None:
    held = await submit(api_client, "-H")
    rec = api_client.store.get(held)
    assert (rec.state.value, rec.reason) == ("Suspended", "JobHeldUser")
    await settle(api_client.engine)
    assert api_client.backend.submitted == []
    answer = await api_client.call("POST", f"/v1/jobs/{held}/release", user="bob")
    assert answer.status == 403
    answer = await api_client.call("POST", f"/v1/jobs/{held}/release")
    assert answer.status == 202 and answer.body["reason"] == "Released"
    await settle(api_client.engine)
    assert [r.job_id for r in api_client.backend.submitted] == [held]
    # Past pending: hold and release are refused as scontrol refuses them.
    answer = await api_client.call("POST", f"/v1/jobs/{held}/hold")
    assert answer.status == 409 and "no longer pending" in answer.error
    answer = await api_client.call("POST", f"/v1/jobs/{held}/release")
    assert answer.status == 409 and "not held" in answer.error


async def test_hold_a_pending_job_then_release_it(api_client: ApiClient) -> None:
    job = await submit(api_client)
    answer = await api_client.call("POST", f"/v1/jobs/{job}/hold")
    assert answer.status == 202 and answer.body["reason"] == "JobHeldUser"
    assert (await api_client.call("POST", f"/v1/jobs/{job}/hold")).status == 202  # again: ok
    await settle(api_client.engine)
    assert api_client.backend.submitted == []
    assert (await api_client.call("POST", f"/v1/jobs/{job}/release", user="root")).status == 202
    await settle(api_client.engine)
    assert [r.job_id for r in api_client.backend.submitted] == [job]


def test_tqueue_shows_a_held_job_pending() -> None:
    held = view(state="Suspended", reason="JobHeldUser", nodes=None, startTime=None)
    paused = view(state="Suspended", reason="Suspended", nodes=None, startTime=None)
    lines = render(parse_format("%t %T %R"), [held, paused], header=False, now=NOW)
    assert lines.splitlines() == ["PD PENDING (JobHeldUser)", "S SUSPENDED (Suspended)"]


@pytest.mark.parametrize(("states", "shown"), [
    ("PD", [1, 3]), ("S", [2]), ("pending,S", [1, 2, 3]), ("R", []), ("all", [1, 2, 3])])
def test_tqueue_t_pd_lists_held_jobs(states: str, shown: list[int], daemon: Daemon,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    from tests.unit.cli_helpers import Reply

    jobs = [view(id=1, state="Suspended", reason="JobHeldUser"),
            view(id=2, state="Suspended", reason="Suspended"),
            view(id=3, state="Pending", reason="Created")]

    def listing(request: object) -> Reply:  # the daemon's own filter by state
        asked = request.params.get("states", "all").split(",")  # type: ignore[attr-defined]
        return Reply(200, json={"items": [j for j in jobs
                                          if "all" in asked or j["state"] in asked]})

    daemon.on("GET", "/v1/jobs", listing)
    assert tqueue_main(["-h", "-t", states, "-o", "%i"]) == 0
    assert [int(x) for x in capsys.readouterr().out.split()] == shown


def test_tcontrol(daemon: Daemon, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.unit.cli_helpers import Reply

    seen: list[str] = []

    def handler(request: object) -> Reply:
        path = request.path  # type: ignore[attr-defined]
        seen.append(path)
        if "/9/" in path:
            return Reply(409, json={"error": "Job is no longer pending execution (Running)"})
        if "/8/" in path:
            return Reply(403, json={"error": "Access/permission denied"})
        return Reply(202, json=view())

    for ref in ("7", "8", "9"):
        daemon.on("POST", f"/v1/jobs/{ref}/hold", handler)
    assert tcontrol_main(["hold", "7,8", "9"]) == 1
    assert seen == ["/v1/jobs/7/hold", "/v1/jobs/8/hold", "/v1/jobs/9/hold"]
    assert capsys.readouterr().err.splitlines() == [
        "tcontrol: error: hold job 8: Access/permission denied",
        "tcontrol: error: hold job 9: Job is no longer pending execution (Running)",
    ]
    daemon.on("POST", "/v1/jobs/7/release", handler)
    assert tcontrol_main(["release", "7"]) == 0
    assert tcontrol_main(["frobnicate", "7"]) == 1
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err


# ------------------------------------------------------- races and crashes (a review)


async def test_a_hold_while_the_submission_waits_for_a_slot_wins(api_client: ApiClient
                                                                 ) -> None:
    """The pass started the submission but it waits for a submit slot; a hold in between
    wins: nothing reaches the back end, and the job stays held and releasable."""
    engine = api_client.engine
    engine._submit_slots = asyncio.Semaphore(1)
    await engine._submit_slots.acquire()  # every slot busy
    job = await submit(api_client)
    await engine.reconcile_once()
    assert job in engine._inflight
    assert (await api_client.call("POST", f"/v1/jobs/{job}/hold")).status == 202
    engine._submit_slots.release()
    await asyncio.gather(*engine._inflight.values())
    assert api_client.backend.submitted == []
    rec = api_client.store.get(job)
    assert (rec.state, rec.reason, rec.attempts) == (JobState.SUSPENDED, "JobHeldUser", 0)
    assert (await api_client.call("POST", f"/v1/jobs/{job}/release")).status == 202
    await settle(engine)
    assert [r.job_id for r in api_client.backend.submitted] == [job]


async def test_a_hold_half_made_before_a_crash_can_be_made_again(api_client: ApiClient
                                                                 ) -> None:
    """A Pending job whose document already says suspend (the old two-step write, cut by
    a crash): a hold still holds it."""
    job = await submit(api_client)
    doc = api_client.store.get(job).job
    doc.spec.suspend = True
    api_client.store.save_document(job, doc)
    answer = await api_client.call("POST", f"/v1/jobs/{job}/hold")
    assert (answer.status, answer.body["state"]) == (202, "Suspended")
    await settle(api_client.engine)
    assert api_client.backend.submitted == []


async def test_roots_hold_is_released_only_by_root(api_client: ApiClient) -> None:
    job = await submit(api_client)
    answer = await api_client.call("POST", f"/v1/jobs/{job}/hold", user="root")
    assert (answer.status, answer.body["reason"]) == (202, "JobHeldAdmin")
    answer = await api_client.call("POST", f"/v1/jobs/{job}/release")
    assert answer.status == 403 and "administrator" in answer.error
    answer = await api_client.call("POST", f"/v1/jobs/{job}/resume")
    assert answer.status == 409 and "release it" in answer.error
    assert (await api_client.call("POST", f"/v1/jobs/{job}/release", user="root")).status == 202


async def test_hold_suspend_and_resume_keep_to_their_meaning(api_client: ApiClient) -> None:
    held = await submit(api_client, "-H")
    answer = await api_client.call("POST", f"/v1/jobs/{held}/resume")
    assert answer.status == 409 and "held, not suspended" in answer.error
    paused = await submit(api_client)
    answer = await api_client.call("POST", f"/v1/jobs/{paused}/suspend")
    assert (answer.status, answer.body["reason"]) == (202, "Suspended")
    answer = await api_client.call("POST", f"/v1/jobs/{paused}/hold")
    assert answer.status == 409 and "resume it first" in answer.error
    answer = await api_client.call("POST", f"/v1/jobs/{paused}/release")
    assert answer.status == 409 and "not held" in answer.error


async def test_a_hold_while_the_pass_reads_the_topology_stands(api_client: ApiClient) -> None:
    """The pass decides that the job waits for its topology after an await; a hold made
    meanwhile is not undone by that decision."""
    engine = api_client.engine
    job = await submit(api_client)
    entered, go = asyncio.Event(), asyncio.Event()
    real = engine._inventories.fresh

    async def slow(name: str, backend: object) -> object:
        entered.set()
        await go.wait()
        return await real(name, backend)  # type: ignore[arg-type]

    engine._inventories.fresh = slow  # type: ignore[method-assign]
    engine._decide = lambda *a: SimpleNamespace(  # type: ignore[method-assign]
        wait=True, note="waiting for switches", record=lambda t: {"note": "x"})
    engine.settings.placement["slurm"] = "constraints"
    pass_ = asyncio.create_task(engine.reconcile_once())
    # A pass that fails before it reads (a wrong signature) must fail the test, not hang it.
    await asyncio.wait_for(entered.wait(), 30)
    assert (await api_client.call("POST", f"/v1/jobs/{job}/hold")).status == 202
    go.set()
    await pass_
    rec = api_client.store.get(job)
    assert (rec.state, rec.reason) == (JobState.SUSPENDED, "JobHeldUser")
