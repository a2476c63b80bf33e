"""The Slurm back end's status poll by change (slurm_adapter/changes.py): squeue's text
first, then only the changed jobs read; a whole listing whenever the text cannot be
trusted or compared. Stand-in transports; the real Slurm: integration."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest

from slurm_adapter import changes as changes_module
from slurm_adapter.backend import SlurmBackend
from slurm_adapter.cli import Completed
from slurm_adapter.dialects import V0_0_38
from slurm_adapter.listing import decode_listing
from slurm_adapter.queue_diff import FORMAT

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
BASE = [j for j in json.loads((FIXTURES / "v0.0.38_jobs.json").read_bytes())["jobs"]
        if str(j.get("comment", "")).startswith("hpc-bridge:")][:4]


class Slurm:
    """One Slurm job table, seen through squeue's text and slurmrestd's answers."""

    def __init__(self) -> None:
        self.jobs = {j["job_id"]: copy.deepcopy(j) for j in BASE}
        self.squeue_fails = False
        self.extra_text = ""
        self.calls: list[str] = []

    def text(self) -> str:
        fields = FORMAT.count("|")
        out = []
        for job_id, j in self.jobs.items():
            state = j["job_state"]
            out.append("|".join([str(job_id), state, str(j.get("state_reason")),
                                 str(j.get("nodes")), *["x"] * (fields - 4),
                                 str(j.get("comment"))]))
        return "\n".join(out) + "\n" + self.extra_text

    def decoded(self, jobs: list[dict[str, Any]]) -> list[Any]:
        out = decode_listing(json.dumps({"jobs": jobs}).encode())
        assert out is not None
        return list(out["jobs"])


class Cli:
    def __init__(self, slurm: Slurm) -> None:
        self.slurm = slurm

    def has(self, name: str) -> bool:
        return name == "squeue"

    async def run(self, argv: list[str]) -> Completed:
        assert argv[0] == "squeue"
        self.slurm.calls.append("squeue")
        if self.slurm.squeue_fails:
            return Completed(tuple(argv), 1, b"", b"squeue: error: Unable to contact")
        return Completed(tuple(argv), 0, self.slurm.text().encode(), b"")


class Rest:
    dialect = V0_0_38
    where = "test"

    def __init__(self, slurm: Slurm) -> None:
        self.slurm = slurm

    async def jobs(self, user: str, *, changed_since: int | None = None) -> dict[str, Any]:
        self.slurm.calls.append("list")
        return {"jobs": self.slurm.decoded(list(self.slurm.jobs.values()))}

    async def job(self, user: str, job_id: int) -> Any | None:
        self.slurm.calls.append(f"read {job_id}")
        j = self.slurm.jobs.get(job_id)
        return None if j is None else self.slurm.decoded([j])[0]


@pytest.fixture
def slurm() -> Slurm:
    return Slurm()


@pytest.fixture
def backend(slurm: Slurm) -> SlurmBackend:
    b = SlurmBackend("slurm", cli=Cli(slurm), rest=Rest(slurm),  # type: ignore[arg-type]
                     rest_user="root", changes_from_squeue=True)
    b.table.min_gap = 0  # the gap has a test of its own
    return b


def states(jobs: list[Any]) -> dict[str, str]:
    return {j.backend_id: j.state.value for j in jobs}


async def test_after_one_whole_listing_only_changed_jobs_are_read(
        slurm: Slurm, backend: SlurmBackend) -> None:
    first = await backend._bridge_jobs()
    assert slurm.calls == ["squeue", "list"]
    slurm.calls.clear()
    again = await backend._bridge_jobs()
    assert slurm.calls == ["squeue"] and again is first  # nothing changed: nothing read
    target, leaving = list(slurm.jobs)[:2]
    slurm.jobs[target]["job_state"] = "CANCELLED"
    del slurm.jobs[leaving]  # purged from Slurm's table
    slurm.calls.clear()
    after = await backend._bridge_jobs()
    assert slurm.calls == ["squeue", *(f"read {i}" for i in sorted([target, leaving]))]
    assert states(after)[str(target)] == "CANCELLED" and str(leaving) not in states(after)
    unchanged = [j for j in after if j.backend_id not in (str(target), str(leaving))]
    assert all(any(j is k for k in first) for j in unchanged)
    assert str(leaving) not in backend.table.owner_uids


@pytest.mark.parametrize("why", ["forged line", "squeue fails", "too many", "time"])
async def test_a_whole_listing_whenever_the_text_cannot_be_compared(
        slurm: Slurm, backend: SlurmBackend, why: str, monkeypatch: pytest.MonkeyPatch) -> None:
    await backend._bridge_jobs()
    target = next(iter(slurm.jobs))
    slurm.jobs[target]["job_state"] = "CANCELLED"
    if why == "forged line":  # a comment with a newline, then a copy of a real line
        slurm.extra_text = slurm.text().splitlines()[0] + "\n"
    elif why == "squeue fails":
        slurm.squeue_fails = True
    elif why == "too many":
        monkeypatch.setattr(changes_module, "MAX_READS", 0)
    else:
        monkeypatch.setattr(changes_module, "FULL_LISTING_EVERY", 0.0)
    slurm.calls.clear()
    jobs = await backend._bridge_jobs()
    assert slurm.calls == ["squeue", "list"]
    assert states(jobs)[str(target)] == "CANCELLED"
    if why in ("forged line", "squeue fails"):
        slurm.extra_text, slurm.squeue_fails = "", False
        slurm.calls.clear()
        await backend._bridge_jobs()  # no text to compare with yet: listed again
        # (a failed squeue is not run again for a while)
        assert slurm.calls == (["list"] if why == "squeue fails" else ["squeue", "list"])


async def test_without_the_setting_each_poll_lists(slurm: Slurm) -> None:
    plain = SlurmBackend("slurm", cli=Cli(slurm), rest=Rest(slurm),  # type: ignore[arg-type]
                         rest_user="root", changes_from_squeue=False)
    plain.table.min_gap = 0
    await plain._bridge_jobs()
    await plain._bridge_jobs()
    assert slurm.calls == ["list", "list"]


async def test_a_failed_read_makes_the_same_poll_list_the_whole_table(
        slurm: Slurm, backend: SlurmBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    from bridge.backend import BackendUnavailable

    await backend._bridge_jobs()
    target = next(iter(slurm.jobs))
    slurm.jobs[target]["job_state"] = "CANCELLED"

    async def failing(self: Rest, user: str, job_id: int) -> Any:
        slurm.calls.append(f"read {job_id}")
        raise BackendUnavailable("slurmrestd restarting")

    monkeypatch.setattr(Rest, "job", failing)
    slurm.calls.clear()
    jobs = await backend._bridge_jobs()
    assert slurm.calls == ["squeue", f"read {target}", "list"]
    assert states(jobs)[str(target)] == "CANCELLED"


async def test_a_job_the_text_left_out_is_read_and_one_slurm_still_holds_distrusts_it(
        slurm: Slurm, backend: SlurmBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """A remembered job missing from squeue's text is read, not dropped: one Slurm
    really forgot reads as gone; one slurmrestd still holds means this squeue does not
    see every job (not root, another cluster): whole listings for RETRY_AFTER."""
    await backend._bridge_jobs()
    purged, hidden = list(slurm.jobs)[:2]
    del slurm.jobs[purged]
    slurm.calls.clear()
    jobs = await backend._bridge_jobs()
    assert slurm.calls == ["squeue", f"read {purged}"]
    assert str(purged) not in states(jobs)
    real_text = Slurm.text

    def without_hidden(self: Slurm) -> str:
        return "\n".join(row for row in real_text(self).split("\n")
                         if not row.startswith(f"{hidden}|"))

    monkeypatch.setattr(Slurm, "text", without_hidden)
    slurm.calls.clear()
    jobs = await backend._bridge_jobs()
    assert slurm.calls == ["squeue", f"read {hidden}", "list"]
    assert str(hidden) in states(jobs)
    slurm.calls.clear()
    await backend._bridge_jobs()  # not trusted for a while: whole listings
    assert slurm.calls == ["squeue", "list"]


async def test_a_failing_squeue_is_not_run_again_for_a_while(
        slurm: Slurm, backend: SlurmBackend) -> None:
    slurm.squeue_fails = True
    await backend._bridge_jobs()
    await backend._bridge_jobs()
    assert slurm.calls == ["squeue", "list", "list"]  # not run again meanwhile


async def test_without_squeue_each_poll_lists(slurm: Slurm, backend: SlurmBackend,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Cli, "has", lambda self, name: False)
    await backend._bridge_jobs()
    await backend._bridge_jobs()
    assert slurm.calls == ["list", "list"]


async def test_readings_start_at_least_the_gap_apart(
        slurm: Slurm, backend: SlurmBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller asking right after a reading waits for the gap (shared by whoever asks
    meanwhile): callers polling every 0.2 s cannot drive squeue at their own pace."""
    from slurm_adapter import job_table

    waits: list[float] = []
    real_sleep = job_table.asyncio.sleep

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(job_table.asyncio, "sleep", sleep)
    backend.table.min_gap = job_table.MIN_GAP
    await backend._bridge_jobs()
    assert waits == []  # the first reading waits for nothing
    await backend._bridge_jobs()
    assert len(waits) == 1 and 0 < waits[0] <= job_table.MIN_GAP


