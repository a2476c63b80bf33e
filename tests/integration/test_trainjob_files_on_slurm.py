"""A TrainJob file sent with ``tbatch -f`` to the real Slurm (issue 12, item 7): it runs
where and with what a user of sbatch expects, and its image is run or refused, never
ignored.

* Where the file says nothing, the job runs in the directory tbatch ran in, with tbatch's
  ``PATH`` (a program on it, as in a virtual environment's ``bin``, is found), as a
  script sent with sbatch would.
* ``spec.trainer.image`` on a back end with no ``container_command``: refused, naming the
  setting. With one, the job's command runs behind it with ``{image}`` replaced, on every
  rank. The bed has no container runtime, so the command here is ``env`` (a real program,
  which sets a variable and runs the rest): what is checked is that the command, the
  image and the job's own command all reach the nodes as configured.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.bed import Daemon, cleanup, fresh_daemon_dir
from tests.integration.conftest import rest_settings

pytestmark = pytest.mark.integration

IMAGE = "registry.example/team/train:1.0"


def _file(outdir: Path, name: str, command: list[str], *, image: str | None = None,
          nodes: int = 1, runtime: str = "plain") -> Path:
    trainer: dict[str, object] = {"numNodes": nodes, "command": command}
    if image is not None:
        trainer["image"] = image
    doc = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
           "metadata": {"name": name, "annotations": {"hpc-bridge.io/scheduling": json.dumps(
               {"output": f"{name}-%j.out", "time_limit_minutes": 5})}},
           "spec": {"runtimeRef": {"name": runtime}, "trainer": trainer}}
    path = outdir / f"{name}.json"
    path.write_text(json.dumps(doc))
    return path


def _tool(outdir: Path) -> Path:
    """A program only on the PATH tbatch runs with (as a virtual environment's)."""
    bindir = outdir / "venv-bin"
    bindir.mkdir()
    tool = bindir / "my-trainer"
    tool.write_text('#!/bin/sh\necho "rank ${SLURM_PROCID:-0} image=${CONTAINER_IMAGE:-none}'
                    ' in $PWD"\n')
    tool.chmod(0o755)
    bindir.chmod(0o755)
    return bindir


@pytest.fixture
def container_daemon(testbed: dict[str, str]) -> Iterator[Daemon]:
    """A daemon whose Slurm back end runs images through ``env CONTAINER_IMAGE={image}``."""
    workdir = fresh_daemon_dir("containers")
    d = Daemon(workdir, {**rest_settings(testbed),
                         "container_command": ["/usr/bin/env", "CONTAINER_IMAGE={image}"]})
    d.start()
    yield d
    d.stop()
    cleanup(workdir)


def _path(bindir: Path) -> dict[str, str]:
    return {"PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin"}


def test_a_file_runs_in_tbatchs_directory_with_its_path_and_an_image_is_refused(
        daemon: Daemon, outdir: Path) -> None:
    bindir = _tool(outdir)
    res = daemon.cli("alice", "tbatch", "--parsable", "-f",
                     str(_file(outdir, "here", ["my-trainer"])), cwd=outdir, env=_path(bindir))
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()
    daemon.wait_state(job_id, ["Succeeded"])
    assert (outdir / f"here-{job_id}.out").read_text() == f"rank 0 image=none in {outdir}\n"
    res = daemon.cli("alice", "tbatch", "-f", str(_file(outdir, "boxed", ["true"], image=IMAGE)),
                     cwd=outdir)
    assert res.returncode == 1, res.stdout
    assert res.stderr.startswith("tbatch: error: spec.trainer.image: back end 'slurm' runs no "
                                 "container images: an admin sets "
                                 "backends.slurm.container_command"), res.stderr


def test_an_image_runs_behind_the_container_command_on_every_rank(
        container_daemon: Daemon, outdir: Path) -> None:
    bindir = _tool(outdir)
    path = _file(outdir, "boxed", ["my-trainer"], image=IMAGE, nodes=2,
                 runtime="jax-distributed")
    res = container_daemon.cli("alice", "tbatch", "--parsable", "-f", str(path), cwd=outdir,
                               env=_path(bindir))
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()
    container_daemon.wait_state(job_id, ["Succeeded"])
    lines = sorted((outdir / f"boxed-{job_id}.out").read_text().splitlines())
    assert lines == [f"rank {r} image={IMAGE} in {outdir}" for r in (0, 1)], lines
