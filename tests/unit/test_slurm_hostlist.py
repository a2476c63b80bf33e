"""slurm_adapter.hostlist: Slurm hostlist expressions (expected values from scontrol)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_adapter.hostlist import HostlistError, compress, expand

# (expression, what `scontrol show hostnames` printed on Slurm 22.05)
SLURM_EXPANSIONS = [
    ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
    ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
    ("n1,n2,n3", ["n1", "n2", "n3"]),
    ("n[3,1,2],n1", ["n3", "n1", "n2", "n1"]),
    ("a[1-2],a[2-3]", ["a1", "a2", "a2", "a3"]),
    ("n[01-3]", ["n01", "n02", "n03"]),
    ("n[009-011]", ["n009", "n010", "n011"]),
    ("n1,,n2", ["n1", "n2"]),
    ("n1 n2", ["n1", "n2"]),
    ("[1-2]", ["1", "2"]),
    ("n-[1-2]", ["n-1", "n-2"]),
    ("x", ["x"]),
    ("", []),
]

# (host names, what `scontrol show hostlist` printed on Slurm 22.05)
SLURM_COMPRESSIONS = [
    (["n3", "n1", "n2", "n10"], "n[3,1-2,10]"),
    (["n1", "n3", "n2"], "n[1,3,2]"),
    (["a1", "b1", "a2"], "a1,b1,a2"),
    (["n1", "n1", "n2"], "n[1,1-2]"),
    (["n01", "n2", "n3"], "n[01,2-3]"),
    (["n9", "n10", "n11"], "n[9-11]"),
    (["n1x", "n2x"], "n1x,n2x"),
    (["a1b3", "a1b4", "a2b3", "a2b4"], "a1b[3-4],a2b[3-4]"),
    (["node1", "node2", "foo", "node3"], "node[1-2],foo,node3"),
    (["n001", "n002", "n01"], "n[001-002,01]"),
]


@pytest.mark.parametrize(("expression", "hosts"), SLURM_EXPANSIONS)
def test_expand_matches_slurm(expression: str, hosts: list[str]) -> None:
    assert expand(expression) == hosts


@pytest.mark.parametrize(("hosts", "expression"), SLURM_COMPRESSIONS)
def test_compress_matches_scontrol_show_hostlist(hosts: list[str], expression: str) -> None:
    assert compress(hosts) == expression


def test_compress_sorted_is_numeric_and_unique() -> None:
    assert compress(["n10", "n2", "n1", "n2"], sort=True) == "n[1-2,10]"
    assert compress(["node3", "foo", "node1", "node2"], sort=True) == "foo,node[1-3]"
    # Never text after a bracket: Slurm could not parse "n[1-2]x".
    assert compress(["n2x", "n1x"], sort=True) == "n1x,n2x"


def test_compress_empty() -> None:
    assert compress([]) == ""


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("node[1-", "unbalanced brackets"),
        ("node1-2]", "unbalanced brackets"),
        ("node[3-1]", "reversed range '3-1'"),
        ("node[1-2,9-4]", "reversed range '9-4'"),
        ("node[a-b]", "bad range 'a-b'"),
        ("node[]", "bad range ''"),
        ("node[1,]", "bad range ''"),
        ("n[[1]]", "nested brackets"),
        ("n[1-200000]", "too large"),
    ],
)
def test_malformed_expressions_name_the_expression_and_the_fault(expression: str,
                                                                 reason: str) -> None:
    with pytest.raises(HostlistError) as info:
        expand(expression)
    assert info.value.expression == expression
    assert reason in info.value.reason
    assert repr(expression) in str(info.value)


@pytest.mark.parametrize("bad", ["", "n[1]", "a,b", "a b", "x]"])
def test_compress_refuses_names_that_are_not_host_names(bad: str) -> None:
    with pytest.raises(HostlistError):
        compress(["n1", bad])


# --- properties ----------------------------------------------------------------------

prefixes = st.from_regex(r"[a-z][a-z\-]{0,5}", fullmatch=True)
host_names = st.one_of(
    st.builds(lambda p, n, w: f"{p}{n:0{w}d}", prefixes, st.integers(0, 1200),
              st.integers(1, 4)),
    prefixes,
    st.builds(lambda p, n, s: f"{p}{n}{s}", prefixes, st.integers(0, 99),
              st.from_regex(r"[a-z]{1,3}", fullmatch=True)),
)


@given(st.lists(host_names, max_size=40))
def test_expand_of_compress_is_the_identity(hosts: list[str]) -> None:
    """Order and duplicates survive, like scontrol show hostlist / hostnames."""
    assert expand(compress(hosts)) == hosts


@given(st.lists(host_names, max_size=40))
def test_sorted_compress_keeps_the_set(hosts: list[str]) -> None:
    expression = compress(hosts, sort=True)
    expanded = expand(expression)
    assert set(expanded) == set(hosts)
    assert len(expanded) == len(set(hosts))


ranges = st.builds(
    lambda lo, span, w: f"{lo:0{w}d}" + (f"-{lo + span:0{w}d}" if span else ""),
    st.integers(0, 300), st.integers(0, 20), st.integers(1, 3),
)
expressions = st.lists(
    st.builds(lambda p, rs: f"{p}[{','.join(rs)}]", prefixes, st.lists(ranges, min_size=1,
                                                                        max_size=4))
    | prefixes,
    min_size=1, max_size=5,
).map(",".join)


@given(expressions)
def test_compress_of_expand_keeps_the_hosts(expression: str) -> None:
    hosts = expand(expression)
    assert expand(compress(hosts)) == hosts
    assert set(expand(compress(hosts, sort=True))) == set(hosts)


@given(expressions | st.lists(host_names, max_size=40).map(compress))
def test_count_is_the_number_of_names_expand_gives(expression: str) -> None:
    """bridge.hostlist.count sizes an expression without expanding it (admission
    refuses --exclude naming more than 65536 hosts before making them)."""
    from bridge.hostlist import count

    assert count(expression) == len(expand(expression))
    assert count(f"{expression}, ,") == len(expand(expression))
