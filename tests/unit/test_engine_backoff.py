"""Backoff delays grow exponentially, stay within [ceiling/2, ceiling], and have jitter;
the reconnect loops' :class:`Backoff` gives the same delays and resets on success."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.backoff import Backoff, backoff_delay


@given(st.integers(min_value=1, max_value=200))
def test_delay_bounds(attempt: int) -> None:
    ceiling = min(60.0, 2.0 ** (attempt - 1))
    delay = backoff_delay(attempt, base=1.0, cap=60.0)
    assert ceiling / 2 <= delay <= ceiling


def test_delays_grow() -> None:
    assert backoff_delay(1) <= 1.0 < 2.0 <= backoff_delay(3) * 2


# -- Backoff: the reconnect loops' helper (no real sleeping: sleep and RNG injected) --

def _low(low: float, high: float) -> float:
    return low


def _high(low: float, high: float) -> float:
    return high


def test_backoff_doubles_up_to_the_cap() -> None:
    top = Backoff(0.5, 4.0, uniform=_high)
    assert [top.delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    bottom = Backoff(0.5, 4.0, uniform=_low)
    assert [bottom.delay() for _ in range(5)] == [0.25, 0.5, 1.0, 2.0, 2.0]


@given(st.integers(min_value=1, max_value=2000))
def test_backoff_delays_stay_within_bounds(failures: int) -> None:
    b = Backoff(1.0, 30.0)
    delays = [b.delay() for _ in range(failures)]
    ceiling = min(30.0, 2.0 ** min(failures - 1, 1023))
    assert all(0.5 <= d <= 30.0 for d in delays)
    assert ceiling / 2 <= delays[-1] <= ceiling and b.failures == failures


def test_reset_after_a_success_starts_again_at_base() -> None:
    b = Backoff(1.0, 60.0, uniform=_high)
    for _ in range(5):
        b.delay()
    b.reset()
    assert b.failures == 0 and b.delay() == 1.0


def test_sleep_waits_the_delay_through_the_injected_sleep() -> None:
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    async def go() -> list[float]:
        b = Backoff(2.0, 5.0, uniform=_high, sleep=fake_sleep)
        return [await b.sleep() for _ in range(3)]

    assert asyncio.run(go()) == [2.0, 4.0, 5.0] == slept


@pytest.mark.parametrize(("base", "cap"), [(0.0, 1.0), (-1.0, 1.0), (2.0, 1.0)])
def test_backoff_refuses_a_base_that_cannot_back_off(base: float, cap: float) -> None:
    with pytest.raises(ValueError, match="base"):
        Backoff(base, cap)
