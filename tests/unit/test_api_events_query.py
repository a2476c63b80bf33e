"""``GET /v1/events`` query parsing (:func:`bridge.api_events.parse_query`): defaults,
ranges and the :class:`BadParameter` message naming the parameter (the API answers it
as a 400)."""

from __future__ import annotations

import pytest

from bridge.api_events import (
    DEFAULT_LIMIT,
    DEFAULT_WAIT,
    MAX_LIMIT,
    MAX_WAIT,
    BadParameter,
    parse_query,
)


def test_defaults_wait_for_new_events_only() -> None:
    assert parse_query({}) == (None, DEFAULT_WAIT, DEFAULT_LIMIT)
    assert (DEFAULT_WAIT, DEFAULT_LIMIT) == (25.0, 200)


@pytest.mark.parametrize(("query", "expected"), [
    ({"since": "0"}, (0, DEFAULT_WAIT, DEFAULT_LIMIT)),
    ({"since": "42", "timeout": "0", "limit": "1"}, (42, 0.0, 1)),
    ({"timeout": "2.5"}, (None, 2.5, DEFAULT_LIMIT)),
    ({"timeout": str(MAX_WAIT), "limit": str(MAX_LIMIT)}, (None, MAX_WAIT, MAX_LIMIT)),
    ({"since": str(2**53)}, (2**53, DEFAULT_WAIT, DEFAULT_LIMIT)),
])
def test_values_in_range(query: dict[str, str], expected: tuple[int | None, float, int]
                         ) -> None:
    since, wait, limit = parse_query(query)
    assert (since, wait, limit) == expected
    assert isinstance(limit, int) and (since is None or isinstance(since, int))


@pytest.mark.parametrize(("query", "message"), [
    ({"since": "-1"}, "since: must be between 0 and "),
    ({"since": "x"}, "since: 'x' is not a whole number"),
    ({"since": "1.5"}, "since: '1.5' is not a whole number"),
    ({"since": ""}, "since: '' is not a whole number"),
    ({"since": str(2**64)}, "since: must be between 0 and "),
    ({"timeout": "-0.1"}, "timeout: must be between 0 and 60"),
    ({"timeout": "61"}, "timeout: must be between 0 and 60"),
    ({"timeout": "nan"}, "timeout: must be between 0 and 60"),
    ({"timeout": "inf"}, "timeout: must be between 0 and 60"),
    ({"timeout": "soon"}, "timeout: 'soon' is not a number"),
    ({"limit": "0"}, "limit: must be between 1 and 1000"),
    ({"limit": "1001"}, "limit: must be between 1 and 1000"),
    ({"limit": "2.5"}, "limit: '2.5' is not a whole number"),
])
def test_a_bad_parameter_is_named(query: dict[str, str], message: str) -> None:
    with pytest.raises(BadParameter) as caught:
        parse_query(query)
    assert str(caught.value).startswith(message)
    assert isinstance(caught.value, ValueError)


def test_a_long_bad_value_is_quoted_shortened() -> None:
    with pytest.raises(BadParameter) as caught:
        parse_query({"limit": "9" * 30 + "x" * 100})
    assert str(caught.value) == f"limit: {('9' * 30 + 'x' * 10)!r} is not a whole number"


def test_an_unknown_parameter_is_refused_as_on_every_route() -> None:
    with pytest.raises(BadParameter) as caught:
        parse_query({"colour": "red"})
    assert str(caught.value) == ("unknown query parameter 'colour'; known: limit, since, "
                                 "timeout")


@pytest.mark.parametrize("raw", ["1_000", " 7 ", "1e1", "\u0661", "+3"])
def test_only_ascii_digits_are_a_whole_number(raw: str) -> None:
    with pytest.raises(BadParameter, match="is not a whole number"):
        parse_query({"since": raw})


def test_the_largest_sequence_numbers_are_taken_exactly() -> None:
    assert parse_query({"since": str(2**63 - 1)})[0] == 2**63 - 1
    assert parse_query({"since": str(2**53 + 1)})[0] == 2**53 + 1
