"""mpi_launch.allocation: Slurm env, Flux R, JobSet pod and host lists become one Allocation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpi_launch.allocation import (
    Allocation,
    AllocationError,
    Host,
    detect_world,
    from_flux_r,
    from_host_list,
    from_jobset_env,
    from_slurm_env,
    jobset_allocation,
    parse_idset,
    parse_slurm_counts,
)

# RFC 20's example R (flux-framework/rfc data/spec_20/example1.json).
RFC20_EXAMPLE: dict[str, Any] = {
    "version": 1,
    "execution": {
        "R_lite": [{"rank": "19-22", "children": {"core": "0-47", "gpu": "0-7"}}],
        "nodelist": ["node[186-189]"],
        "nslots": 32,
        "starttime": 1676560542,
        "expiration": 1676562342,
    },
}


def slurm_batch(**extra: str) -> dict[str, str]:
    env = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node[01-04]",
           "SLURM_JOB_CPUS_PER_NODE": "72(x3),36", "SLURM_NODEID": "0",
           "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}
    env.update(extra)
    return env


# --------------------------------------------------------------------------- Slurm


def test_slurm_batch_script_reads_cpus_per_node() -> None:
    alloc = from_slurm_env(slurm_batch())
    assert alloc.world == "slurm" and alloc.job_id == "4242"
    assert alloc.hosts == (Host("node01", 72), Host("node02", 72), Host("node03", 72),
                           Host("node04", 36))
    assert alloc.node_rank == 0 and alloc.total_slots == 252
    # The batch script is no task of a step: SLURM_PROCID=0 there is not a rank.
    assert alloc.proc_rank is None and alloc.local_rank is None
    assert alloc.uniform_slots is None


def test_slurm_tasks_per_node_wins_over_cpus() -> None:
    alloc = from_slurm_env(slurm_batch(SLURM_TASKS_PER_NODE="2(x4)"))
    assert [h.slots for h in alloc.hosts] == [2, 2, 2, 2]


def test_slurm_step_uses_the_step_view_and_ranks() -> None:
    env = slurm_batch(SLURM_STEP_ID="3", SLURM_STEP_NODELIST="node[02-03]",
                      SLURM_STEP_TASKS_PER_NODE="4(x2)", SLURM_TASKS_PER_NODE="4(x2)",
                      SLURM_NODEID="1", SLURM_PROCID="6", SLURM_LOCALID="2",
                      SLURM_STEP_RESV_PORTS="12000-12003", SLURM_GPUS_PER_NODE="a100:4")
    alloc = from_slurm_env(env)
    assert alloc.names == ["node02", "node03"]
    assert alloc.this_host == Host("node03", 4, 4)
    assert (alloc.proc_rank, alloc.local_rank, alloc.step) == (6, 2, "3")
    assert alloc.resv_ports == (12000, 12001, 12002, 12003)


@pytest.mark.parametrize(
    ("value", "gpus"),
    [({"SLURM_GPUS_PER_NODE": "4"}, 4), ({"SLURM_GPUS_PER_NODE": "a100:2,v100:1"}, 3),
     ({"SLURM_GPUS_ON_NODE": "8"}, 8), ({}, 0)],
)
def test_slurm_gpus(value: dict[str, str], gpus: int) -> None:
    assert from_slurm_env(slurm_batch(**value)).hosts[0].gpus == gpus


@pytest.mark.parametrize(
    ("extra", "variable", "words"),
    [
        ({"SLURM_JOB_NODELIST": "node[1-"}, "SLURM_JOB_NODELIST", "unclosed bracket"),
        ({"SLURM_JOB_NODELIST": ","}, "SLURM_JOB_NODELIST", "names no hosts"),
        # The issue's own example: three counts for the four nodes of node[01-04].
        ({"SLURM_JOB_CPUS_PER_NODE": "72(x2),36"}, "SLURM_JOB_CPUS_PER_NODE",
         "gives 3 counts for 4 hosts"),
        ({"SLURM_TASKS_PER_NODE": "-2(x4)"}, "SLURM_TASKS_PER_NODE", "must be positive"),
        ({"SLURM_TASKS_PER_NODE": "0(x4)"}, "SLURM_TASKS_PER_NODE", "must be positive"),
        ({"SLURM_TASKS_PER_NODE": "2(x0),2(x4)"}, "SLURM_TASKS_PER_NODE", "must be positive"),
        ({"SLURM_TASKS_PER_NODE": "2(4)"}, "SLURM_TASKS_PER_NODE", "is not N or N(xM)"),
        ({"SLURM_TASKS_PER_NODE": "1(x999999999999)"}, "SLURM_TASKS_PER_NODE",
         "counts for 4 hosts"),
        ({"SLURM_NODEID": "4"}, "SLURM_NODEID", "outside the 4 nodes"),
        ({"SLURM_NODEID": "-1"}, "SLURM_NODEID", "non-negative integer"),
        ({"SLURM_GPUS_PER_NODE": "a100:many"}, "SLURM_GPUS_PER_NODE", "TYPE:COUNT"),
        ({"SLURM_STEP_ID": "0", "SLURM_STEP_RESV_PORTS": "99999"}, "SLURM_STEP_RESV_PORTS",
         "ports"),
        ({"SLURM_STEP_ID": "0", "SLURM_PROCID": "x"}, "SLURM_PROCID", "integer"),
    ],
)
def test_slurm_malformed_inputs_name_variable_and_value(
        extra: dict[str, str], variable: str, words: str) -> None:
    with pytest.raises(AllocationError) as info:
        from_slurm_env(slurm_batch(**extra))
    value = slurm_batch(**extra)[variable]
    assert str(info.value).startswith(f"{variable}={value!r}: ")
    assert words in str(info.value)


def test_slurm_missing_job_or_nodes() -> None:
    with pytest.raises(AllocationError, match=r"^SLURM_JOB_ID=unset: not in a Slurm job"):
        from_slurm_env({})
    with pytest.raises(AllocationError, match=r"^SLURM_JOB_NODELIST=unset"):
        from_slurm_env({"SLURM_JOB_ID": "1"})


# --------------------------------------------------------------------------- N(xM)


@st.composite
def run_length_lists(draw: st.DrawFn) -> tuple[list[int], str]:
    """A list of counts and one of the N(xM) spellings of it (runs may be split)."""
    runs = draw(st.lists(st.tuples(st.integers(min_value=1, max_value=500),
                                   st.integers(min_value=1, max_value=6)),
                         min_size=1, max_size=8))
    pieces = [f"{n}(x{m})" if m > 1 or draw(st.booleans()) else str(n) for n, m in runs]
    return [n for n, m in runs for _ in range(m)], ",".join(pieces)


def reference_counts(text: str) -> list[int]:
    """The obvious reading of Slurm's format, for comparison."""
    out: list[int] = []
    for piece in text.split(","):
        if "(x" in piece:
            n, m = piece[:-1].split("(x")
            out += [int(n)] * int(m)
        else:
            out.append(int(piece))
    return out


