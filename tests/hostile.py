"""The hostile-input suite's budget, seed and strategies (docs/testing.md, "Hostile input").

Budget: every test of the suite runs ``weight x`` the ``max_examples`` of the active
profile (:func:`cases`). Profiles: ``hostile-ci`` (the default under ``CI=true``:
1,000 per weight; the weights add up to 22.2 — API 11.5, TrainJob files 4, #SBATCH 6,
the sample against a real daemon 0.7 — so a CI run tries about 22,000 cases in about
90 s of CPU) and ``hostile-dev`` (50 per weight, the default elsewhere).
``HOSTILE_PROFILE=ci|dev`` chooses one explicitly.

Seed: one per run, printed in pytest's header (tests/conftest.py). Replay a failure
with the seed and profile it printed, e.g.::

    HOSTILE_SEED=123 HOSTILE_PROFILE=ci .venv/bin/pytest tests/unit/test_api_fuzz.py -k bodies

Hypothesis also prints the falsifying example and a ``@reproduce_failure`` blob.
"""

from __future__ import annotations

import json
import os
import random
import signal
import string
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import quote

from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st

settings.register_profile(
    "hostile-ci",
    max_examples=1000,
    deadline=None,  # time is bounded per case by the tests' own timeouts
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much],
)
settings.register_profile("hostile-dev", settings.get_profile("hostile-ci"), max_examples=50)

PROFILE = "hostile-" + (os.environ.get("HOSTILE_PROFILE")
                        or ("ci" if os.environ.get("CI") == "true" else "dev"))
SEED = int(os.environ.get("HOSTILE_SEED") or random.SystemRandom().getrandbits(32))
#: Seconds one case may take (a request, a parse) before it counts as a hang.
CASE_TIMEOUT = 10.0

F = TypeVar("F", bound=Callable[..., Any])


def cases(weight: float) -> Callable[[F], F]:
    """Run a test ``weight x`` the profile's examples, from the run's seed."""
    profile = settings.get_profile(PROFILE)
    count = max(1, round(profile.max_examples * weight))

    def wrap(test: F) -> F:
        return seed(SEED)(settings(profile, max_examples=count)(test))

    return wrap


@contextmanager
def within_case_timeout(seconds: float = CASE_TIMEOUT) -> Iterator[None]:
    """Fail a synchronous case that runs past ``seconds`` (SIGALRM: main thread only)."""
    def expired(_sig: int, _frame: Any) -> None:
        raise TimeoutError(f"a case ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- scalars --------------------------------------------------------------------------

#: Any code point: lone surrogates (what a non-UTF-8 byte decodes to), NUL, controls.
ANY_CHAR = st.characters(codec=None, exclude_categories=())
HOSTILE_WORDS = [
    "", " ", "\x00", "a\x00b", "\ud800", "\udcff", "\n", "\r\n", "../../etc/passwd", "%00",
    "$(touch /tmp/x)", "`id`", "'", '"', "\\", "NaN", "Infinity", "1e999", "-1", "0",
    "99999999999999999999999", "²", "\u0661\u0662", "ä", "名前", "\u202e", "x" * 300, "plain",
    "Running", "all", "ALL", "true", "yes", "slurm", "kubernetes", "default", "kube-system",
    "hpc-bridge.io/backend", "hpc-bridge.io/scheduling",
]
TEXT = st.one_of(st.sampled_from(HOSTILE_WORDS), st.text(max_size=12),
                 st.text(alphabet=ANY_CHAR, max_size=12))
NUMBERS = st.one_of(
    st.integers(min_value=-5, max_value=10),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([2**63 - 1, 2**63, -(2**63) - 1, 10**30, 100_000, 100_001]),
    st.floats(),  # NaN and infinities included: JSON has neither
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)), max_leaves=12)
#: Text a valid job may hold anywhere (no NUL, no lone surrogates).
SAFE_TEXT = st.text(alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
                    max_size=12)
DNS_LABEL = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,14}[a-z0-9])?\Z")
SCHEDULING_KEYS = ["job_name", "partition", "account", "qos", "time_limit_minutes", "ntasks",
                   "ntasks_per_node", "cpus_per_task", "gpus_per_node", "mem_per_node_mb",
                   "output", "error", "chdir", "exclusive", "switches",
                   "switches_wait_minutes", "export", "nodelist", "exclude", "constraint", "x"]
RUNTIMES = ["plain", "torch-distributed", "mpi-distributed", "jax-distributed",
            "deepspeed-distributed", "xgboost-distributed"]


# --- TrainJob documents ---------------------------------------------------------------

@st.composite
def trainjobs(draw: st.DrawFn) -> dict[str, Any]:
    """A TrainJob the bridge should admit (give or take a name collision)."""
    meta: dict[str, Any] = {}
    if draw(st.booleans()):
        meta["name"] = draw(DNS_LABEL)
    if draw(st.booleans()):
        meta["namespace"] = draw(st.sampled_from(["default", "team-a"]))
    annotations: dict[str, str] = {}
    if draw(st.booleans()):
        annotations["hpc-bridge.io/scheduling"] = json.dumps(draw(st.fixed_dictionaries(
            {}, optional={"partition": st.sampled_from(["debug", "batch"]),
                          "time_limit_minutes": st.integers(1, 600),
                          "job_name": st.text(string.ascii_letters, min_size=1, max_size=8)})))

    if draw(st.booleans()):
        annotations["note"] = draw(SAFE_TEXT)
    if annotations:
        meta["annotations"] = annotations
    trainer: dict[str, Any] = {
        "command": draw(st.lists(st.text(string.printable, max_size=10), min_size=1,
                                 max_size=3)),
        "numNodes": draw(st.integers(1, 4)),
    }
    if draw(st.booleans()):
        trainer["env"] = [{"name": n, "value": v} for n, v in draw(st.dictionaries(
            st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,8}\Z"), SAFE_TEXT,
            max_size=3)).items()]
    if draw(st.booleans()):
        trainer["numProcPerNode"] = draw(st.one_of(st.integers(1, 8),
                                                   st.sampled_from(["auto", "cpu", "2"])))
    if draw(st.booleans()):
        trainer["resourcesPerNode"] = {"limits": {"cpu": draw(st.sampled_from(["1", 2, "500m"])),
                                                  "memory": "1Gi"}}
    doc: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": meta,
        "spec": {"runtimeRef": {"name": draw(st.sampled_from(RUNTIMES))}, "trainer": trainer},
    }
    if draw(st.booleans()):
        doc["spec"]["suspend"] = draw(st.booleans())
    return doc


