"""Fixtures for slurm_adapter tests against the real test beds: Slurm 22.05 on the host
(testbed/slurm.sh up) and Slurm 24.11 / 26.05 in chroots (testbed/slurm-versions.sh up).

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
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from bridge.backend import Owner
from slurm_adapter.backend import SlurmBackend, create
from tests.integration.bed import TESTBED_ENV, read_env_file, read_testbed_env
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


@dataclass(frozen=True)
class Cluster:
    """One Slurm test cluster: its release, env-file facts and (for the newer
    releases) the chroot its commands must run in."""

    release: str
    facts: dict[str, str]

    @property
    def root(self) -> str | None:
        return self.facts.get("SLURM_CHROOT") or None

    @property
    def nodes(self) -> list[str]:
        return self.facts.get("SLURM_NODES", "").split()

    @property
    def leaves(self) -> tuple[tuple[str, str], tuple[str, str]]:
        """The node pairs under the two leaf switches of the bed's topology."""
        n = self.nodes
        return (n[0], n[1]), (n[2], n[3])

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` as run against this cluster (inside its chroot, if any)."""
        return ["chroot", self.root, *argv] if self.root else list(argv)

    def settings(self, kind: str) -> dict[str, object]:
        """Back-end settings for ``kind`` = ``rest`` (version negotiated) or ``cli``."""
        common: dict[str, object] = {"request_timeout": 30}
        if self.root:
            common["client_root"] = self.root
            common["mpi_launch"] = self.facts["SLURM_MPI_LAUNCH"]
        if kind == "cli":
            return {"use_cli": True, **common}
        return {"rest_socket": self.facts["SLURMRESTD_SOCKET"],
                "jwt_key": self.facts["SLURM_JWT_KEY"], **common}


#: release -> env file written by its test bed's `up`.
CLUSTER_ENV = {
    "22.05": TESTBED_ENV,
    "24.11": TESTBED_ENV.parent / "slurm-trixie.env",
    "26.05": TESTBED_ENV.parent / "slurm-sid.env",
}


def cluster_for(release: str) -> Cluster:
    facts = read_env_file(CLUSTER_ENV[release])
    script = "testbed/slurm.sh up" if release == "22.05" else "testbed/slurm-versions.sh up"
    require(facts is not None, f"the Slurm {release} test bed is not up (no "
                               f"{CLUSTER_ENV[release]}); start it with: bash {script}")
    require(os.geteuid() == 0, "Slurm integration tests submit as alice: run them as root")
    assert facts is not None
    return Cluster(release, facts)


@pytest.fixture(scope="session", params=list(CLUSTER_ENV), name="slurm_cluster")
def slurm_cluster_fixture(request: pytest.FixtureRequest) -> Cluster:
    """Each Slurm release of the test beds in turn."""
    return cluster_for(str(request.param))


@pytest.fixture(params=["rest", "cli"], name="slurm_backend")
async def slurm_backend_fixture(request: pytest.FixtureRequest,
                                slurm_cluster: Cluster) -> AsyncIterator[SlurmBackend]:
    """A started SlurmBackend on each cluster, through slurmrestd and through the
    commands."""
    backend = create(f"slurm-{slurm_cluster.release}-{request.param}",
                     slurm_cluster.settings(str(request.param)))
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
