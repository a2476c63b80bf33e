"""Hostile input runs as data or is refused with a clear error; no shell ever sees it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.bed import Daemon

pytestmark = pytest.mark.integration

CANARY = "/tmp/hpc-bridge-pwned"  # the file an injection would create


@pytest.fixture(autouse=True)
def no_canary() -> None:
    Path(CANARY).unlink(missing_ok=True)


HOSTILE = [
    "it's a \"job\"",
    f"$(touch {CANARY})",
    f"`touch {CANARY}`",
    f"; touch {CANARY} #",
    "ünïcødé ✓ 名前",
    "--comment=evil",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_job_names_args_and_env_are_data(daemon: Daemon, outdir: Path,
                                                 name: str) -> None:
    script = outdir / "echo.sh"
    script.write_text('#!/bin/bash\n#SBATCH -N 1\nprintf "%s\\n" "$SLURM_JOB_NAME" "$1" '
                      '"$HOSTILE" "${#BIG}"\n')
    big = "x" * 10_240
    res = daemon.cli("alice", "tbatch", "--parsable", f"--job-name={name}", str(script), name,
                     cwd=outdir, env={"HOSTILE": name, "BIG": big})
    assert res.returncode == 0, res.stderr
    job_id = int(res.stdout)
    done = daemon.wait_state(job_id, ["Succeeded", "Failed"])
    assert done["state"] == "Succeeded", done
    out = daemon.cli("alice", "tlog", str(job_id)).stdout.splitlines()
    assert out == [name, name, name, "10240"]
    assert not Path(CANARY).exists()


@pytest.mark.parametrize(("args", "words"), [
    (["--job-name=two\nlines"], "control characters"),
    (["--nodes=0"], "nodes"),
    (["--nodes=99"], "nodes"),
    (["--time=1:2:3:4"], "time"),
    (["--runtime=tensorflow-ps"], "unknown"),
    (["--frobnicate"], "unrecognized option"),
])
def test_bad_requests_are_refused_clearly(daemon: Daemon, outdir: Path, args: list[str],
                                          words: str) -> None:
    script = outdir / "ok.sh"
    script.write_text("#!/bin/bash\necho hi\n")
    res = daemon.cli("alice", "tbatch", *args, str(script), cwd=outdir)
    if res.returncode == 0:
        # Impossible for Slurm but well-formed: admitted, then failed with Slurm's reason.
        job_id = int(res.stdout.split()[-1])
        done = daemon.wait_state(job_id, ["Failed", "Succeeded"], timeout=60)
        assert done["state"] == "Failed", done
        assert words in (done["message"] + done["reason"]).lower(), done
    else:
        assert res.stderr.startswith("tbatch: error:"), res.stderr
        assert words in res.stderr.lower(), res.stderr
        assert "Traceback" not in res.stderr


def test_malformed_script_gets_line_number(daemon: Daemon, outdir: Path) -> None:
    script = outdir / "bad.sh"
    script.write_text("#!/bin/bash\n#SBATCH -N 1\n#SBATCH --bogus\necho\n")
    res = daemon.cli("alice", "tbatch", str(script), cwd=outdir)
    assert res.returncode != 0
    assert ":3:" in res.stderr and "--bogus" in res.stderr
    nohashbang = outdir / "nohb.sh"
    nohashbang.write_text("echo hi\n")
    res = daemon.cli("alice", "tbatch", str(nohashbang), cwd=outdir)
    assert res.returncode != 0 and "#!" in res.stderr


def test_malformed_trainjob_yaml(daemon: Daemon, outdir: Path) -> None:
    bad = outdir / "bad.yaml"
    bad.write_text("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nspec: [\n")
    res = daemon.cli("alice", "tbatch", "-f", str(bad), cwd=outdir)
    assert res.returncode != 0 and "malformed YAML" in res.stderr
    zero = outdir / "zero.yaml"
    zero.write_text(json.dumps({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "zero"},
        "spec": {"runtimeRef": {"name": "plain"},
                 "trainer": {"numNodes": 0, "command": ["true"]}}}))
    res = daemon.cli("alice", "tbatch", "-f", str(zero), cwd=outdir)
    assert res.returncode != 0 and "spec.trainer.numNodes" in res.stderr


def test_trainjob_yaml_with_command_runs(daemon: Daemon, outdir: Path) -> None:
    doc = outdir / "tj.yaml"
    doc.write_text(f"""apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: yaml-job
  annotations:
    hpc-bridge.io/scheduling: '{{"chdir": "{outdir}", "output": "yaml-%j.out"}}'
spec:
  runtimeRef:
    name: plain
  trainer:
    numNodes: 1
    command: ["/bin/echo", "$(not expanded)", "it's"]
""")
    res = daemon.cli("alice", "tbatch", "-f", str(doc), cwd=outdir)
    assert res.returncode == 0, res.stderr
    job_id = int(res.stdout.split()[-1])
    done = daemon.wait_state(job_id, ["Succeeded", "Failed"])
    assert done["state"] == "Succeeded", done
    assert daemon.cli("alice", "tlog", str(job_id)).stdout == "$(not expanded) it's\n"