@given(run_length_lists())
def test_count_parser_agrees_with_a_simple_reference(case: tuple[list[int], str]) -> None:
    counts, text = case
    assert parse_slurm_counts(text, variable="V") == counts == reference_counts(text)
    assert parse_slurm_counts(text, variable="V", expected=len(counts)) == counts


@given(st.text(alphabet="0123456789(x),- ", max_size=12))
def test_count_parser_never_crashes_on_junk(text: str) -> None:
    try:
        counts = parse_slurm_counts(text, variable="V", expected=3)
    except AllocationError as e:
        assert str(e).startswith("V=")
    else:
        assert len(counts) == 3 and all(c > 0 for c in counts)


def test_count_examples() -> None:
    assert parse_slurm_counts("72(x2),36", variable="V") == [72, 72, 36]
    assert parse_slurm_counts("1", variable="V") == [1]


# --------------------------------------------------------------------------- Flux R


def test_flux_rfc20_example() -> None:
    alloc = from_flux_r(json.dumps(RFC20_EXAMPLE), job_id="f2oLkTLb", hostname="node188")
    assert alloc.world == "flux" and alloc.job_id == "f2oLkTLb"
    assert alloc.names == ["node186", "node187", "node188", "node189"]
    assert all(h.slots == 48 and h.gpus == 8 for h in alloc.hosts)
    assert alloc.node_rank == 2


