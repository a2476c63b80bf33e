"""A JobLaunchFailure names the output file that could not be opened."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.backend import BackendState
from slurm_adapter.backend import job_from_slurm
from slurm_adapter.dialects import dialect_for
from slurm_adapter.launch import launch_failure_detail, unopenable
from tests.requirements import require

OTHER = 1001 if os.geteuid() != 1001 else 1002


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every user may search, all the way down from ``/``."""
    path = Path(tempfile.mkdtemp(dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_a_missing_directory_is_named(open_dir: Path) -> None:
    tmp_path = open_dir
    path = tmp_path / "nope" / "out.txt"
    assert unopenable(str(path), OTHER) == f"directory {tmp_path / 'nope'} does not exist"
    assert launch_failure_detail([str(path), str(path)], OTHER) == (
        f"JobLaunchFailure: could not open output file {path} "
        f"(directory {tmp_path / 'nope'} does not exist)")


def test_a_directory_the_user_may_not_write_is_named(tmp_path: Path) -> None:
    require(os.geteuid() == 0, "root: needs to make files of another uid")
    hidden = tmp_path / "hidden"
    hidden.mkdir(mode=0o700)
    assert unopenable(str(hidden / "o"), OTHER) == (
        f"directory {tmp_path.parent.parent} is not searchable by uid {OTHER}")
    tmp_path = Path(tempfile.mkdtemp(dir="/tmp"))  # searchable all the way down
    tmp_path.chmod(0o755)
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o755)
    assert unopenable(str(closed / "o"), OTHER) == (
        f"directory {closed} is not writable by uid {OTHER}")
    mine = tmp_path / "mine"
    mine.mkdir()
    os.chown(mine, OTHER, OTHER)
    assert unopenable(str(mine / "o"), OTHER) is None
    assert unopenable(str(mine / "o"), 0) is None
    assert "slurmd could not start" in launch_failure_detail([str(mine / "o")], OTHER)
    shutil.rmtree(tmp_path)


def test_nothing_beneath_a_directory_the_user_may_not_search_is_told(open_dir: Path) -> None:
    """The root daemon's look must not tell alice what exists where she cannot look."""
    require(os.geteuid() == 0, "root: needs a directory another uid may not search")
    private = open_dir / "private"
    (private / "exists").mkdir(parents=True)
    (private / "a-file").write_text("x")
    private.chmod(0o700)
    answers = {unopenable(str(private / sub / "out"), OTHER)
               for sub in ("exists", "missing", "a-file")}
    assert answers == {f"directory {private} is not searchable by uid {OTHER}"}


def test_the_slurm_record_reads_as_the_path_not_signal_53(open_dir: Path) -> None:
    tmp_path = open_dir
    raw = {"job_id": 16, "job_state": "FAILED", "state_reason": "JobLaunchFailure",
           "exit_code": 4021, "comment": "hpc-bridge:u", "user_id": OTHER,
           "standard_output": str(tmp_path / "gone" / "x.out"), "name": "x",
           "current_working_directory": str(tmp_path)}
    bj = job_from_slurm(raw, dialect_for("v0.0.38"))
    assert bj is not None and bj.state is BackendState.FAILED
    assert (bj.signal, bj.exit_code) == (None, None)
    assert bj.detail == (f"JobLaunchFailure: could not open output file "
                         f"{tmp_path / 'gone' / 'x.out'} (directory {tmp_path / 'gone'} "
                         f"does not exist)")