def _paths(value: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _paths(item, (*path, i))
    return found


def _set(doc: Any, path: tuple[str | int, ...], value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value
    return doc


def _delete(doc: Any, path: tuple[str | int, ...]) -> Any:
    if not path:
        return doc
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    del parent[path[-1]]
    return doc


@st.composite
def mutated_trainjobs(draw: st.DrawFn) -> Any:
    """A TrainJob with scheduling options of any value (or not JSON) or any back end
    named, sometimes, and up to three mutations anywhere: a value replaced by any JSON
    value (wrong types at any depth, huge or non-finite numbers, NUL, lone surrogates),
    a key deleted, an unknown key added, a value wrapped in a list."""
    doc: Any = draw(trainjobs())
    annotations = doc["metadata"].setdefault("annotations", {})
    if draw(st.integers(0, 3)) == 0:  # options of any value, or not JSON at all
        annotations["hpc-bridge.io/scheduling"] = draw(st.one_of(TEXT, st.builds(
            json.dumps, st.dictionaries(st.sampled_from(SCHEDULING_KEYS), JSON, max_size=3))))
    if draw(st.integers(0, 5)) == 0:
        annotations["hpc-bridge.io/backend"] = draw(TEXT)
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        op = draw(st.sampled_from(["replace", "delete", "add", "wrap"]))
        if op == "replace":
            doc = _set(doc, path, draw(JSON))
        elif op == "delete":
            doc = _delete(doc, path)
        elif op == "wrap":
            doc = _set(doc, path, [_get(doc, path)])
        else:
            target = _get(doc, path)
            if isinstance(target, dict):
                target[draw(TEXT)] = draw(JSON)
    return doc


def _get(doc: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


# --- requests ------------------------------------------------------------------------

def assert_refused_or_ok(status: int, body: bytes, ctype: str) -> Any:
    """Never a 5xx; a 4xx is JSON ``{"error": "<message>"}``. Returns the JSON body."""
    assert status < 500, (status, body[:500])
    if status >= 400:
        assert ctype == "application/json", (status, ctype, body[:200])
        error = json.loads(body)["error"]
        assert isinstance(error, str) and error.strip(), body
        return None
    return json.loads(body) if ctype == "application/json" else body


def quoted(text: str) -> str:
    """Percent-encoded UTF-8, lone surrogates as the invalid bytes they stand for."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


REF_ROUTES = [("GET", ""), ("POST", "/cancel"), ("DELETE", ""), ("POST", "/suspend"),
              ("POST", "/resume"), ("GET", "/log")]
QUERY_KEYS = st.one_of(st.sampled_from(["namespace", "stream", "offset", "follow", "states",
                                        "user", "x"]), TEXT)
QUERY_VALUES = st.one_of(st.sampled_from(["stdout", "stderr", "0", "1", "-1", "1_0", " 5",
                                          "\u0661", "9" * 30, "true", "maybe", "default"]),
                         TEXT)
QUERIES = st.lists(st.tuples(QUERY_KEYS, QUERY_VALUES), max_size=3)


def follows(pairs: list[tuple[str, str]]) -> bool:
    """Whether a log request with this query follows the output (a stream that lasts
    until the job ends: only its status and headers can be awaited)."""
    return any(k == "follow" and v.lower() in ("1", "true", "yes") for k, v in pairs)


def url_query(pairs: list[tuple[str, str]]) -> str:
    return ("?" + "&".join(f"{quoted(k)}={quoted(v)}" for k, v in pairs)) if pairs else ""


NEST = "\u0001nest\u0001"


@st.composite
def raw_bodies(draw: st.DrawFn) -> bytes:
    """Bytes a client may send as a TrainJob: mutated documents encoded every way
    (escaped or raw non-ASCII, surrogates as CESU-8), deep nesting spliced in anywhere,
    truncations, a BOM, random bytes, JSON that is not an object."""
    kind = draw(st.sampled_from(["doc", "doc", "nest", "cut", "bytes", "scalar", "bom"]))
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind == "scalar":
        return json.dumps(draw(JSON)).encode()
    doc = draw(mutated_trainjobs())
    if kind == "nest":
        doc = _set(doc, draw(st.sampled_from(_paths(doc))), NEST)
    text = json.dumps(doc, ensure_ascii=draw(st.booleans()))
    if kind == "nest":
        depth = draw(st.one_of(st.integers(60, 70), st.integers(0, 3000),
                               st.just(100_000)))
        opener = draw(st.sampled_from(["[", '{"a":']))
        closer = "]" if opener == "[" else "}"
        text = text.replace(json.dumps(NEST), opener * depth + "1" + closer * depth, 1)
    raw = text.encode("utf-8", "surrogatepass")
    if kind == "cut":
        raw = raw[:draw(st.integers(0, len(raw)))]
    if kind == "bom":
        raw = b"\xef\xbb\xbf" + raw
    return raw
