"""The sbatch options the compatibility table lists are those of the real releases.

``bridge/sbatch/manual.py`` names every option of each release's sbatch(1) manual
page; this test reads the manual pages the test beds' Slurm packages installed (22.05
on the host, 24.11 and 26.05 in their chroots) and fails when a release adds or drops
an option, so docs/sbatch-compat.md (made from that list) stays true. It also runs
each release's own sbatch on a script with every option tbatch refuses by name, to
check that sbatch knows them all (refused here, accepted there: never "unrecognized").
"""

from __future__ import annotations

import gzip
import itertools
import re
import subprocess
from pathlib import Path

import pytest

from bridge.sbatch.manual import RELEASES, VARIABLES
from bridge.sbatch.options import refused_names
from tests.integration.conftest_slurm import CLUSTER_ENV, Cluster, cluster_for

pytestmark = pytest.mark.integration

#: An option's definition line in the man page source: ``\fB\-\-name\fR=...``.
_OPTION = re.compile(r"\\-\\-([a-z][a-z0-9]*(?:(?:\\-|-)[a-z0-9]+)*)")


def manual_options(root: str | None) -> set[str]:
    """The long option names the OPTIONS section of sbatch(1) under ``root`` defines."""
    page = Path(root or "/") / "usr/share/man/man1/sbatch.1.gz"
    assert page.exists(), f"{page}: the Slurm client package's manual page is missing"
    lines = gzip.decompress(page.read_bytes()).decode("utf-8", "replace").splitlines()
    start = lines.index('.SH "OPTIONS"')
    section = lines[start + 1:]
    end = next(i for i, line in enumerate(section) if line.startswith(".SH"))
    names: set[str] = set()
    for before, line in itertools.pairwise(section[:end]):
        if before.startswith(".TP") and line.startswith("\\fB\\-"):
            names.update(m.replace("\\-", "-") for m in _OPTION.findall(line))
    return names


#: A variable's definition line: ``\fBSBATCH_X\fR`` (``or \fBSLURM_X\fR``, ``=ID``).
_VARIABLE = re.compile(r"\\fB((?:SBATCH|SLURM)_[A-Z0-9_]+)\\fR")


def manual_variables(root: str | None) -> set[str]:
    """The variables the INPUT ENVIRONMENT VARIABLES section of sbatch(1) under ``root``
    defines."""
    page = Path(root or "/") / "usr/share/man/man1/sbatch.1.gz"
    lines = gzip.decompress(page.read_bytes()).decode("utf-8", "replace").splitlines()
    section = lines[lines.index('.SH "INPUT ENVIRONMENT VARIABLES"') + 1:]
    end = next(i for i, line in enumerate(section) if line.startswith(".SH"))
    names: set[str] = set()
    for before, line in itertools.pairwise(section[:end]):
        if before.startswith(".TP") and line.startswith("\\fB"):
            names.update(_VARIABLE.findall(line))
    return names


@pytest.fixture(params=sorted(CLUSTER_ENV), name="slurm_cluster")
def slurm_cluster_fixture(request: pytest.FixtureRequest) -> Cluster:
    """Each Slurm release of the test beds."""
    return cluster_for(str(request.param))


def test_the_release_list_is_each_manual_page(slurm_cluster: Cluster) -> None:
    found = manual_options(slurm_cluster.root)
    listed = RELEASES[slurm_cluster.release]
    assert sorted(found - listed) == [], "options the manual has and manual.py lacks"
    assert sorted(listed - found) == [], "options manual.py lists and the manual lacks"


def test_the_variable_list_is_each_manual_page(slurm_cluster: Cluster) -> None:
    """bridge/sbatch/inputenv.py reads, refuses or documents each of them (a unit test
    checks that against this list)."""
    found = manual_variables(slurm_cluster.root)
    assert found == VARIABLES[slurm_cluster.release]


def test_sbatch_knows_every_option_tbatch_refuses_by_name(slurm_cluster: Cluster) -> None:
    """Each name tbatch refuses as 'not supported' is an option of sbatch (in some
    release): its parser takes ``--name`` (with a value where it needs one)."""
    known = set().union(*RELEASES.values())
    assert sorted(set(refused_names()) - known - {"immediate", "tasks"}) == []
    chroot = ["chroot", slurm_cluster.root] if slurm_cluster.root else []
    usage = subprocess.run([*chroot, "sbatch", "--usage"], capture_output=True, text=True,
                           timeout=30, check=False)
    assert usage.returncode == 0 and "Usage: sbatch" in usage.stdout
    for name in sorted(RELEASES[slurm_cluster.release] & set(refused_names())):
        res = subprocess.run([*chroot, "sbatch", "--test-only", f"--{name}=x", "--wrap=true"],
                             capture_output=True, text=True, timeout=30, check=False)
        assert "unrecognized option" not in res.stderr, (name, res.stderr)