def test_flux_ranks_map_in_order_across_entries_and_nodelists() -> None:
    r = {"version": 1, "execution": {
        "R_lite": [{"rank": "2", "children": {"core": "0-1"}},
                   {"rank": "0-1", "children": {"core": "0-3", "gpu": "0"}}],
        "nodelist": ["fluke[1-2]", "big"], "starttime": 0, "expiration": 0}}
    alloc = from_flux_r(r, job_id="f1", hostname="big.cluster.example")
    assert alloc.hosts == (Host("fluke1", 4, 1), Host("fluke2", 4, 1), Host("big", 2, 0))
    assert alloc.node_rank == 2  # matched by short name


def broken(path: str, value: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(json.dumps(RFC20_EXAMPLE))
    *parents, last = path.split(".")
    target = doc
    for p in parents:
        target = target[int(p)] if isinstance(target, list) else target[p]
    if value is KeyError:
        del target[last]
    elif isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return doc


@pytest.mark.parametrize(
    ("doc", "variable", "words"),
    [
        (broken("execution.nodelist", KeyError), "R.execution.nodelist", "missing"),
        (broken("execution.R_lite", KeyError), "R.execution.R_lite", "missing"),
        (broken("execution", KeyError), "R.execution", "missing"),
        (broken("version", 2), "R.version", "only version 1"),
        (broken("execution.R_lite.0.rank", KeyError), "R.execution.R_lite[0].rank", "missing"),
        (broken("execution.R_lite.0.children.core", KeyError),
         "R.execution.R_lite[0].children.core", "missing"),
        (broken("execution.R_lite.0.rank", "19-x"), "R.execution.R_lite[0].rank",
         "not an id or range"),
        (broken("execution.R_lite.0.rank", 19), "R.execution.R_lite[0].rank", "must be a str"),
        (broken("execution.R_lite.0.children.core", ""), "R.execution.R_lite[0].children.core",
         "no cores"),
        (broken("execution.nodelist.0", "node[186-"), "R.execution.nodelist[0]",
         "unclosed bracket"),
        (broken("execution.nodelist.0", "node[186-188]"), "R.execution.nodelist",
         "names 3 hosts for 4 ranks"),
        (broken("execution.R_lite", []), "R.execution.R_lite", "lists no ranks"),
        ("{not json", "R", "not JSON"),
        ("[1, 2]", "R", "must be a JSON object"),
    ],
)
def test_flux_malformed_r_names_the_field(doc: Any, variable: str, words: str) -> None:
    with pytest.raises(AllocationError) as info:
        from_flux_r(doc if isinstance(doc, str) else json.dumps(doc), job_id="f1",
                    hostname="node186")
    assert str(info.value).startswith(f"{variable}=")
    assert words in str(info.value)


def test_flux_duplicate_rank_and_unknown_host() -> None:
    doc = broken("execution.R_lite", [{"rank": "19-20", "children": {"core": "0"}},
                                      {"rank": "20-22", "children": {"core": "0"}}])
    with pytest.raises(AllocationError, match="rank 20 appears twice"):
        from_flux_r(doc, job_id="f1", hostname="node186")
    with pytest.raises(AllocationError, match=r"^hostname='elsewhere': is not one of"):
        from_flux_r(RFC20_EXAMPLE, job_id="f1", hostname="elsewhere")
    assert from_flux_r(RFC20_EXAMPLE, job_id="f1", node_rank=3).node_rank == 3


def test_idsets() -> None:
    assert parse_idset("0-3,5", variable="V") == [0, 1, 2, 3, 5]
    assert parse_idset("[7,1-2]", variable="V") == [1, 2, 7]
    assert parse_idset("", variable="V") == []
    with pytest.raises(AllocationError, match="goes backwards"):
        parse_idset("3-1", variable="V")


# --------------------------------------------------------------------------- JobSet


def test_jobset_pod_gets_stable_dns_names() -> None:
    env = {"JOB_COMPLETION_INDEX": "1", "JOBSET_NAME": "llama", "PET_NNODES": "3",
           "PET_NPROC_PER_NODE": "4", "JOBSET_GPUS_PER_NODE": "4"}
    alloc = from_jobset_env(env)
    assert alloc.world == "jobset" and alloc.job_id == "llama" and alloc.node_rank == 1
    assert alloc.names == ["llama-node-0-0.llama", "llama-node-0-1.llama",
                           "llama-node-0-2.llama"]
    assert alloc.this_host == Host("llama-node-0-1.llama", 4, 4)


def test_jobset_explicit_layout_and_hostname_fallback() -> None:
    alloc = from_jobset_env({"JOB_COMPLETION_INDEX": "0", "JOBSET_NAME": "js",
                             "JOBSET_REPLICATED_JOB": "worker", "JOBSET_JOB_INDEX": "2",
                             "JOBSET_SUBDOMAIN": "svc", "JOBSET_NNODES": "2",
                             "JOBSET_NPROC_PER_NODE": "8"})
    assert alloc.names == ["js-worker-2-0.svc", "js-worker-2-1.svc"]
    derived = from_jobset_env({"JOB_COMPLETION_INDEX": "1", "HOSTNAME": "my-job-node-0-1",
                               "PET_NNODES": "2", "PET_NPROC_PER_NODE": "auto"})
    assert derived.names == ["my-job-node-0-0.my-job", "my-job-node-0-1.my-job"]
    assert derived.hosts[0].slots == 1
    assert jobset_allocation("a", nodes=1, slots=2, pod_index=0).names == ["a-node-0-0.a"]


@pytest.mark.parametrize(
    ("env", "variable", "words"),
    [
        ({"JOBSET_NAME": "js", "PET_NNODES": "2"}, "JOB_COMPLETION_INDEX", "Indexed Job"),
        ({"JOB_COMPLETION_INDEX": "2", "JOBSET_NAME": "js", "PET_NNODES": "2"},
         "JOB_COMPLETION_INDEX", "outside the 2 node pods"),
        ({"JOB_COMPLETION_INDEX": "0", "JOBSET_NAME": "js"}, "JOBSET_NNODES", "needed"),
        ({"JOB_COMPLETION_INDEX": "0", "JOBSET_NAME": "js", "JOBSET_NNODES": "0"},
         "JOBSET_NNODES", "at least 1"),
        ({"JOB_COMPLETION_INDEX": "0", "JOBSET_NAME": "js", "PET_NNODES": "-2"},
         "PET_NNODES", "non-negative"),
        ({"JOB_COMPLETION_INDEX": "0", "JOBSET_NAME": "js", "PET_NNODES": "2",
          "PET_NPROC_PER_NODE": "0"}, "PET_NPROC_PER_NODE", "at least 1"),
        ({"JOB_COMPLETION_INDEX": "0", "HOSTNAME": "laptop", "PET_NNODES": "2"},
         "JOBSET_NAME", "unset"),
    ],
)
def test_jobset_malformed(env: dict[str, str], variable: str, words: str) -> None:
    with pytest.raises(AllocationError) as info:
        from_jobset_env(env)
    assert str(info.value).startswith(f"{variable}=")
    assert words in str(info.value)


# --------------------------------------------------------------------------- local, world


def test_host_list() -> None:
    alloc = from_host_list("a:2,b:2", node_rank=1)
    assert alloc.hosts == (Host("a", 2), Host("b", 2)) and alloc.this_host.name == "b"
    assert from_host_list("n[1-2]:8,login").hosts == (Host("n1", 8), Host("n2", 8),
                                                      Host("login", 1))


@pytest.mark.parametrize(("spec", "words"), [("a:0", "positive"), ("a:-1", "positive"),
                                              ("a:x", "positive"), ("n[1-:2", "unclosed"),
                                              (",", "names no hosts")])
def test_host_list_errors(spec: str, words: str) -> None:
    with pytest.raises(AllocationError) as info:
        from_host_list(spec)
    assert str(info.value).startswith(f"--hosts={spec!r}: ") and words in str(info.value)


@pytest.mark.parametrize(
    ("env", "world"),
    [({"SLURM_JOB_ID": "1"}, "slurm"), ({"SLURM_JOB_ID": "1", "FLUX_JOB_ID": "f1"}, "flux"),
     ({"JOB_COMPLETION_INDEX": "0", "JOBSET_NAME": "js", "SLURM_JOB_ID": "1"}, "jobset"),
     ({"JOB_COMPLETION_INDEX": "0"}, "local"), ({}, "local")],
)
def test_detect_world(env: dict[str, str], world: str) -> None:
    assert detect_world(env) == world


def test_allocation_invariants() -> None:
    with pytest.raises(ValueError, match="at least one host"):
        Allocation(world="local", job_id="j", hosts=())
    with pytest.raises(ValueError, match="node rank 2"):
        Allocation(world="local", job_id="j", hosts=(Host("a", 1),), node_rank=2)
    with pytest.raises(AllocationError, match="--nproc-per-node='0'"):
        from_host_list("a").with_slots(0)
    assert from_host_list("a:3,b").with_slots(2).total_slots == 4


# --------------------------------------------------------------------------- never a traceback

_junk = st.one_of(st.text(max_size=20), st.sampled_from(
    ["node[1-", "n[1-2]", "2(x2)", "-1", "0", "1(x0)", "²", "1" * 40, "a100:x", "3-1"]))


@given(st.dictionaries(st.sampled_from(
    ["SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE",
     "SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_ID", "SLURM_GPUS_PER_NODE",
     "SLURM_GPUS_ON_NODE", "SLURM_STEP_RESV_PORTS", "SLURM_STEP_NODELIST"]), _junk))
def test_slurm_reader_fails_only_with_allocation_error(env: dict[str, str]) -> None:
    try:
        from_slurm_env(env)
    except AllocationError as e:
        assert "=" in str(e)


_json = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), _junk),
                     lambda inner: st.one_of(st.lists(inner, max_size=3),
                                             st.dictionaries(st.sampled_from(
                                                 ["version", "execution", "R_lite", "nodelist",
                                                  "rank", "children", "core", "gpu"]),
                                                 inner, max_size=4)),
                     max_leaves=12)


@given(_json)
def test_flux_reader_fails_only_with_allocation_error(doc: Any) -> None:
    try:
        from_flux_r(json.dumps(doc), job_id="f", node_rank=0)
    except AllocationError as e:
        assert str(e).startswith("R")


@given(st.dictionaries(st.sampled_from(
    ["JOB_COMPLETION_INDEX", "JOBSET_NAME", "JOBSET_NNODES", "PET_NNODES", "HOSTNAME",
     "PET_NPROC_PER_NODE", "JOBSET_JOB_INDEX", "JOBSET_GPUS_PER_NODE"]), _junk))
def test_jobset_reader_fails_only_with_allocation_error(env: dict[str, str]) -> None:
    try:
        from_jobset_env(env)
    except AllocationError as e:
        assert "=" in str(e)
