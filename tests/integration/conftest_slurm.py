"""Fixtures for slurm_adapter tests against the real test bed (testbed/slurm.sh up).

Imported by tests/integration/test_slurm_adapter.py (tests/integration/conftest.py
belongs to the daemon-level tests). Each fixture function is named ``*_fixture``
and registered under the short name, so importing it does not shadow test
arguments. Under ``CI=true`` a missing bed FAILS the
tests; elsewhere they skip with the reason.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bridge.backend import Owner
from slurm_adapter.backend import SlurmBackend, create
from tests.integration.bed import read_testbed_env
from tests.requirements import require


@pytest.fixture(scope="session", name="slurm_bed")
def slurm_bed_fixture() -> dict[str, str]:
    facts = read_testbed_env()
    require(facts is not None and shutil.which("sbatch") is not None,
            "the Slurm test bed is not up (no /run/hpc-bridge-testbed/testbed.env or no "
            "sbatch); start it with: bash testbed/slurm.sh up")
    require(os.geteuid() == 0, "slurm_adapter integration tests submit as alice: run them "
                               "as root")
    assert facts is not None
    return facts


def settings_for(kind: str, bed: dict[str, str]) -> dict[str, object]:
    if kind == "cli":
        return {"use_cli": True, "request_timeout": 30}
    return {"rest_socket": bed["SLURMRESTD_SOCKET"],
            "rest_version": bed.get("SLURM_REST_VERSION", "v0.0.38"),
            "jwt_key": bed["SLURM_JWT_KEY"], "request_timeout": 30}


@pytest.fixture(params=["rest", "cli"], name="slurm_backend")
async def slurm_backend_fixture(request: pytest.FixtureRequest,
                        slurm_bed: dict[str, str]) -> AsyncIterator[SlurmBackend]:
    """A started SlurmBackend, once through slurmrestd and once through the commands."""
    backend = create(f"slurm-{request.param}", settings_for(request.param, slurm_bed))
    await backend.start()
    yield backend
    await backend.close()


@pytest.fixture(scope="session", name="alice")
def alice_fixture(slurm_bed: dict[str, str]) -> Owner:
    try:
        pw = pwd.getpwnam("alice")
    except KeyError:
        pytest.fail("the test bed has no user alice")
    return Owner(uid=pw.pw_uid, gid=pw.pw_gid, user="alice")


@pytest.fixture(name="alice_dir")
def alice_dir_fixture() -> Iterator[Path]:
    """A fresh directory alice can write her job output to."""
    path = Path(tempfile.mkdtemp(prefix="hpcb-slurm-", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session", name="dead_slurm_conf")
def dead_slurm_conf_fixture(slurm_bed: dict[str, str]) -> Iterator[Path]:
    """A copy of the bed's slurm.conf pointing at a port where no slurmctld listens."""
    conf = Path(slurm_bed.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    where = Path(tempfile.mkdtemp(prefix="hpcb-deadconf-", dir="/tmp"))
    where.chmod(0o755)
    text = re.sub(r"(?m)^SlurmctldPort=.*$", "SlurmctldPort=1", conf.read_text())
    (where / "slurm.conf").write_text(text)
    for extra in ("topology.conf", "mpi.conf"):
        if (conf.parent / extra).exists():
            shutil.copy(conf.parent / extra, where / extra)
    for f in where.iterdir():
        f.chmod(0o644)
    yield where / "slurm.conf"
    shutil.rmtree(where, ignore_errors=True)
