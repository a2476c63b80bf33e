"""mpi_launch.hostlist: Slurm hostlist expressions, expanded and compressed (stdlib only)."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mpi_launch.hostlist import MAX_HOSTS, SLURM_MAX_RANGE, HostlistError, compress, expand


@pytest.mark.parametrize(
    ("expr", "hosts"),
    [
        ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
        ("rack[1-2]-n[1-3]", ["rack1-n1", "rack1-n2", "rack1-n3",
                              "rack2-n1", "rack2-n2", "rack2-n3"]),
        ("a[1-2],b[3-4]", ["a1", "a2", "b3", "b4"]),
        ("gpu[1-2],cpu[01-02],login", ["gpu1", "gpu2", "cpu01", "cpu02", "login"]),
        ("n[3,1-2]", ["n3", "n1", "n2"]),           # order kept, as scontrol does
        ("n[1,1]", ["n1", "n1"]),                   # duplicates kept
        ("n[08-10]", ["n08", "n09", "n10"]),        # width of lo pads the range
        ("n[9-011]", ["n9", "n10", "n11"]),
        ("n[1-010]", [f"n{i}" for i in range(1, 11)]),
        ("n[01-02,5]", ["n01", "n02", "n5"]),       # each range has its own width
        ("n[1-2]-[3-4]", ["n1-3", "n1-4", "n2-3", "n2-4"]),
        ("p[01-02]q[1-2]", ["p01q1", "p01q2", "p02q1", "p02q2"]),
        # Three or more groups: scontrol's order (last fastest, then first, second, ...).
        ("x[1-2]-y[3-4]-z[5-6]", ["x1-y3-z5", "x1-y3-z6", "x2-y3-z5", "x2-y3-z6",
                                  "x1-y4-z5", "x1-y4-z6", "x2-y4-z5", "x2-y4-z6"]),
        ("a[1-2]b[1-2]c[1-2]d[1]", ["a1b1c1d1", "a2b1c1d1", "a1b2c1d1", "a2b2c1d1",
                                    "a1b1c2d1", "a2b1c2d1", "a1b2c2d1", "a2b2c2d1"]),
        ("[1-3]", ["1", "2", "3"]),
        ("a,b c\td", ["a", "b", "c", "d"]),
        ("x1,,x2,", ["x1", "x2"]),
        ("n[1-2].ib", ["n1.ib", "n2.ib"]),          # text after a bracket (Flux, python-hostlist)
        ("job-node-0-[0-1].job", ["job-node-0-0.job", "job-node-0-1.job"]),
        ("", []),
    ],
)
def test_expand(expr: str, hosts: list[str]) -> None:
    assert expand(expr) == hosts


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("node[1-", "unclosed bracket at position 4"),
        ("node[1-2", "unclosed bracket"),
        ("node]", "unmatched ']' at position 4"),
        ("n[[1]]", "nested '['"),
        ("n[]", "empty brackets"),
        ("n[a-b]", "bad range 'a-b'"),
        ("n[1,,2]", "bad range ''"),
        ("n[1-]", "bad range '1-'"),
        ("n[-3]", "bad range '-3'"),
        ("n[ 1-2]", "bad range ' 1-2'"),
        ("n[5-3]", "range '5-3' goes backwards"),
        ("n[1-99999999]", f"more than {MAX_HOSTS} hosts"),
        ("a[1-3000]b[1-3000]", f"more than {MAX_HOSTS} hosts"),
    ],
)
def test_expand_errors_name_the_source_and_the_value(expr: str, reason: str) -> None:
    with pytest.raises(HostlistError) as info:
        expand(expr, source="SLURM_JOB_NODELIST")
    message = str(info.value)
    assert message.startswith(f"SLURM_JOB_NODELIST={expr!r}: ")
    assert reason in message


def test_error_message_is_the_documented_one() -> None:
    with pytest.raises(HostlistError) as info:
        expand("node[1-", source="SLURM_JOB_NODELIST")
    assert str(info.value) == "SLURM_JOB_NODELIST='node[1-': unclosed bracket at position 4"
    assert info.value.source == "SLURM_JOB_NODELIST"
    assert info.value.reason == "unclosed bracket at position 4"


def test_long_values_are_shortened_in_messages() -> None:
    expr = "n[" + ",".join(str(i) for i in range(5000)) + ",x]"
    with pytest.raises(HostlistError) as info:
        expand(expr)
    assert len(str(info.value)) < 300
    assert f"({len(expr)} characters)" in str(info.value)


@pytest.mark.parametrize(
    ("hosts", "expr"),
    [
        (["node01", "node02", "node03", "node04", "node07"], "node[01-04,07]"),
        (["n3", "n1", "n2"], "n[3,1-2]"),
        (["n1", "n2", "n2", "n3"], "n[1-2,2-3]"),
        (["n01", "n02", "n5"], "n[01-02,5]"),
        (["n9", "n10"], "n[9-10]"),
        (["n09", "n10"], "n[09-10]"),
        (["n099", "n100"], "n[099-100]"),
        (["n8", "n9", "n10", "n011"], "n[8-10,011]"),
        (["n1", "n01"], "n[1,01]"),
        (["a0111", "a112"], "a[0111,112]"),
        (["a99", "a0100"], "a[99,0100]"),
        (["a1", "a2", "b1", "b2", "a3"], "a[1-2],b[1-2],a3"),
        (["n1-ib", "n2-ib"], "n1-ib,n2-ib"),  # Slurm reads no text after the last bracket
        (["login", "n1", "n2"], "login,n[1-2]"),
        (["1", "2", "3"], "[1-3]"),
        (["x"], "x"),
        (["n7"], "n7"),
        ([], ""),
    ],
)
def test_compress_matches_scontrol_show_hostlist(hosts: list[str], expr: str) -> None:
    # Expected values are what `scontrol show hostlist` (Slurm 22.05) prints.
    assert compress(hosts) == expr
    assert expand(expr) == hosts


def test_compress_splits_ranges_slurm_would_reject() -> None:
    hosts = [f"n{i:06d}" for i in range(1, 100_001)]
    expr = compress(hosts)
    assert expr == "n[000001-065536,065537-100000]"
    assert expand(expr) == hosts
    assert compress(["n1", "n2", "n3", "n4", "n5"], max_range=2) == "n[1-2,3-4,5]"
    assert SLURM_MAX_RANGE == 65536


@pytest.mark.parametrize("bad", [["a", ""], ["a,b"], ["n[1]"], ["a b"], ["x]"]])
def test_compress_rejects_names_no_expression_can_hold(bad: list[str]) -> None:
    with pytest.raises(HostlistError):
        compress(bad, source="hosts")


def test_100k_nodes_well_under_a_second() -> None:
    expr = "n[000001-100000]"
    start = time.perf_counter()
    hosts = expand(expr)
    middle = time.perf_counter()
    compress(hosts)
    end = time.perf_counter()
    assert len(hosts) == 100_000
    # Measured about 0.07 s and 0.1 s; the bound leaves room for slow CI machines.
    assert middle - start < 1.0
    assert end - middle < 1.0


# --------------------------------------------------------------------------- properties

_prefix = st.text(alphabet="abcxyz-", min_size=1, max_size=4)
_width = st.integers(min_value=1, max_value=4)


@st.composite
def host_names(draw: st.DrawFn) -> str:
    prefix = draw(_prefix)
    if draw(st.booleans()):
        return prefix
    number = draw(st.integers(min_value=0, max_value=2000))
    width = draw(_width)
    return f"{prefix}{number:0{width}d}"


@st.composite
def sorted_unique_hosts(draw: st.DrawFn) -> list[str]:
    """Realistic node lists: a few prefixes, padded numbers, gaps; sorted and unique."""
    groups = draw(st.lists(st.tuples(_prefix, _width,
                                     st.sets(st.integers(min_value=0, max_value=300),
                                             max_size=40)),
                           min_size=1, max_size=4))
    hosts = {f"{p}{n:0{w}d}" for p, w, numbers in groups for n in numbers}
    return sorted(hosts)


@st.composite
def expressions(draw: st.DrawFn) -> str:
    """Valid expressions: items with up to two bracket groups, text between them."""
    items = []
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        item = draw(_prefix)
        for _ in range(draw(st.integers(min_value=0, max_value=2))):
            ranges = []
            for _ in range(draw(st.integers(min_value=1, max_value=3))):
                lo = draw(st.integers(min_value=0, max_value=120))
                hi = lo + draw(st.integers(min_value=0, max_value=12))
                width = draw(_width)
                ranges.append(f"{lo:0{width}d}" if lo == hi and draw(st.booleans())
                              else f"{lo:0{width}d}-{hi}")
            item += "[" + ",".join(ranges) + "]" + draw(st.sampled_from(["", "-", "x"]))
        items.append(item)
    return ",".join(items)


@given(sorted_unique_hosts())
def test_expand_of_compress_gives_the_sorted_unique_hosts_back(hosts: list[str]) -> None:
    assert expand(compress(hosts)) == hosts


@given(st.lists(host_names(), max_size=60))
def test_expand_of_compress_gives_any_host_list_back(hosts: list[str]) -> None:
    assert expand(compress(hosts)) == hosts


@given(expressions())
def test_compress_of_expand_round_trips(expr: str) -> None:
    hosts = expand(expr)
    canonical = compress(hosts)
    assert expand(canonical) == hosts
    assert compress(expand(canonical)) == canonical


@settings(max_examples=50)
@given(expressions())
def test_expand_agrees_with_python_hostlist_on_sorted_input(expr: str) -> None:
    import hostlist  # python-hostlist, a dependency of the daemon
    ours = expand(expr)
    # python-hostlist sorts and dedups inside brackets; compare as sorted multisets of
    # the names it can produce (it reads the same grammar).
    theirs = hostlist.expand_hostlist(expr)
    assert sorted(set(ours)) == sorted(set(theirs))
