"""Fixtures for integration tests: the real test bed and a real daemon.

Under ``CI=true`` a missing test bed FAILS the test (it never skips): CI must have
started it with ``testbed/slurm.sh up`` (and ``testbed/k8s/k8s.sh up`` for the
``k8s`` fixtures of conftest_k8s.py, ``testbed/flux.sh up`` for the ``flux_*`` fixtures
of conftest_flux.py, both imported here; ``testbed/slurm-versions.sh up`` for
``daemon_2411``/``daemon_2605``, daemons on the newer Slurm releases). Outside CI it
skips with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.bed import (
    Daemon,
    cleanup,
    fresh_daemon_dir,
    read_testbed_env,
    shared_dir,
)
from tests.integration.conftest_flux import (  # noqa: F401 - registers the fixtures
    flux_bed_fixture,
    flux_daemon_fixture,
)
from tests.integration.conftest_k8s import (  # noqa: F401 - registers the fixtures
    k8s_alice_fixture,
    k8s_fixture,
    k8s_namespace_fixture,
)
from tests.integration.conftest_slurm import cluster_for
from tests.requirements import require


@pytest.fixture(scope="session")
def testbed() -> dict[str, str]:
    env = read_testbed_env()
    require(env is not None, "the Slurm test bed is not up (/run/hpc-bridge-testbed/"
                             "testbed.env missing); start it with: bash testbed/slurm.sh up")
    assert env is not None
    return env


def rest_settings(testbed: dict[str, str]) -> dict[str, object]:
    return {"rest_socket": testbed["SLURMRESTD_SOCKET"],
            "rest_version": testbed.get("SLURM_REST_VERSION", "v0.0.38"),
            "jwt_key": testbed["SLURM_JWT_KEY"]}


@pytest.fixture
def daemon(testbed: dict[str, str]) -> Iterator[Daemon]:
    """A daemon talking to Slurm through slurmrestd (the primary path)."""
    workdir = fresh_daemon_dir("rest")
    d = Daemon(workdir, rest_settings(testbed))
    d.start()
    yield d
    d.stop()
    cleanup(workdir)


@pytest.fixture
def cli_daemon(testbed: dict[str, str]) -> Iterator[Daemon]:
    """A daemon talking to Slurm through sbatch/squeue/scancel (the fallback)."""
    workdir = fresh_daemon_dir("cli")
    d = Daemon(workdir, {"use_cli": True})
    d.start()
    yield d
    d.stop()
    cleanup(workdir)


def _newer_daemon(release: str) -> Iterator[Daemon]:
    """A started daemon on the Slurm ``release`` bed of testbed/slurm-versions.sh,
    through its slurmrestd (REST version negotiated); stopped and its directory removed
    after the test."""
    cluster = cluster_for(release)
    workdir = fresh_daemon_dir(f"rest-{release}")
    d = Daemon(workdir, cluster.settings("rest"))
    d.start()
    yield d
    d.stop()
    cleanup(workdir)


@pytest.fixture
def daemon_2411() -> Iterator[Daemon]:
    """A daemon on the Slurm 24.11 bed through slurmrestd (v0.0.42: maximum_nodes)."""
    yield from _newer_daemon("24.11")


@pytest.fixture
def daemon_2605() -> Iterator[Daemon]:
    """A daemon on the Slurm 26.05 bed through slurmrestd (v0.0.45)."""
    yield from _newer_daemon("26.05")


@pytest.fixture(params=["slurm", "flux"])
def bed_daemon(request: pytest.FixtureRequest) -> Daemon:
    """The same test on every back end that can express it: a daemon on the Slurm bed
    (the ``daemon`` fixture, slurmrestd) or on the Flux bed (``flux_daemon``). Its
    ``backend_kind`` says which."""
    name = "daemon" if request.param == "slurm" else "flux_daemon"
    d: Daemon = request.getfixturevalue(name)
    return d


@pytest.fixture
def outdir() -> Iterator[Path]:
    path = shared_dir("hpcb-out-")
    yield path
    cleanup(path)
