"""The job state machine: legal changes only; terminal states are final."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.states import TERMINAL, IllegalTransition, JobState, allowed, check_transition


def test_happy_path_is_legal() -> None:
    path = [JobState.PENDING, JobState.SUBMITTED, JobState.RUNNING, JobState.SUCCEEDED]
    for src, dst in itertools.pairwise(path):
        check_transition(src, dst)


def test_suspend_and_resume() -> None:
    check_transition(JobState.PENDING, JobState.SUSPENDED)
    check_transition(JobState.SUSPENDED, JobState.PENDING)
    with pytest.raises(IllegalTransition):
        check_transition(JobState.SUSPENDED, JobState.RUNNING)


@given(st.sampled_from(sorted(TERMINAL)), st.sampled_from(list(JobState)))
def test_terminal_states_never_change(src: JobState, dst: JobState) -> None:
    assert not allowed(src, dst)
    with pytest.raises(IllegalTransition):
        check_transition(src, dst)


@given(st.lists(st.sampled_from(list(JobState)), max_size=30))
def test_any_walk_of_legal_steps_never_leaves_a_terminal_state(steps: list[JobState]) -> None:
    state = JobState.PENDING
    for dst in steps:
        if allowed(state, dst):
            was_terminal = state.terminal
            state = dst
            assert not was_terminal
    assert state in JobState


def test_running_never_goes_back_to_pending() -> None:
    assert not allowed(JobState.RUNNING, JobState.PENDING)
    assert not allowed(JobState.SUBMITTED, JobState.PENDING)
