"""Slurm time limits: every sbatch form, rounding, no-limit spellings, squeue rendering."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.slurmtime import (
    MAX_SECONDS,
    SlurmTimeError,
    format_minutes,
    format_seconds,
    parse_minutes,
    parse_seconds,
)


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("90", 90),  # minutes
        ("1", 1),
        ("5:00", 5),  # minutes:seconds
        ("0:30", 1),  # seconds round UP to the next minute (Slurm)
        ("0:90", 2),  # no range checks, like Slurm
        ("1:00:00", 60),  # hours:minutes:seconds
        ("1:00:01", 61),
        ("12:34:56", 12 * 60 + 35),
        ("2-0", 2880),  # days-hours
        ("1-12", 36 * 60),
        ("1-2:30", 24 * 60 + 150),  # days-hours:minutes
        ("1-00:00:01", 1441),  # days-hours:minutes:seconds
        ("007", 7),
    ],
)
def test_every_sbatch_form(text: str, minutes: int) -> None:
    assert parse_minutes(text) == minutes


@pytest.mark.parametrize("text", ["UNLIMITED", "unlimited", "Infinite", "INFINITE", "-1"])
def test_unlimited_spellings(text: str) -> None:
    assert parse_minutes(text) is None
    assert parse_seconds(text) is None


@pytest.mark.parametrize("text", ["0", "0:00", "0:0:0", "0-0", "0-0:0:0"])
def test_zero_means_no_limit(text: str) -> None:
    # sbatch(1): "A time limit of zero requests that no time limit be imposed."
    assert parse_minutes(text) is None
    assert parse_seconds(text) == 0


@pytest.mark.parametrize(
    "text",
    [
        "",
        " 5",
        "5 ",
        "1:2:3:4",
        "1-2-3",
        "1--2",
        "2-",
        "-5",
        "1:",
        ":5",
        "1::2",
        "x",
        "1h",
        "1.5",
        "1-2:3:4:5",
        "٣",
        "+5",
        "-0",
        "1e3",
    ],
)
def test_invalid(text: str) -> None:
    with pytest.raises(SlurmTimeError) as info:
        parse_minutes(text)
    assert str(info.value) == f"invalid time specification {text!r}"


def test_error_message_exactly() -> None:
    with pytest.raises(SlurmTimeError, match=r"^invalid time specification '1:2:3:4'$"):
        parse_minutes("1:2:3:4")


def test_too_large() -> None:
    with pytest.raises(SlurmTimeError, match="too large"):
        parse_minutes("99999999999")
    with pytest.raises(SlurmTimeError):
        parse_minutes("9" * 5000)  # no int-conversion limit error leaks out


@pytest.mark.parametrize(
    ("minutes", "text"),
    [
        (None, "UNLIMITED"),
        (1, "1:00"),
        (30, "30:00"),
        (59, "59:00"),
        (60, "1:00:00"),
        (61, "1:01:00"),
        (1439, "23:59:00"),
        (1440, "1-00:00:00"),
        (2 * 1440 + 90, "2-01:30:00"),
    ],
)
def test_format_minutes_like_squeue(minutes: int | None, text: str) -> None:
    assert format_minutes(minutes) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0:00"), (5, "0:05"), (65, "1:05"), (3600, "1:00:00"), (86400 + 3661, "1-01:01:01")],
)
def test_format_seconds_like_squeue(seconds: int, text: str) -> None:
    assert format_seconds(seconds) == text


def test_format_refuses_negative() -> None:
    with pytest.raises(ValueError):
        format_minutes(-1)
    with pytest.raises(ValueError):
        format_seconds(-1)


@given(st.integers(min_value=1, max_value=MAX_SECONDS // 60))
def test_round_trip_minutes(minutes: int) -> None:
    assert parse_minutes(format_minutes(minutes)) == minutes


@given(st.integers(min_value=0, max_value=MAX_SECONDS))
def test_round_trip_seconds(seconds: int) -> None:
    assert parse_seconds(format_seconds(seconds)) == seconds


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=59))
def test_minutes_seconds_round_up(minutes: int, seconds: int) -> None:
    expected = minutes + (1 if seconds else 0)
    assert parse_minutes(f"{minutes}:{seconds:02d}") == (expected or None)


@given(st.text(max_size=30))
def test_never_raises_anything_else(text: str) -> None:
    try:
        result = parse_minutes(text)
    except SlurmTimeError:
        return
    assert result is None or result >= 1
