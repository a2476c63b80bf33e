"""A native Slurm array carrying one bridge key (``K+F``) read as the bridge's tasks,
one job each, on every Slurm release of the beds, through slurmrestd and the commands
(slurm_adapter/records.py: ``jobs_from_slurm``).

The array is made with real ``sbatch --array`` as alice: 200 tasks at indexes no range
describes, so that Slurm lists the pending ones in more than its default 64 characters
(the beds start slurmrestd with ``SLURM_BITSTR_LEN=0``, as docs/slurm.md asks sites to;
the commands are run with it).
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from bridge.arrays import NativeTask, array_key, uid_in_array
from bridge.backend import BackendJob, BackendState, Owner
from slurm_adapter.backend import SlurmBackend, create
from tests.integration.conftest_slurm import (  # noqa: F401 - registers the fixtures
    Cluster,
    alice_dir_fixture,
    alice_fixture,
    slurm_bed_fixture,
    slurm_cluster_fixture,
)
from tests.integration.test_slurm_adapter import make_request

pytestmark = pytest.mark.integration


@pytest.fixture(params=["rest", "cli"], name="slurm_backend")
async def native_backend(request: pytest.FixtureRequest, slurm_cluster: Cluster
                         ) -> AsyncIterator[SlurmBackend]:
    """A started SlurmBackend with ``native_arrays`` on each cluster, through slurmrestd
    and through the commands."""
    backend = create(f"slurm-{slurm_cluster.release}-{request.param}",
                     {**slurm_cluster.settings(str(request.param)), "native_arrays": True})
    await backend.start()
    yield backend
    await backend.close()

#: 200 indexes below the beds' MaxArraySize (1001) that no range or step describes.
INDEXES = sorted(random.Random(12).sample(range(1, 1000), 200))


def sbatch_array(cluster: Cluster, owner: Owner, key: str, indexes: list[int]) -> str:
    """Submit ``sleep 300`` as an array of ``indexes`` (one at a time) as ``owner``,
    carrying ``key``; its Slurm id."""
    argv = ["sbatch", "--parsable", f"--array={','.join(map(str, indexes))}%1",
            f"--comment=hpc-bridge:{key}", "-o", "/dev/null", "--chdir=/tmp",
            "-p", cluster.facts.get("SLURM_PARTITION", "debug"), "--wrap", "sleep 300"]
    if cluster.root:
        argv = ["chroot", f"--userspec={owner.uid}:{owner.gid}", cluster.root, *argv]
    else:
        argv = ["runuser", "-u", owner.user, "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip().split(";")[0]


def scancel(cluster: Cluster, slurm_id: str) -> None:
    subprocess.run(cluster.command(["scancel", slurm_id]), capture_output=True, timeout=60,
                   check=False)


async def tasks_until(backend: SlurmBackend, uids: list[str],
                      done: Callable[[dict[str, BackendJob]], bool]) -> dict[str, BackendJob]:
    """The back end's jobs of ``uids`` (by uid), read until ``done`` holds of them."""
    deadline = time.monotonic() + 60
    while True:
        found = {j.job_uid: j for j in await backend.lookup(uids)}
        if done(found):
            return found
        assert time.monotonic() < deadline, (
            f"{len(found)} of {len(uids)} tasks read: "
            f"{sorted({(j.state.value, j.reason) for j in found.values()})[:5]}; not read: "
            f"{[k for k, uid in enumerate(uids) if uid not in found][:10]}")
        await asyncio.sleep(0.5)


async def test_each_task_of_a_native_array_is_a_job_of_its_own(
        slurm_backend: SlurmBackend, slurm_cluster: Cluster, alice: Owner) -> None:
    """Every task is read, the pending ones from the array's one pending record too: id
    ``S_I``, the uid its index names, alice's, pending for the array's throttle; a
    pending task is cancelled alone by its ``S_I``."""
    first = str(uuid.uuid4())
    key = array_key(first, INDEXES[0])
    uids = [uid_in_array(key, i) or "" for i in INDEXES]
    slurm_id = sbatch_array(slurm_cluster, alice, key, INDEXES)
    try:
        found = await tasks_until(slurm_backend, uids, lambda f: len(f) == len(uids) and f[
            first].state is BackendState.RUNNING)
        assert found[first].backend_id == f"{slurm_id}_{INDEXES[0]}"
        assert {j.backend_id for j in found.values()} == {f"{slurm_id}_{i}" for i in INDEXES}
        assert {j.owner_uid for j in found.values()} == {alice.uid}
        pending = [found[uid_in_array(key, i) or ""] for i in INDEXES[1:]]
        assert {j.state for j in pending} == {BackendState.PENDING}
        assert all("JobArrayTaskLimit" in (j.reason or "") for j in pending), pending[0]

        # A pending task cancelled alone leaves the array's list of pending tasks;
        # Slurm keeps no record of it (22.05 lists none: sacct has it), so it is
        # either read as cancelled or no longer read. The others stay as they were.
        last = uid_in_array(key, INDEXES[-1]) or ""
        await slurm_backend.cancel(f"{slurm_id}_{INDEXES[-1]}", alice)
        found = await tasks_until(slurm_backend, uids, lambda f: last not in f or f[
            last].state is BackendState.CANCELLED)
        assert {found[uid_in_array(key, i) or ""].state for i in INDEXES[1:-1]} == {
            BackendState.PENDING}
    finally:
        scancel(slurm_cluster, slurm_id)


async def test_one_submission_runs_each_task_as_the_bridges_job_of_its_own(
        slurm_backend: SlurmBackend, alice: Owner, alice_dir: Path) -> None:
    """``submit_array``: one Slurm array for three tasks of the bridge's array ``A``;
    each task is told its own bridge id and uid, ``SLURM_ARRAY_JOB_ID`` is ``A`` (as a
    task of one job per task is told) and Slurm's own task variables are Slurm's;
    ``%A`` in the output name is ``A`` and ``%a`` the index; each task is read back as
    the bridge's job ``S_I``, completed."""
    show = ('echo "$HPC_BRIDGE_JOB_ID $HPC_BRIDGE_JOB_UID $SLURM_ARRAY_JOB_ID '
            '$SLURM_ARRAY_TASK_ID $SLURM_ARRAY_TASK_COUNT $SLURM_ARRAY_TASK_MAX"')
    request = make_request(alice, alice_dir, command=["bash", "-c", show],
                           options={"output": "t-%A_%a.out"})
    array_id, indexes = request.job_id, (3, 5, 9)
    key = array_key(request.job_uid, indexes[0])
    uids = [uid_in_array(key, i) or "" for i in indexes]
    tasks = [NativeTask(i, {"HPC_BRIDGE_JOB_ID": str(array_id + k),
                            "HPC_BRIDGE_JOB_UID": uids[k]}) for k, i in enumerate(indexes)]
    slurm_id = await slurm_backend.submit_array(request, key, array_id, "3,5,9%2", tasks)
    found = await tasks_until(slurm_backend, uids, lambda f: len(f) == 3 and all(
        j.state.finished for j in f.values()))
    assert {j.backend_id: j.state for j in found.values()} == {
        f"{slurm_id}_{i}": BackendState.COMPLETED for i in indexes}
    for k, index in enumerate(indexes):
        told = (alice_dir / f"t-{array_id}_{index}.out").read_text().split()
        assert told == [str(array_id + k), uids[k], str(array_id), str(index), "3", "9"]
