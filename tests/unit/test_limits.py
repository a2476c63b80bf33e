"""Per-user limits on fake time: the token bucket, the concurrency count, active jobs."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.limits import LimitExceeded, LimitSettings, TokenBuckets, UserLimits


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_bucket_gives_the_burst_then_the_rate_and_says_when() -> None:
    clock = FakeClock()
    buckets = TokenBuckets(rate=2.0, burst=3, clock=clock)
    assert [buckets.take("u") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("u") == pytest.approx(0.5)
    clock.now += 0.25
    assert buckets.take("u") == pytest.approx(0.25)
    clock.now += 0.25
    assert buckets.take("u") == 0.0
    assert buckets.take("other") == 0.0  # keys are independent


@settings(max_examples=300, deadline=None)
@given(rate=st.floats(0.1, 100), burst=st.integers(1, 50),
       steps=st.lists(st.floats(0, 5), min_size=1, max_size=80))
def test_bucket_never_grants_more_than_burst_plus_rate_times_time(
        rate: float, burst: int, steps: list[float]) -> None:
    clock = FakeClock()
    buckets = TokenBuckets(rate=rate, burst=burst, clock=clock)
    start = clock.now
    granted = 0
    for step in steps:
        clock.now += step
        wait = buckets.take("u")
        if wait == 0.0:
            granted += 1
        else:
            # The wait it names is enough: after it, a token is there.
            assert wait > 0
            assert buckets.tokens("u") + wait * rate == pytest.approx(1.0, abs=1e-6)
    assert granted <= burst + (clock.now - start) * rate + 1e-6


@settings(max_examples=200, deadline=None)
@given(rate=st.floats(0.1, 100), burst=st.integers(1, 50), idle=st.floats(0, 100))
def test_bucket_after_retry_after_grants(rate: float, burst: int, idle: float) -> None:
    clock = FakeClock()
    buckets = TokenBuckets(rate=rate, burst=burst, clock=clock)
    while (wait := buckets.take("u")) == 0.0:
        pass
    clock.now += wait + 1e-9
    assert buckets.take("u") == 0.0
    clock.now += idle
    assert buckets.tokens("u") <= burst


def test_idle_users_are_forgotten() -> None:
    clock = FakeClock()
    buckets = TokenBuckets(rate=1.0, burst=2, clock=clock, max_keys=10)
    for key in range(10):
        buckets.take(key)
    clock.now += 10  # all full again
    buckets.take("new")
    assert len(buckets._buckets) <= 2


def test_submit_rate_refusal_names_setting_and_retry_after() -> None:
    clock = FakeClock()
    limits = UserLimits(LimitSettings(submit_rate=0.5, submit_burst=2), clock=clock)
    limits.check_submit(1002, "bob")
    limits.check_submit(1002, "bob")
    with pytest.raises(LimitExceeded) as info:
        limits.check_submit(1002, "bob")
    assert info.value.limit == "submit_rate"
    assert info.value.retry_after == 2 == math.ceil(1 / 0.5)
    assert "limits.submit_rate" in str(info.value) and "bob" in str(info.value)
    limits.check_submit(1001, "alice")  # alice has her own bucket
    limits.check_submit(0, "root")  # root is exempt
    for _ in range(100):
        limits.check_submit(0, "root")
    assert limits.take_hits() == {"bob": {"submit_rate": 1}}
    assert limits.take_hits() == {}
    assert limits.total_hits == 1


def test_concurrency_counts_in_and_out() -> None:
    limits = UserLimits(LimitSettings(max_concurrent_requests=2))
    limits.enter(1002, "bob")
    limits.enter(1002, "bob")
    with pytest.raises(LimitExceeded) as info:
        limits.enter(1002, "bob")
    assert info.value.limit == "max_concurrent_requests"
    assert "limits.max_concurrent_requests = 2" in str(info.value)
    assert info.value.retry_after >= 1
    limits.enter(1001, "alice")
    limits.leave(1002)
    limits.enter(1002, "bob")
    assert limits.in_flight(1002) == 2
    for _ in range(10):
        limits.enter(0, "root")
    assert limits.in_flight(0) == 0


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from([1001, 1002]), st.booleans()), max_size=60),
       limit=st.integers(1, 5))
def test_concurrency_never_exceeds_limit(ops: list[tuple[int, bool]], limit: int) -> None:
    limits = UserLimits(LimitSettings(max_concurrent_requests=limit))
    held = {1001: 0, 1002: 0}
    for uid, enter in ops:
        if enter:
            try:
                limits.enter(uid, str(uid))
                held[uid] += 1
            except LimitExceeded:
                assert held[uid] == limit
        elif held[uid]:
            limits.leave(uid)
            held[uid] -= 1
        assert limits.in_flight(uid) == held[uid] <= limit


def test_active_jobs_and_zero_means_off() -> None:
    limits = UserLimits(LimitSettings(max_active_jobs=3))
    limits.check_active(1002, "bob", 2)
    with pytest.raises(LimitExceeded) as info:
        limits.check_active(1002, "bob", 3)
    assert "limits.max_active_jobs = 3" in str(info.value)
    limits.check_active(0, "root", 10**6)
    # The count may stop one past the limit; nothing is counted where it cannot refuse.
    assert limits.active_cap(1002) == 4 and limits.active_cap(0) is None
    with pytest.raises(LimitExceeded) as info:
        limits.check_active(1002, "bob", 4, adding=5)
    assert "bob has more than 3," in str(info.value)
    off = UserLimits(LimitSettings(max_active_jobs=0, submit_rate=0,
                                   max_concurrent_requests=0))
    off.check_active(1002, "bob", 10**6)
    assert off.active_cap(1002) is None
    for _ in range(1000):
        off.check_submit(1002, "bob")
        off.enter(1002, "bob")


def test_request_rate_refuses_a_stream_of_quick_requests() -> None:
    clock = FakeClock()
    limits = UserLimits(LimitSettings(request_rate=10, request_burst=3), clock=clock)
    for _ in range(3):
        limits.check_request(1002, "bob")
    with pytest.raises(LimitExceeded) as info:
        limits.check_request(1002, "bob")
    assert info.value.limit == "request_rate" and "limits.request_rate" in str(info.value)
    limits.check_request(1001, "alice")
    clock.now += 0.1
    limits.check_request(1002, "bob")
    for _ in range(50):
        limits.check_request(0, "root")
