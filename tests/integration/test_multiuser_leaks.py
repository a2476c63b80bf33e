"""What bob may learn of alice's jobs through a real daemon on the real Slurm bed.

bob sees alice's jobs as ``squeue`` would show them (names, states, nodes), never her
environment values, wherever in the TrainJob they were written. The attacker's
requests run as bob (``runuser``) over the unix socket; the daemon runs as root.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.integration.bed import Daemon, trainjob_doc
from tests.integration.test_multiuser_safety import api_as

pytestmark = pytest.mark.integration


def test_bob_sees_no_environment_value_of_alices_job(daemon: Daemon, outdir: Path) -> None:
    secret, patched = f"s3cret-{uuid.uuid4().hex}", f"patched-{uuid.uuid4().hex}"
    doc = trainjob_doc(outdir, f"env-{uuid.uuid4().hex[:6]}", "plain", ["true"])
    doc["spec"]["suspend"] = True  # nothing needs to run
    doc["spec"]["trainer"]["env"] = [{"name": "API_TOKEN", "value": secret}]
    doc["spec"]["runtimePatches"] = [{"manager": "alice", "trainingRuntimeSpec": {
        "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
            "template": {"spec": {"containers": [{"name": "node", "env": [
                {"name": "DB_PASSWORD", "value": patched}]}]}}}}}]}}}}]
    status, job = api_as(daemon, "alice", "POST", "/v1/jobs", doc)
    assert status == 201, job
    # alice sees her own values: the test would notice a view that lost them.
    status, mine = api_as(daemon, "alice", "GET", f"/v1/jobs/{job['id']}")
    assert status == 200 and secret in json.dumps(mine) and patched in json.dumps(mine)
    for path in (f"/v1/jobs/{job['id']}", f"/v1/jobs/{job['uid']}", "/v1/jobs?states=all",
                 "/v1/jobs?user=alice&states=all"):
        status, seen = api_as(daemon, "bob", "GET", path)
        text = json.dumps(seen)
        assert status == 200, seen
        assert str(job["id"]) in text  # bob does see the job …
        assert secret not in text and patched not in text, path  # … not its values
        assert "DB_PASSWORD" in text  # the names stay, as Slurm's environment names do
    assert api_as(daemon, "alice", "POST", f"/v1/jobs/{job['id']}/cancel")[0] == 202
