"""What another local user may learn of, or slip into, alice's jobs and the daemon's
state, through a real daemon (root) on the real Slurm bed.

bob sees alice's jobs as ``squeue`` would show them (names, states, nodes), never her
environment values, wherever in the TrainJob they were written; files bob plants where
alice's job writes get nothing of hers; a state directory a user made first is
refused. The attacker's commands run as bob or alice (``runuser``).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.integration.bed import Daemon, cleanup, fresh_daemon_dir, trainjob_doc
from tests.integration.conftest import rest_settings
from tests.integration.test_multiuser_safety import _serve_fails, api_as, as_user

pytestmark = pytest.mark.integration


def test_bob_sees_no_environment_value_of_alices_job(daemon: Daemon, outdir: Path) -> None:
    """(The values of ``runtimePatches`` containers are hidden the same way: a unit test,
    tests/unit/test_views.py, since Slurm refuses a job carrying pod fields.)"""
    secret = f"s3cret-{uuid.uuid4().hex}"
    doc = trainjob_doc(outdir, f"env-{uuid.uuid4().hex[:6]}", "plain", ["true"])
    doc["spec"]["suspend"] = True  # nothing needs to run
    doc["spec"]["trainer"]["env"] = [{"name": "API_TOKEN", "value": secret}]
    status, job = api_as(daemon, "alice", "POST", "/v1/jobs", doc)
    assert status == 201, job
    # alice sees her own values: the test would notice a view that lost them.
    status, mine = api_as(daemon, "alice", "GET", f"/v1/jobs/{job['id']}")
    assert status == 200 and secret in json.dumps(mine)
    for path in (f"/v1/jobs/{job['id']}", f"/v1/jobs/{job['uid']}", "/v1/jobs?states=all",
                 "/v1/jobs?user=alice&states=all"):
        status, seen = api_as(daemon, "bob", "GET", path)
        text = json.dumps(seen)
        assert status == 200, seen
        assert str(job["id"]) in text  # bob does see the job …
        assert secret not in text, path  # … not its values
        if "?" not in path:  # a listing carries no document (light rows)
            assert "API_TOKEN" in text  # the names stay, as Slurm's environment names do
    assert api_as(daemon, "alice", "POST", f"/v1/jobs/{job['id']}/cancel")[0] == 202


def test_bobs_planted_files_in_a_shared_scratch_get_nothing_of_alices_script(
        daemon: Daemon, outdir: Path) -> None:
    """A distributed ``tbatch`` script is written into the job's working directory for
    every node to read. In a world-writable scratch directory (mode 1777) bob plants
    files (mode 0666) under the names the next Slurm job ids would use: alice's script
    must not be written into one of them (bob would read it, and could change it before
    it runs as alice), nor may her job fail because of them."""
    scratch = outdir / "scratch"
    scratch.mkdir()
    scratch.chmod(0o1777)
    res = as_user("bob", "sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true",
                  cwd=scratch)
    assert res.returncode == 0, res.stderr
    first = int(res.stdout.strip().split(";")[0]) + 1
    planted = range(first, first + 5000)  # room for other tests' jobs meanwhile
    plant = ("import os, sys\nos.umask(0)\nfor n in range(int(sys.argv[1]), int(sys.argv[2])):"
             "\n    os.close(os.open(f'.hpc-bridge-{n}.script', os.O_CREAT | os.O_WRONLY, 0o666))")
    assert as_user("bob", "python3", "-c", plant, str(planted.start), str(planted.stop),
                   cwd=scratch).returncode == 0
    marker = f"alice-only-{uuid.uuid4().hex}"
    script = outdir / "dist.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH -N 1\n# {marker}\necho ran-$PET_NODE_RANK\n")
    script.chmod(0o644)
    res = daemon.cli("alice", "tbatch", "--parsable", "--runtime", "torch-distributed",
                     "-o", "dist-%j.out", str(script), cwd=scratch)
    assert res.returncode == 0, res.stderr
    done = daemon.wait_state(int(res.stdout), ["Succeeded", "Failed"], timeout=120)
    assert int(done["backendId"]) in planted, "more than 5000 other jobs meanwhile"
    for n in planted:
        assert (scratch / f".hpc-bridge-{n}.script").read_text() == "", n
    assert done["state"] == "Succeeded", done
    assert "ran-0" in daemon.cli("alice", "tlog", res.stdout.strip()).stdout.splitlines()
    assert not [p for p in scratch.glob(".hpc-bridge-*") if p.stat().st_uid != 1002]


def test_a_state_dir_a_user_made_first_is_refused(testbed: dict[str, str]) -> None:
    """An admin put ``state_dir`` where users may create directories; alice made it
    first (she could then read the database, or swap in one of hers). The daemon does
    not start, and says why."""
    workdir = fresh_daemon_dir("squat")
    workdir.chmod(0o1777)
    state = workdir / "state"
    assert as_user("alice", "mkdir", "-m", "700", str(state)).returncode == 0
    d = Daemon(workdir, rest_settings(testbed))
    try:
        assert f"state_dir {state} is owned by uid 1001" in _serve_fails(d)
        assert not (state / "bridge.sqlite").exists()
    finally:
        cleanup(workdir)


def test_bob_cannot_squat_the_name_of_alices_next_job(daemon: Daemon, outdir: Path) -> None:
    """bob takes ``default/NAME`` and ``team-a/NAME`` first (suspended jobs): alice's job
    of that name is still admitted, and each one's ``tshow NAME`` is their own job; a
    second live job of alice's under that name is refused (409) naming her."""
    name = f"squat-{uuid.uuid4().hex[:6]}"
    ids: dict[str, int] = {}
    for user, namespace in (("bob", "default"), ("bob", "team-a"), ("alice", "default")):
        doc = trainjob_doc(outdir, name, "plain", ["true"])
        doc["metadata"]["namespace"] = namespace
        doc["spec"]["suspend"] = True
        status, job = api_as(daemon, user, "POST", "/v1/jobs", doc)
        assert status == 201, (user, namespace, job)
        ids[f"{user}/{namespace}"] = job["id"]
    doc = trainjob_doc(outdir, name, "plain", ["true"])
    doc["spec"]["suspend"] = True
    status, again = api_as(daemon, "alice", "POST", "/v1/jobs", doc)
    assert status == 409 and "alice has an unfinished job named" in again["error"], again
    status, shown = api_as(daemon, "alice", "GET", f"/v1/jobs/{name}?namespace=default")
    assert status == 200 and shown["id"] == ids["alice/default"], shown
    for key, job_id in ids.items():
        assert api_as(daemon, key.split("/")[0], "POST", f"/v1/jobs/{job_id}/cancel")[0] == 202
