"""A TrainJob's ``spec.trainer.resourcesPerNode`` reaches the real Slurm (issue 10: a
TrainJob CR routed to Slurm was placed and shown with its resources but submitted
without them), through slurmrestd and through sbatch alike. The bed's nodes have 2
CPUs, 2000 MB and no GPUs (testbed/slurm.sh)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.bed import Daemon, trainjob_doc

pytestmark = pytest.mark.integration

# Set by slurmd from the allocation (the REST path gets no sbatch-made variables).
REPORT = 'echo "cpus=$SLURM_JOB_CPUS_PER_NODE mem=$SLURM_MEM_PER_NODE"'


def submit(d: Daemon, outdir: Path, name: str, resources: dict[str, Any]) -> int:
    doc = trainjob_doc(outdir, name, "plain", ["/bin/sh", "-c", REPORT])
    doc["spec"]["trainer"]["resourcesPerNode"] = resources
    path = outdir / f"{name}.json"
    path.write_text(json.dumps(doc))
    res = d.cli("alice", "tbatch", "--parsable", "-f", str(path), cwd=outdir)
    assert res.returncode == 0, res.stderr
    return int(res.stdout)


@pytest.mark.parametrize("fixture", ["daemon", "cli_daemon"])
def test_cpus_and_memory_of_resources_per_node(fixture: str, request: pytest.FixtureRequest,
                                               outdir: Path) -> None:
    d: Daemon = request.getfixturevalue(fixture)
    job_id = submit(d, outdir, "res", {"requests": {"cpu": "2", "memory": "300Mi"}})
    done = d.wait_state(job_id, ["Succeeded", "Failed"], timeout=120)
    assert done["state"] == "Succeeded", done
    log = d.cli("alice", "tlog", str(job_id), cwd=outdir).stdout
    assert "cpus=2 mem=300" in log.splitlines(), log


@pytest.mark.parametrize("fixture", ["daemon", "cli_daemon"])
def test_gpus_of_resources_per_node_are_asked_for(fixture: str, request: pytest.FixtureRequest,
                                                  outdir: Path) -> None:
    """No node of the bed has a GPU: Slurm must refuse the job, not run it without
    (slurmrestd 22.05 says "Failure during parsing", sbatch "Invalid generic resource
    (gres) specification")."""
    d: Daemon = request.getfixturevalue(fixture)
    job_id = submit(d, outdir, "gpu", {"limits": {"nvidia.com/gpu": 1}})
    done = d.wait_state(job_id, ["Failed", "Succeeded", "Running"], timeout=120)
    assert done["state"] == "Failed", done
    message = (done.get("message") or "").lower()
    assert "gres" in message or "parsing" in message, done
