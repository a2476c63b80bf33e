"""slurm_adapter against the real Slurm 22.05 test bed, through slurmrestd and the CLI.

Needs the bed (``bash testbed/slurm.sh up``) and root (jobs are submitted as alice).
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.backend import (
    BackendJob,
    BackendRejected,
    BackendState,
    BackendUnavailable,
    Owner,
    SubmitRequest,
)
from bridge.model import ensure_identity, load_trainjob
from bridge.runtimes import RuntimeCatalog
from bridge.scheduling import SchedulingOptions
from slurm_adapter.backend import SlurmBackend, create
from slurm_adapter.cli import SlurmCli
from slurm_adapter.hostlist import compress, expand
from slurm_adapter.queue_diff import squeue_argv
from tests.integration.conftest_slurm import (  # noqa: F401 - registers the fixtures
    Cluster,
    alice_dir_fixture,
    alice_fixture,
    dead_slurm_conf_fixture,
    slurm_backend_fixture,
    slurm_bed_fixture,
    slurm_cluster_fixture,
)

pytestmark = pytest.mark.integration

JOB_TIMEOUT = 180.0
#: Bridge ids for hand-made requests (output names carry them: bridge/jobid.py).
_BRIDGE_IDS = itertools.count(1)


def make_request(owner: Owner, outdir: Path, *, runtime: str = "plain",
                 command: list[str], args: list[str] | None = None, nodes: int = 1,
                 procs: int | None = None, options: dict[str, object] | None = None,
                 env: dict[str, str] | None = None) -> SubmitRequest:
    trainer: dict[str, object] = {"command": command, "args": args or [], "numNodes": nodes}
    if procs is not None:
        trainer["numProcPerNode"] = procs
    if env:
        trainer["env"] = [{"name": k, "value": v} for k, v in env.items()]
    job = ensure_identity(load_trainjob({
        "metadata": {"name": f"it-{uuid.uuid4().hex[:8]}"},
        "spec": {"runtimeRef": {"name": runtime}, "trainer": trainer},
    }))
    opts = SchedulingOptions.model_validate(
        {"chdir": str(outdir), "output": "out-%j.txt", **(options or {})})
    return SubmitRequest(job_uid=job.uid, job_id=next(_BRIDGE_IDS), job=job,
                         plan=RuntimeCatalog().resolve(job), options=opts, owner=owner)


async def watch_until(backend: SlurmBackend, uid: str,
                      done: Callable[[BackendJob], bool],
                      within: float = JOB_TIMEOUT) -> BackendJob:
    """Follow the job through ``backend.watch`` until ``done(job)``."""
    last: BackendJob | None = None
    async with asyncio.timeout(within):
        async for batch in backend.watch(1.0):
            assert batch.complete
            last = {j.job_uid: j for j in batch.jobs}.get(uid, last)
            if last is not None and done(last):
                return last
    raise AssertionError("unreachable")


def finished(job: BackendJob) -> bool:
    return job.state.finished


async def test_two_node_job_runs_as_alice(slurm_backend: SlurmBackend, alice: Owner,
                                          alice_dir: Path) -> None:
    req = make_request(alice, alice_dir, runtime="mpi-distributed", nodes=2, procs=1,
                       command=["bash", "-c",
                                "echo \"$(id -un) $(hostname) $GREETING $HPC_BRIDGE_JOB_ID\""],
                       env={"GREETING": "hello world"})
    job_id = await slurm_backend.submit(req)
    assert job_id.isdigit()

    found = await slurm_backend.lookup([req.job_uid, "no-such-uid"])
    assert [(j.job_uid, j.backend_id, j.owner_uid) for j in found] == [
        (req.job_uid, job_id, alice.uid)]

    job = await watch_until(slurm_backend, req.job_uid, finished)
    assert (job.state, job.exit_code, job.signal) == (BackendState.COMPLETED, 0, None)
    assert len(job.nodes) == 2 and job.start_time and job.end_time
    assert job.stdout_path == str(alice_dir / f"out-{req.job_id}.txt")
    out = Path(job.stdout_path)
    assert out.stat().st_uid == alice.uid
    lines = sorted(out.read_text().splitlines())
    assert lines == sorted(f"alice {node} hello world {req.job_id}" for node in job.nodes)
    data, offset = await slurm_backend.read_log(job, "stdout", 0)
    assert data == out.read_bytes() and offset == len(data)


async def test_failing_job_reports_its_exit_code(slurm_backend: SlurmBackend, alice: Owner,
                                                 alice_dir: Path) -> None:
    req = make_request(alice, alice_dir, command=["bash", "-c", "echo failing >&2; exit 3"],
                       options={"error": "err-%j.txt"})
    await slurm_backend.submit(req)
    job = await watch_until(slurm_backend, req.job_uid, finished)
    assert (job.state, job.exit_code, job.signal, job.reason) == (
        BackendState.FAILED, 3, None, "NonZeroExitCode")
    assert job.stderr_path and job.stderr_path.endswith(f"err-{req.job_id}.txt")
    assert (await slurm_backend.read_log(job, "stderr", 0))[0] == b"failing\n"


async def test_cancel(slurm_backend: SlurmBackend, alice: Owner, alice_dir: Path) -> None:
    req = make_request(alice, alice_dir, command=["sleep", "300"])
    job_id = await slurm_backend.submit(req)
    await watch_until(slurm_backend, req.job_uid, lambda j: j.state is BackendState.RUNNING)
    await slurm_backend.cancel(job_id, alice)
    job = await watch_until(slurm_backend, req.job_uid, finished)
    assert job.state is BackendState.CANCELLED
    await slurm_backend.cancel(job_id, alice)  # finished: no error
    await slurm_backend.cancel("99999999", alice)  # unknown: no error


async def test_status_polls_keep_jobs_when_nothing_changed(slurm_backend: SlurmBackend,
                                                          alice: Owner,
                                                          alice_dir: Path) -> None:
    """Later REST listings ask only for changes since the last one (``update_time``,
    with 5 s of margin); a quiet cluster must not make the bridge's jobs vanish from
    the snapshot. The job is looked up again and again for longer than the margin,
    so that the later polls find nothing changed."""
    req = make_request(alice, alice_dir, command=["true"])
    await slurm_backend.submit(req)
    job = await watch_until(slurm_backend, req.job_uid, finished)
    quiet_until = time.monotonic() + (7.0 if slurm_backend.rest is not None else 0.0)
    polls = 0
    while polls < 3 or time.monotonic() < quiet_until:
        found = await slurm_backend.lookup([req.job_uid])
        assert [(j.backend_id, j.state) for j in found] == [(job.backend_id, job.state)], (
            f"poll {polls}: {found}")
        polls += 1
        await asyncio.sleep(0.5)


async def test_a_forged_squeue_line_cannot_hide_another_users_change(
        slurm_backend: SlurmBackend, slurm_cluster: Cluster, alice: Owner,
        alice_dir: Path) -> None:
    """Through slurmrestd, each poll compares squeue's text with the last and reads only
    the jobs whose line changed (slurm_adapter/changes.py). Bob holds a job whose
    comment is a newline and then alice's running job's line as squeue prints it now:
    were that line believed, alice's job would look unchanged after her cancel. The
    text is refused (the id is on two lines) and whole listings are read: her cancel is
    seen. Through the commands alone there is no such comparison; the same holds."""
    req = make_request(alice, alice_dir, command=["sleep", "300"])
    job_id = await slurm_backend.submit(req)
    await watch_until(slurm_backend, req.job_uid, lambda j: j.state is BackendState.RUNNING)
    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(slurm_cluster.command(argv), capture_output=True, text=True,
                              check=False, timeout=30)

    line = (await asyncio.to_thread(run, [*squeue_argv(), f"--jobs={job_id}"])).stdout.strip()
    assert line.startswith(f"{job_id}|RUNNING|"), line
    bob = await asyncio.to_thread(run, [
        "runuser", "-u", "bob", "--", "sbatch", "--parsable", "--hold", "--output=/dev/null",
        f"--comment=x\n{line}", "--wrap=true"])
    assert bob.returncode == 0, bob.stderr
    bob_id = bob.stdout.strip().split(";")[0]
    try:
        table = slurm_backend.table
        if slurm_backend.rest is not None:
            assert table._changes is not None
            assert await table._changes.queue_text() is None  # refused, not guessed
        else:
            assert table._changes is None
        await slurm_backend.cancel(job_id, alice)
        # Within a few polls, well before the whole listing due every 60 s anyway.
        job = await watch_until(slurm_backend, req.job_uid, finished, within=30.0)
        assert job.state is BackendState.CANCELLED
    finally:
        await asyncio.to_thread(run, ["scancel", bob_id])


async def test_hostile_strings_reach_the_job_verbatim(slurm_backend: SlurmBackend,
                                                      alice: Owner, alice_dir: Path) -> None:
    marker = alice_dir / "pwned"
    words = [f"$(touch {marker})", f"`touch {marker}`", "it's \"quoted\"", "a\nb", "é✓", ""]
    req = make_request(alice, alice_dir, command=["printf", "[%s]\\n"], args=words,
                       options={"job_name": f"name $(touch {marker}) 'q' `x`"})
    await slurm_backend.submit(req)
    job = await watch_until(slurm_backend, req.job_uid, finished)
    assert job.state is BackendState.COMPLETED
    assert Path(job.stdout_path or "").read_text() == "".join(f"[{w}]\n" for w in words)
    assert not marker.exists()


async def test_slurm_refusals_are_rejections(slurm_backend: SlurmBackend, alice: Owner,
                                             alice_dir: Path) -> None:
    req = make_request(alice, alice_dir, command=["true"], options={"partition": "nope"})
    with pytest.raises(BackendRejected, match="Invalid partition name specified"):
        await slurm_backend.submit(req)


async def test_switches_are_requested(slurm_backend: SlurmBackend, slurm_cluster: Cluster,
                                      alice: Owner, alice_dir: Path) -> None:
    """slurmrestd 0.0.38 refuses required_switches: the REST back end uses sbatch there;
    v0.0.40+ carry them."""
    req = make_request(alice, alice_dir, command=["true"], nodes=2,
                       options={"switches": 1, "switches_wait_minutes": 2})
    job_id = await slurm_backend.submit(req)
    shown = (await asyncio.to_thread(
        subprocess.run, slurm_cluster.command(["scontrol", "show", "job", job_id]),
        capture_output=True, text=True, check=True)).stdout
    assert "Switches=1@00:02:00" in shown
    job = await watch_until(slurm_backend, req.job_uid, finished)
    assert job.state is BackendState.COMPLETED
    assert job.nodes in slurm_cluster.leaves


async def test_rest_with_tokens_from_scontrol(slurm_bed: dict[str, str], alice: Owner,
                                              alice_dir: Path) -> None:
    """Without jwt_key the REST back end asks ``scontrol token`` (as root)."""
    backend = create("rest-scontrol", {"rest_socket": slurm_bed["SLURMRESTD_SOCKET"]})
    await backend.start()
    try:
        req = make_request(alice, alice_dir, command=["id", "-un"])
        await backend.submit(req)
        job = await watch_until(backend, req.job_uid, finished)
    finally:
        await backend.close()
    assert job.state is BackendState.COMPLETED
    assert Path(job.stdout_path or "").read_text() == "alice\n"


async def test_inventory(slurm_backend: SlurmBackend, slurm_cluster: Cluster) -> None:
    inv = await slurm_backend.inventory()
    assert sorted(n.name for n in inv.nodes) == slurm_cluster.nodes
    blocks = slurm_cluster.facts.get("SLURM_BLOCK_PARTITION")  # 26.05: topology/block
    partitions = ("debug", blocks) if blocks else ("debug",)
    for node in inv.nodes:
        assert node.cpus == 2 and node.memory_mb == 2000 and node.partitions == partitions
    leaf1, leaf2 = slurm_cluster.leaves
    assert inv.switches == {"leaf1": ((), leaf1), "leaf2": ((), leaf2),
                            "spine": (("leaf1", "leaf2"), ())}
    assert inv.default_partition == "debug"
    if not blocks:
        assert inv.partition_switches == {}
        return
    n1, n2, n3, n4 = slurm_cluster.nodes
    assert inv.partition_switches == {blocks: {
        "b1": ((), (n1,)), "b2": ((), (n3,)), "b3": ((), (n2,)), "b4": ((), (n4,)),
        "b[1-2]": (("b1", "b2"), ()), "b[3-4]": (("b3", "b4"), ()),
        "b[1-4]": (("b[1-2]", "b[3-4]"), ())}}


async def test_unreachable_slurm_is_unavailable(slurm_bed: dict[str, str], alice: Owner,
                                                alice_dir: Path, dead_slurm_conf: Path,
                                                tmp_path: Path) -> None:
    req = make_request(alice, alice_dir, command=["true"])
    rest = create("gone", {"rest_socket": str(tmp_path / "no.sock"),
                           "jwt_key": slurm_bed["SLURM_JWT_KEY"]})
    with pytest.raises(BackendUnavailable):
        await rest.start()
    with pytest.raises(BackendUnavailable):
        await rest.submit(req)
    stream = rest.watch(0.05)
    with pytest.raises(TimeoutError):  # no batch while down, and no exception either
        async with asyncio.timeout(0.5):
            await anext(stream)
    await stream.aclose()
    await rest.close()

    cli = SlurmBackend("dead", cli=SlurmCli(timeout=60, slurm_conf=str(dead_slurm_conf)))
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="Unable to contact slurm controller"):
        await cli.submit(req)
    with pytest.raises(BackendUnavailable):
        await cli.lookup([req.job_uid])  # squeue --json exits 0 here: its errors count
    assert time.monotonic() - started < 60


# --- hostlists: our expansion is Slurm's ----------------------------------------------------

prefixes = st.from_regex(r"[a-z][a-z\-]{0,4}", fullmatch=True)
ranges = st.builds(lambda lo, span, w: f"{lo:0{w}d}" + (f"-{lo + span:0{w}d}" if span else ""),
                   st.integers(0, 120), st.integers(0, 6), st.integers(1, 3))
parts = st.one_of(
    prefixes,
    st.builds(lambda p, n: f"{p}{n}", prefixes, st.integers(0, 999)),
    st.builds(lambda p, rs: f"{p}[{','.join(rs)}]", prefixes,
              st.lists(ranges, min_size=1, max_size=3)),
    st.builds(lambda p, a, q, b: f"{p}[{a}]{q}[{b}]", prefixes, ranges, prefixes, ranges),
)
expressions = st.lists(parts, min_size=1, max_size=4).map(",".join)


def scontrol_show(what: str, expression: str) -> list[str]:
    done = subprocess.run(["scontrol", "show", what, expression], capture_output=True,
                          text=True, timeout=30, check=True)
    return done.stdout.split()


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(expressions)
def test_expand_equals_scontrol_show_hostnames(slurm_bed: dict[str, str],
                                               expression: str) -> None:
    hosts = expand(expression)
    assert hosts == scontrol_show("hostnames", expression)
    assert [compress(hosts)] == scontrol_show("hostlist", ",".join(hosts))
