"""The Slurm back end's status poll by change (slurm_adapter/changes.py): squeue's text
first, then only the changed jobs read; a whole listing whenever the text cannot be
trusted or compared. Stand-in transports; the real Slurm: integration."""

from __future__ import annotations

import copy
import json
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
    return SlurmBackend("slurm", cli=Cli(slurm), rest=Rest(slurm),  # type: ignore[arg-type]
                        rest_user="root", changes_from_squeue=True)


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
    assert slurm.calls == ["squeue", f"read {target}"]
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
        assert slurm.calls == ["squeue", "list"]


async def test_without_the_setting_or_slurmrestd_each_poll_lists(slurm: Slurm) -> None:
    plain = SlurmBackend("slurm", cli=Cli(slurm), rest=Rest(slurm),  # type: ignore[arg-type]
                         rest_user="root")
    await plain._bridge_jobs()
    await plain._bridge_jobs()
    assert slurm.calls == ["list", "list"]


async def test_a_failed_read_reports_nothing_and_the_next_poll_reads_again(
        slurm: Slurm, backend: SlurmBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    from bridge.backend import BackendUnavailable

    await backend._bridge_jobs()
    target = next(iter(slurm.jobs))
    slurm.jobs[target]["job_state"] = "CANCELLED"
    real = Rest.job

    async def failing(self: Rest, user: str, job_id: int) -> Any:
        raise BackendUnavailable("slurmrestd restarting")

    monkeypatch.setattr(Rest, "job", failing)
    with pytest.raises(BackendUnavailable):
        await backend._bridge_jobs()
    monkeypatch.setattr(Rest, "job", real)
    slurm.calls.clear()
    jobs = await backend._bridge_jobs()
    assert slurm.calls == ["squeue", f"read {target}"]
    assert states(jobs)[str(target)] == "CANCELLED"
