"""A corpus of job scripts as HPC-centre documentation writes them, through both
``sbatch --test-only`` and ``tbatch --test-only`` on the real Slurm (issue 12).

Each script in ``sbatch_corpus/`` (DDP, DeepSpeed, MPI, arrays, dependencies, GPU
requests, mail, signals, user mistakes …) runs through both as alice. The outcome is
``ok P processors, N nodes, partition X`` (Slurm's own estimate: tbatch asks Slurm with
the job the bridge would submit) or ``error``. Every script where the two differ is
reported; the known differences, each with its reason, are ``sbatch_corpus/DIFFERENCES``
and the test fails when the report is not exactly that list (a new difference, or one
that went away). Where both refuse a script, "error" alone would agree whatever the
reason: each tool's first error line is kept in ``sbatch_corpus/ERRORS`` (reviewed:
the same mistake named by both), and the test fails when one changes. Regenerate both
lists with ``HPC_BRIDGE_UPDATE_GOLDEN=1`` and review them.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from bridge.hostlist import expand
from tests.integration.bed import Daemon

pytestmark = pytest.mark.integration

CORPUS = Path(__file__).parent / "sbatch_corpus"
GOLDEN = CORPUS / "DIFFERENCES"
ERRORS = CORPUS / "ERRORS"
_ESTIMATE = re.compile(r"^(?:sbatch|tbatch): Job (?:\d+ )?to start at \S+ using (\d+) "
                       r"processors on nodes? (\S+) in partition (\S+)$", re.M)


def outcome(res: subprocess.CompletedProcess[str]) -> str:
    """What a --test-only run said, in words both tools share."""
    if res.returncode != 0:
        return "error"
    found = _ESTIMATE.search(res.stderr)
    assert found, res.stderr
    nodes = len(expand(found[2]))
    return f"ok {found[1]} processors, {nodes} node{'s' if nodes != 1 else ''}, " \
           f"partition {found[3]}"


def first_error(res: subprocess.CompletedProcess[str]) -> str:
    """The first line a refusing tool printed (``error:`` lines first), without its
    tool's name, the corpus's directory or job ids."""
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    line = next((ln for ln in lines if ": error: " in ln), lines[0] if lines else "")
    text = line.partition(": error: ")[2] if ": error: " in line else line.partition(": ")[2]
    return re.sub(r"\b\d{3,}\b", "N", text.replace(f"{CORPUS}/", "").strip())


def _golden() -> dict[str, str]:
    """``NAME: sbatch=... | tbatch=...`` lines (``#`` starts a reason or a comment)."""
    known = {}
    for line in GOLDEN.read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if text:
            name, _, rest = text.partition(": ")
            known[name] = rest
    return known


def test_the_corpus_is_big_enough() -> None:
    scripts = sorted(CORPUS.glob("*.sh"))
    assert len(scripts) >= 30
    text = "\n".join(p.read_bytes().decode("latin-1") for p in scripts)
    for what in ("torchrun", "deepspeed", "mpirun", "--array", "--dependency", "--gres",
                 "--mail-type", "--signal"):
        assert what in text, what


def test_tbatch_and_sbatch_agree_on_the_corpus_but_for_the_known_differences(
        daemon: Daemon, outdir: Path) -> None:
    report: dict[str, str] = {}
    errors: dict[str, str] = {}
    for script in sorted(CORPUS.glob("*.sh")):
        theirs = subprocess.run(["runuser", "-u", "alice", "--", "sbatch", "--test-only",
                                 str(script)], cwd=outdir, capture_output=True, text=True,
                                check=False, timeout=60)
        ours = daemon.cli("alice", "tbatch", "--test-only", str(script), cwd=outdir)
        assert ours.stdout == "", (script.name, ours.stdout)
        a, b = outcome(theirs), outcome(ours)
        if a != b:
            report[script.name] = f"sbatch={a} | tbatch={b}"
        elif a == "error":
            errors[script.name] = f"sbatch: {first_error(theirs)} | tbatch: {first_error(ours)}"
    assert daemon.api("GET", "/v1/jobs").json()["items"] == []  # --test-only stores nothing
    if os.environ.get("HPC_BRIDGE_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text("".join(f"{k}: {v}  # WHY?\n" for k, v in sorted(report.items())))
        ERRORS.write_text("".join(f"{k}: {v}\n" for k, v in sorted(errors.items())))
    lines = "\n".join(f"{k}: {v}" for k, v in sorted(report.items()))
    assert report == _golden(), f"tbatch and sbatch differ on:\n{lines}"
    recorded = dict(ln.split(": ", 1) for ln in ERRORS.read_text().splitlines() if ln)
    assert errors == recorded, "the reasons both tools give for a refused script changed"