async def test_a_cancelled_readings_conversion_is_never_remembered(
        slurm: Slurm, backend: SlurmBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reading cancelled while its conversion runs in a worker thread: the thread
    runs on, and must not overwrite what a later reading remembered (the next change
    update would hand that older state out again)."""
    import threading

    from slurm_adapter.listing import ListingConverter

    converter = backend.table._converter
    gate, entered = threading.Event(), threading.Event()
    real_prepare = ListingConverter.prepare
    stalls = [True]

    def prepare(self: ListingConverter, raw: list[Any], dialect: Any) -> Any:
        stall = stalls.pop() if stalls else False
        answer = real_prepare(self, raw, dialect)  # the table as it was when listed
        if stall:
            entered.set()
            gate.wait(10)
        return answer

    monkeypatch.setattr(ListingConverter, "prepare", prepare)
    first = asyncio.create_task(backend._bridge_jobs())
    await asyncio.to_thread(entered.wait, 10)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    target = next(iter(slurm.jobs))
    slurm.jobs[target]["job_state"] = "CANCELLED"
    jobs = await backend._bridge_jobs()  # a whole listing of its own, adopted
    assert states(jobs)[str(target)] == "CANCELLED"
    gate.set()  # the abandoned conversion ends now
    await asyncio.sleep(0.05)
    remembered = {str(i): jobs for i, (_, _, jobs) in converter._last.items()}
    assert [job.state.value for job in remembered[str(target)]] == ["CANCELLED"]


async def test_callers_waiting_on_a_failed_reading_share_its_failure(
        slurm: Slurm, backend: SlurmBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """Callers queued behind a reading that fails all get its error: not one reading
    each, one after another (each could wait out a timeout)."""
    from bridge.backend import BackendUnavailable

    release = asyncio.Event()

    async def down(self: Rest, user: str, *, changed_since: int | None = None) -> Any:
        slurm.calls.append("list")
        await release.wait()
        raise BackendUnavailable("slurmrestd down")

    monkeypatch.setattr(Rest, "jobs", down)
    tasks = [asyncio.create_task(backend._bridge_jobs()) for _ in range(10)]
    for _ in range(5):
        await asyncio.sleep(0)
    release.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, BackendUnavailable) for r in results)
    assert len({id(r) for r in results}) == len(results)  # a copy each
    # The first caller's reading, and one more for the nine who asked after it had
    # started (each caller gets a reading started after it asked): not ten.
    assert slurm.calls.count("list") == 2
    slurm.calls.clear()
    with pytest.raises(BackendUnavailable):
        await backend._bridge_jobs()  # a caller arriving later tries again
    assert slurm.calls.count("list") == 1


async def test_a_whole_listing_with_jobs_the_text_lacks_distrusts_squeue(
        slurm: Slurm, backend: SlurmBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """So many jobs missing from the text that they are not read one by one (a whole
    listing instead): the listing shows jobs older than the text's newest that the
    text lacks, so squeue does not see every job: distrusted (not an squeue and a
    whole listing at every poll, unnoticed)."""
    await backend._bridge_jobs()
    hidden = min(slurm.jobs)
    real_text = Slurm.text

    def without_hidden(self: Slurm) -> str:
        return "\n".join(row for row in real_text(self).split("\n")
                         if not row.startswith(f"{hidden}|"))

    monkeypatch.setattr(Slurm, "text", without_hidden)
    monkeypatch.setattr(changes_module, "MAX_READS", 0)
    slurm.calls.clear()
    await backend._bridge_jobs()
    assert slurm.calls == ["squeue", "list"]
    reader = backend.table._changes
    assert reader is not None and reader._distrust_until > time.monotonic()
    slurm.calls.clear()
    monkeypatch.setattr(changes_module, "MAX_READS", 64)
    await backend._bridge_jobs()  # distrusted: no reads, a whole listing
    assert slurm.calls == ["squeue", "list"]
