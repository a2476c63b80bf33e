"""slurm_adapter.backend.SlurmBackend with stand-in transports (real Slurm: integration)."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
from pathlib import Path
from typing import Any

import pytest

from bridge.backend import (
    Backend,
    BackendJob,
    BackendRejected,
    BackendState,
    BackendUnavailable,
    Owner,
    SubmitRequest,
    load_backend,
)
from bridge.output import OutputRefused
from bridge.scheduling import SchedulingOptions
from slurm_adapter.backend import SlurmBackend, create
from slurm_adapter.dialects import V0_0_38
from tests.unit.builders import submit_request, trainjob

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
ME = Owner(uid=os.geteuid(), gid=os.getegid(), user=pwd.getpwuid(os.geteuid()).pw_name)


class FakeCli:
    """Stands in for SlurmCli: answers from a script of results."""

    def __init__(self, jobs: list[Any] | None = None) -> None:
        self.jobs_answers = list(jobs or [])
        self.submitted: list[tuple[str, list[str], dict[str, str], Owner]] = []
        self.installed = {"sbatch", "scontrol"}
        self.topologies_read: list[str | None] = []
        self.partition_text = "PartitionName=debug Default=YES Nodes=node[1-4] State=UP\n"

    def has(self, name: str) -> bool:
        return name in self.installed

    async def jobs(self) -> dict[str, Any]:
        answer = self.jobs_answers.pop(0) if len(self.jobs_answers) > 1 else self.jobs_answers[0]
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)

    async def submit(self, script: str, args: list[str], env: dict[str, str],
                     owner: Owner, script_args: tuple[str, ...] = ()) -> str:
        self.submitted.append((script, args, env, owner))
        return "100"

    async def topology(self, name: str | None = None) -> str:
        self.topologies_read.append(name)
        if name == "blocks":  # as 26.05 prints a topology/block topology
            return ("BlockName=b1 BlockIndex=0 Nodes=node[1,3] BlockSize=2\n"
                    "BlockName=b2 BlockIndex=1 Nodes=node[2,4] BlockSize=2\n"
                    "AggregatedBlock=b[1-2] BlockIndex=2 Nodes=node[1-4] BlockSize=4\n")
        if name is not None:  # scontrol failed: SlurmCli.topology answers ""
            return ""
        return (FIXTURES / "scontrol_show_topology.txt").read_text()

    async def partitions(self) -> str:
        return self.partition_text

    async def nodes(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((FIXTURES / "sinfo_22.05_nodes.json").read_text())
        return data


class FakeRest:
    dialect = V0_0_38

    def __init__(self) -> None:
        self.submitted: list[tuple[str, str, dict[str, Any]]] = []

    async def submit(self, user: str, script: str, job: dict[str, Any]) -> str:
        self.submitted.append((user, script, job))
        return "200"


RECORDED = json.loads((FIXTURES / "squeue_22.05_jobs.json").read_text())


def backend(cli: FakeCli, rest: FakeRest | None = None) -> SlurmBackend:
    return SlurmBackend("slurm", cli=cli, rest=rest, rest_user="root")  # type: ignore[arg-type]


def request(options: SchedulingOptions | None = None) -> SubmitRequest:
    job = trainjob(name="t", namespace=None, uid="u-1", command=["true"], env={"A": "1"})
    return submit_request(job, options or SchedulingOptions(chdir="/tmp"), owner=ME,
                          uid="u-1", job_id=1)


def test_create_and_the_entry_point() -> None:
    cli_backend = load_backend("slurm", "hpc", {"use_cli": True})
    assert isinstance(cli_backend, Backend) and isinstance(cli_backend, SlurmBackend)
    assert cli_backend.rest is None and cli_backend.name == "hpc"
    rest_backend = create("s", {"rest_socket": "/nonexistent.sock", "jwt_key": "/k",
                                "rest_version": "v0.0.41", "request_timeout": 3})
    assert rest_backend.rest is not None and rest_backend.rest.dialect.version == "v0.0.41"
    assert create("s", {"rest_url": "http://h:6820", "use_cli": "true"}).rest is None
    with pytest.raises(ValueError, match="unknown settings"):
        create("s", {"rest_sock": "/x"})
    with pytest.raises(ValueError, match="not both"):
        create("s", {"rest_socket": "/x", "rest_url": "http://h"})
    with pytest.raises(ValueError, match="use_cli is false"):
        create("s", {"use_cli": False})
    with pytest.raises(ValueError, match="unknown slurmrestd API version"):
        create("s", {"rest_socket": "/x", "rest_version": "v9"})


async def test_lookup_finds_by_comment_in_one_listing() -> None:
    cli = FakeCli([RECORDED])
    jobs = await backend(cli).lookup(["fx-exit3", "fx-array", "not-there"])
    found = {j.job_uid: j for j in jobs}
    assert len(jobs) == 2 and set(found) == {"fx-exit3", "fx-array"}
    assert all(j.owner_uid is not None for j in jobs)  # Slurm's user_id, for the engine
    assert found["fx-exit3"].exit_code == 3
    # two Slurm jobs carry fx-array (an array): the newer one is reported
    assert found["fx-array"].backend_id == "73"


async def test_watch_keeps_going_through_outages() -> None:
    cli = FakeCli([RECORDED, BackendUnavailable("down"), RuntimeError("bug"), RECORDED])
    stream = backend(cli).watch(0.01)
    first = await anext(stream)
    second = await asyncio.wait_for(anext(stream), 5)
    await stream.aclose()
    assert first.complete and second.complete
    assert {j.job_uid for j in first.jobs} == {j.job_uid for j in second.jobs}
    assert "fx-running" in {j.job_uid for j in first.jobs}
    assert len({j.job_uid for j in first.jobs}) == len(first.jobs)


async def test_submit_over_rest_and_the_cli_fallback_for_switches() -> None:
    cli, rest = FakeCli(), FakeRest()
    b = backend(cli, rest)
    assert await b.submit(request()) == "200"
    user, script, job = rest.submitted[0]
    assert user == ME.user and job["comment"] == "hpc-bridge:u-1"
    assert job["environment"]["A"] == "1" and script.startswith("#!/bin/bash\n")
    # v0.0.38 cannot carry --switches: sbatch does it
    assert await b.submit(request(SchedulingOptions(chdir="/tmp", switches=1))) == "100"
    assert "--switches=1" in cli.submitted[0][1]
    cli.installed.clear()
    with pytest.raises(BackendRejected, match="cannot set switches"):
        await b.submit(request(SchedulingOptions(chdir="/tmp", switches=1)))


async def test_submit_defaults_the_working_directory_to_the_owners_home() -> None:
    cli = FakeCli()
    await backend(cli).submit(request(SchedulingOptions()))
    assert f"--chdir={pwd.getpwuid(os.geteuid()).pw_dir}" in cli.submitted[0][1]


async def test_inventory() -> None:
    inv = await backend(FakeCli()).inventory()
    assert [n.name for n in inv.nodes] == ["node1", "node2", "node3", "node4"]
    assert inv.switches["spine"] == (("leaf1", "leaf2"), ())
    assert (inv.partition_switches, inv.default_partition) == ({}, "debug")


async def test_inventory_reads_each_partitions_own_topology_once() -> None:
    cli = FakeCli()
    cli.partition_text = (
        "PartitionName=debug Default=YES Nodes=node[1-4] State=UP\n"
        "PartitionName=blocks Default=NO Nodes=node[1-4] Topology=blocks State=UP\n"
        "PartitionName=more Default=NO Nodes=node[1-4] Topology=blocks State=UP\n")
    inv = await backend(cli).inventory()
    blocks = {"b1": ((), ("node1", "node3")), "b2": ((), ("node2", "node4")),
              "b[1-2]": (("b1", "b2"), ())}
    assert inv.partition_switches == {"blocks": blocks, "more": blocks}
    assert inv.switches["spine"] == (("leaf1", "leaf2"), ())
    assert cli.topologies_read == [None, "blocks"]



async def test_a_partition_topology_that_cannot_be_read_is_none_not_flat() -> None:
    """An empty answer for a named topology (scontrol failed) must not read as a flat
    cluster: the partition's jobs are then left to Slurm. The back end's configured
    default partition is where a job without -p goes."""
    cli = FakeCli()
    cli.partition_text = ("PartitionName=debug Default=YES Nodes=node[1-4]\n"
                          "PartitionName=other Nodes=node[1-4] Topology=gone\n")
    b = backend(cli)
    b.default_partition = "other"
    inv = await b.inventory()
    assert inv.partition_switches == {"other": None}
    assert inv.default_partition == "other" and inv.switches_for(None) is None
    assert inv.switches_for("debug") is inv.switches


def job(path: str | None, backend_id: str = "66") -> BackendJob:
    return BackendJob(backend_id=backend_id, job_uid="u", state=BackendState.RUNNING,
                      stdout_path=path, stderr_path=path)


async def test_read_log_reads_the_owners_file_in_chunks(tmp_path: Path) -> None:
    b = backend(FakeCli([RECORDED]))
    out = tmp_path / "out.log"
    out.write_bytes(b"hello\nworld\n")
    b.table.owner_uids["66"] = os.geteuid()
    assert await b.read_log(job(str(out)), "stdout", 0) == (b"hello\nworld\n", 12)
    assert await b.read_log(job(str(out)), "stderr", 6) == (b"world\n", 12)
    assert await b.read_log(job(str(out)), "stdout", 12) == (b"", 12)
    assert await b.read_log(job(str(tmp_path / "missing")), "stdout", 3) == (b"", 3)
    big = tmp_path / "big.log"
    big.write_bytes(b"x" * (3 * 1024 * 1024))
    data, offset = await b.read_log(job(str(big)), "stdout", 0)
    assert len(data) == offset == 1024 * 1024
    with pytest.raises(ValueError):
        await b.read_log(job(str(out)), "stdin", 0)


async def test_read_log_refuses_files_of_other_users_and_symlinks(tmp_path: Path) -> None:
    b = backend(FakeCli([RECORDED]))
    secret = tmp_path / "secret"
    secret.write_bytes(b"root only")
    b.table.owner_uids["66"] = 1001 if os.geteuid() != 1001 else 1002  # not the file's owner
    with pytest.raises(OutputRefused, match=f"{secret} belongs to uid {os.geteuid()}"):
        await b.read_log(job(str(secret)), "stdout", 0)
    link = tmp_path / "link"
    link.symlink_to(secret)
    b.table.owner_uids["66"] = os.geteuid()
    with pytest.raises(OutputRefused, match="symbolic link"):
        await b.read_log(job(str(link)), "stdout", 0)
    with pytest.raises(OutputRefused, match="not a regular file"):
        await b.read_log(job(str(tmp_path)), "stdout", 0)  # a directory


async def test_read_log_learns_the_owner_from_slurm(tmp_path: Path) -> None:
    """Job 66 of the recording belongs to alice (uid 1001)."""
    b = backend(FakeCli([RECORDED]))
    out = tmp_path / "o"
    out.write_bytes(b"data")
    if os.geteuid() == 1001:
        assert (await b.read_log(job(str(out)), "stdout", 0))[0] == b"data"
    else:
        with pytest.raises(OutputRefused):
            await b.read_log(job(str(out)), "stdout", 0)
    assert b.table.owner_uids["66"] == 1001
    unknown = backend(FakeCli([BackendUnavailable("down")]))
    assert await unknown.read_log(job(str(out), "999"), "stdout", 0) == (b"", 0)


async def test_an_unchanged_listing_is_not_converted_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """slurmrestd's "nothing changed" costs no conversion: the last one is the answer
    (the same list); a new listing is converted (off the loop), and the listing itself
    is not kept once converted."""
    from slurm_adapter import listing as module

    b = backend(FakeCli([RECORDED]), FakeRest())
    listings: list[list[Any] | None] = [list(RECORDED["jobs"])]
    converted: list[int] = []
    real = module.convert_listing

    def counting(raw: list[Any], dialect: Any, convert: Any = None) -> Any:
        converted.append(len(raw))
        return real(raw, dialect, convert)

    async def listing() -> tuple[list[Any] | None, Any, int]:
        return listings[-1], V0_0_38, 1000 + len(listings)

    monkeypatch.setattr(module, "convert_listing", counting)
    monkeypatch.setattr(b.table, "_listing", listing)
    first = await b._bridge_jobs()
    assert b.table._listed_at == 1001
    listings.append(None)  # slurmrestd: nothing changed since
    assert await b._bridge_jobs() is first and converted == [len(RECORDED["jobs"])]
    assert b.table._listed_at == 1001  # still the time of the listing converted
    assert not any(v is listings[0] for v in vars(b.table).values())  # not kept
    listings.append(list(RECORDED["jobs"][:1]))
    await b._bridge_jobs()
    assert converted == [len(RECORDED["jobs"]), 1] and b.table._listed_at == 1003


async def test_listings_are_answered_in_the_order_they_were_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing is asked only once the one in flight has been answered and converted,
    and callers who waited meanwhile share it: each caller gets a listing asked after it
    called, and none older than one already handed out (two in flight at once could
    come back out of order)."""
    b = backend(FakeCli([RECORDED]), FakeRest())
    events: list[str] = []
    release = asyncio.Event()

    async def listing() -> tuple[list[Any] | None, Any, int]:
        n = sum(e.startswith("asked") for e in events) + 1
        events.append(f"asked {n}")
        if n == 1:
            await release.wait()  # the first answer is slow
        events.append(f"answered {n}")
        return list(RECORDED["jobs"][:n]), V0_0_38, 1000 + n

    async def settle() -> None:
        for _ in range(5):
            await asyncio.sleep(0)

    monkeypatch.setattr(b.table, "_listing", listing)
    first = asyncio.create_task(b._bridge_jobs())
    await settle()
    second = asyncio.create_task(b._bridge_jobs())
    third = asyncio.create_task(b._bridge_jobs())
    await settle()
    assert events == ["asked 1"]  # the others wait for the first
    release.set()
    one, two, three = await first, await second, await third
    assert events == ["asked 1", "answered 1", "asked 2", "answered 2"]
    assert two is three and one is not two  # both asked after the first: the next one
    assert b.table._listed_at == 1002 and b.table._converted is two
    assert await b._bridge_jobs() is not two and events[-1] == "answered 3"  # a fresh one
