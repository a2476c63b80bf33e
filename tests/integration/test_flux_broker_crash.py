"""The Flux instance itself crashes: every broker SIGKILLed while a job runs, then a new
instance started at the same URI (``testbed/flux.sh kill`` and ``up``; the bed is
restarted, so this file is the only one that may disturb it).

The daemon must notice (it logs the lost connection and stays idle instead of spinning
on a dead handle), end the dead instance's job as ``Failed``/``BackendLost``, reconnect
to the new instance and track jobs there. And when one node's broker dies under a job,
Flux's "node failure" note must reach the job's message.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.bed import Daemon, cleanup, wait_for
from tests.integration.conftest_flux import flux_bed_script, flux_daemon_for

pytestmark = pytest.mark.integration

TERMINAL = ["Succeeded", "Failed", "Cancelled"]
#: CPU seconds the daemon may use in IDLE_WINDOW seconds while the broker is down.
IDLE_CPU = 0.3
IDLE_WINDOW = 3.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def lost_connection_logged(d: Daemon) -> bool:
    return "connection was lost" in d.log.read_text()


@pytest.fixture
def crash_daemon(flux_bed: dict[str, str]) -> Iterator[Daemon]:
    # A job missing from two snapshots over 2 s is lost (the default waits 30 s).
    d = flux_daemon_for(flux_bed, "flux-crash", engine={"lost_after_seconds": 2.0})
    d.start()
    yield d
    d.stop()
    cleanup(d.workdir)
    flux_bed_script("up")  # whatever happened, leave the bed up for the next test


def test_broker_sigkill_then_a_new_instance(crash_daemon: Daemon, outdir: Path) -> None:
    d = crash_daemon
    res = d.cli("alice", "tbatch", "--parsable", "--wrap", "sleep 60", cwd=outdir)
    assert res.returncode == 0, res.stderr
    old = int(res.stdout)
    d.wait_state(old, ["Running"], timeout=120)

    flux_bed_script("kill")
    wait_for(lambda: lost_connection_logged(d), 30,
             f"the daemon to log that the broker connection was lost (log: {d.log})")
    assert d.proc is not None
    before = cpu_seconds(d.proc.pid)
    time.sleep(IDLE_WINDOW)  # a measurement window, not a wait for a condition
    used = cpu_seconds(d.proc.pid) - before
    assert used < IDLE_CPU, f"the daemon used {used:.2f} CPU-s in {IDLE_WINDOW}s: spinning"
    assert d.job(old)["state"] == "Running"  # nothing is decided while Flux is away

    flux_bed_script("up")
    lost = d.wait_state(old, TERMINAL, timeout=120)
    assert (lost["state"], lost["reason"]) == ("Failed", "BackendLost"), lost

    res = d.cli("alice", "tbatch", "--parsable", "--wrap", "echo after", cwd=outdir)
    assert res.returncode == 0, res.stderr
    new = int(res.stdout)
    done = d.wait_state(new, TERMINAL, timeout=120)
    assert done["state"] == "Succeeded", done
    assert d.cli("alice", "tlog", str(new)).stdout == "after\n"


def test_a_lost_node_is_the_reason(crash_daemon: Daemon, outdir: Path) -> None:
    """One broker (node4) SIGKILLed under a running job: Flux fails the job with a
    node-failure exception, and its note is in the job's message, not just an exit code."""
    d = crash_daemon
    res = d.cli("alice", "tbatch", "--parsable", "-w", "node4", "--wrap", "sleep 60",
                cwd=outdir)
    assert res.returncode == 0, res.stderr
    job_id = int(res.stdout)
    assert d.wait_state(job_id, ["Running"], timeout=120)["nodes"] == ["node4"]
    flux_bed_script("kill", "node4")
    done = d.wait_state(job_id, TERMINAL, timeout=120)
    assert done["state"] == "Failed", done
    assert "node failure on node4" in done["message"], done
