"""One job id: the bridge's id pinned into output patterns and the job's environment."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.jobid import identity_env, pin_job_id
from slurm_adapter.script import expand_output_pattern


@pytest.mark.parametrize(("pattern", "pinned"), [
    ("slurm-%j.out", "slurm-42.out"),
    ("%x-%j.out", "%x-42.out"),
    ("%J.%A.%a", "42.42.%a"),
    ("%4j", "0042"),
    ("%12j", "0000000042"),
    ("100%%-%j", "100%%-42"),
    ("%%j", "%%j"),
    ("%N-%n-%t-%u-%s-%b", "%N-%n-%t-%u-%s-%b"),
    ("%5%j", "542"),  # Slurm reads "%5" before "%" as "5"
    ("a%12", "a2"),
    ("end%", "end"),
    ("%q%j", "%q42"),
    ("/abs/no-pattern", "/abs/no-pattern"),
    ("back\\slash-%j", "back\\slash-%j"),  # Slurm expands nothing here
])
def test_pins_the_bridge_id(pattern: str, pinned: str) -> None:
    assert pin_job_id(pattern, 42) == pinned


_PIECES = st.sampled_from(["%", "%%", "j", "J", "A", "a", "x", "u", "N", "n", "t", "s", "b",
                           "q", "4", "12", "0", "-", ".", "out", "/", "é"])


@given(st.lists(_PIECES, max_size=12).map("".join), st.integers(0, 10**9),
       st.integers(1, 10**9))
def test_slurm_expands_the_pinned_pattern_to_the_bridge_ids_name(
        pattern: str, bridge_id: int, slurm_id: int) -> None:
    """Whatever id Slurm then gives the job, the file is the one the pattern names with
    the bridge's id (expanded by the model of Slurm's expansion the back end uses)."""
    def expand(p: str, job_id: int) -> str:
        return expand_output_pattern(p, job_id, "train", "alice", "/w", node="n1")

    assert expand(pin_job_id(pattern, bridge_id), slurm_id) == expand(pattern, bridge_id)


def test_identity_env() -> None:
    assert identity_env(7, "u-1") == {"HPC_BRIDGE_JOB_ID": "7", "HPC_BRIDGE_JOB_UID": "u-1"}
