"""Backoff delays grow exponentially, stay within [cap/2, cap], and have jitter."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bridge.backoff import backoff_delay


@given(st.integers(min_value=1, max_value=200))
def test_delay_bounds(attempt: int) -> None:
    ceiling = min(60.0, 2.0 ** (attempt - 1))
    delay = backoff_delay(attempt, base=1.0, cap=60.0)
    assert ceiling / 2 <= delay <= ceiling


def test_delays_grow() -> None:
    assert backoff_delay(1) <= 1.0 < 2.0 <= backoff_delay(3) * 2
