"""Fixtures for tests against the Flux test bed (``testbed/flux.sh up``).

The bed is a multi-user instance of four brokers that look like four hosts (node1 …
node4), owned by the system user ``flux``; ``up`` writes
``/run/hpc-bridge-testbed/flux.env``. Under ``CI=true`` a missing bed, or flux-python
missing from the test venv, FAILS the test (tests/requirements.py), as for every other
back end.
"""

from __future__ import annotations

import importlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.bed import REPO, Daemon, cleanup, fresh_daemon_dir, read_env_file
from tests.requirements import require

FLUX_ENV = Path("/run/hpc-bridge-testbed/flux.env")


def flux_import_error() -> str | None:
    """Why flux-python cannot be used by this interpreter (None: it can). The bed puts
    flux-core's lib directory in the loader's path (ld.so.conf.d)."""
    try:
        importlib.import_module("flux")
        importlib.import_module("flux.job")
    except (ImportError, OSError) as exc:
        return str(exc)
    return None


@pytest.fixture(scope="session", name="flux_bed")
def flux_bed_fixture() -> dict[str, str]:
    """The Flux bed's facts (flux.env); fails in CI, skips elsewhere, when it is not up."""
    env = read_env_file(FLUX_ENV)
    require(env is not None, f"the Flux test bed is not up ({FLUX_ENV} missing); start it "
                             f"with: bash testbed/flux.sh up")
    assert env is not None
    error = flux_import_error()
    require(error is None, f"flux-python is not usable in the test venv ({error}); "
                           f"bash scripts/setup-python.sh installs flux-python==0.88.0 and ply")
    return env


def flux_settings(bed: dict[str, str], **more: Any) -> dict[str, Any]:
    """``[backends.flux]`` settings for the bed."""
    return {"uri": bed["FLUX_URI"], "flux_command": bed["FLUX_COMMAND"],
            "reconcile_interval": 5.0, **more}


def flux_daemon_for(bed: dict[str, str], name: str = "flux",
                    engine: dict[str, Any] | None = None) -> Daemon:
    """A daemon (not started) whose one back end is the bed's Flux instance. The daemon
    runs as root; jobs are submitted as alice or bob (root's own jobs Flux refuses)."""
    return Daemon(fresh_daemon_dir(name), flux_settings(bed), backend_name="flux",
                  backend_kind="flux", engine_settings=engine or {})


@pytest.fixture(name="flux_daemon")
def flux_daemon_fixture(flux_bed: dict[str, str]) -> Iterator[Daemon]:
    d = flux_daemon_for(flux_bed)
    d.start()
    yield d
    d.stop()
    cleanup(d.workdir)


def flux_as(bed: dict[str, str], user: str, *args: str,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the bed's ``flux`` command as ``user`` (the instance owner for admin calls)."""
    env = [f"PATH={Path(bed['FLUX_COMMAND']).parent}:/usr/bin:/bin", "HOME=/",
           f"FLUX_URI={bed['FLUX_URI']}", "FLUX_F58_FORCE_ASCII=1"]
    return subprocess.run(["runuser", "-u", user, "--", "env", "-i", *env,
                           bed["FLUX_COMMAND"], *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def flux_bed_script(*args: str) -> None:
    """``testbed/flux.sh ARGS`` of this checkout (kill, up)."""
    subprocess.run(["bash", str(REPO / "testbed" / "flux.sh"), *args], check=True,
                   timeout=180)
