"""k8s_adapter.jobset: runtime patches applied to the JobSet, and the strategic merge
behind them (named lists merge by name, the rest is replaced)."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.backend import BackendRejected
from k8s_adapter.jobset import (
    JOB_ID_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    TRAINJOB_NAME_LABEL,
    UID_LABEL,
)
from k8s_adapter.jobset_merge import merge
from k8s_adapter.jobset_status import backend_job_from_jobset
from tests.unit.builders import IMAGE, UID
from tests.unit.jobset_helpers import (
    HOSTILE,
    INDEX_REF,
    container,
    env_of,
    pod,
    render,
    rjobs,
    trainjob,
)

# --------------------------------------------------------------------------- patches


def _patch(replicated: list[dict[str, Any]] | None = None,
           metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    template: dict[str, Any] = {}
    if metadata is not None:
        template["metadata"] = metadata
    if replicated is not None:
        template["spec"] = {"replicatedJobs": replicated}
    return {"manager": "tests.hpc-bridge.io", "trainingRuntimeSpec": {"template": template}}


def _pod_patch(rjob: str, pod_template: dict[str, Any]) -> dict[str, Any]:
    return {"name": rjob, "template": {"spec": {"template": pod_template}}}


def test_runtime_patch_pod_fields() -> None:
    toleration = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    patch = _patch([_pod_patch("node", {
        "metadata": {"labels": {"team": "a"}, "annotations": {"note": HOSTILE}},
        "spec": {"nodeSelector": {"topology.hpc-bridge.io/rack": "rack-1"},
                 "tolerations": [toleration]}})],
        metadata={"labels": {"js": "yes"}, "annotations": {"js-note": "1"}})
    body = render(trainjob(patches=[patch]))
    p = pod(body)
    assert p["metadata"]["labels"]["team"] == "a"
    assert p["metadata"]["labels"][UID_LABEL] == UID
    assert p["metadata"]["annotations"] == {"note": HOSTILE}
    assert p["spec"]["nodeSelector"] == {"topology.hpc-bridge.io/rack": "rack-1"}
    assert p["spec"]["tolerations"] == [toleration]
    assert p["spec"]["restartPolicy"] == "OnFailure"  # the rest of the pod is kept
    assert container(body)["image"] == IMAGE
    assert body["metadata"]["labels"]["js"] == "yes"
    assert body["metadata"]["annotations"]["js-note"] == "1"
    assert body["metadata"]["annotations"][UID_LABEL] == UID


def test_runtime_patch_reaches_only_the_named_replicated_job() -> None:
    patch = _patch([_pod_patch("launcher", {"spec": {"nodeSelector": {"role": "head"}}})])
    body = render(trainjob("mpi-distributed", nodes=3, command=["mpirun", "x"],
                           patches=[patch]))
    assert pod(body, "launcher")["spec"]["nodeSelector"] == {"role": "head"}
    assert "nodeSelector" not in pod(body, "node")["spec"]
    assert list(rjobs(body)) == ["launcher", "node"]


def test_runtime_patch_container_env_merges_by_name() -> None:
    patch = _patch([_pod_patch("node", {"spec": {"containers": [{
        "name": "node", "env": [{"name": "FOO", "value": "patched"},
                                {"name": "NEW", "value": "added"}]}]}})])
    body = render(trainjob(env={"FOO": "orig", "BAR": "kept"}, patches=[patch]))
    before = [e["name"] for e in container(render(trainjob(env={"FOO": "o", "BAR": "k"})))["env"]]
    items = container(body)["env"]
    assert [e["name"] for e in items] == [*before, "NEW"]  # order kept, new appended
    env = env_of(body)
    assert env["FOO"] == "patched" and env["BAR"] == "kept" and env["NEW"] == "added"
    assert env["PET_NODE_RANK"] == INDEX_REF
    assert container(body)["image"] == IMAGE and container(body)["command"]


def test_later_patches_win() -> None:
    first = _patch([_pod_patch("node", {"spec": {"nodeSelector": {"a": "1", "b": "1"}}})])
    second = _patch([_pod_patch("node", {"spec": {"nodeSelector": {"b": "2"}}})])
    body = render(trainjob(patches=[first, second]))
    assert pod(body)["spec"]["nodeSelector"] == {"a": "1", "b": "2"}


def test_identity_labels_cannot_be_overridden() -> None:
    evil = {UID_LABEL: "someone-else", MANAGED_BY_LABEL: "kueue", JOB_ID_LABEL: "1",
            TRAINJOB_NAME_LABEL: "other", "keep": "me"}
    patch = _patch([_pod_patch("node", {"metadata": {"labels": evil}})],
                   metadata={"labels": evil})
    body = render(trainjob(patches=[patch]))
    for labels in (body["metadata"]["labels"], pod(body)["metadata"]["labels"]):
        assert labels[UID_LABEL] == UID and labels[MANAGED_BY_LABEL] == MANAGED_BY_VALUE
        assert labels[JOB_ID_LABEL] == "42" and labels[TRAINJOB_NAME_LABEL] == "train"
        assert labels["keep"] == "me"
    # The result is still recognised as this job's.
    assert backend_job_from_jobset(body) is not None
    assert backend_job_from_jobset(body).job_uid == UID  # type: ignore[union-attr]
    # Its namespace is reported: the engine keeps a JobSet only in the job's own.
    assert backend_job_from_jobset(body).namespace == body["metadata"]["namespace"]  # type: ignore[union-attr]


def test_malformed_patch_template_is_refused() -> None:
    bad = {"trainingRuntimeSpec": {"template": ["not", "a", "mapping"]}}
    with pytest.raises(BackendRejected, match=r"spec\.runtimePatches\[1\]"):
        render(trainjob(patches=[_patch(), bad]))


@pytest.mark.parametrize(("template", "words"), [
    ({"spec": {"replicatedJobs": [{"name": ["node"]}]}}, "replicatedJobs[0] names ['node']"),
    ({"spec": {"replicatedJobs": [{"name": {"n": 1}}]}}, "replicatedJobs[0] names {'n': 1}"),
    ({"metadata": ["labels"]}, "template.metadata: must be a mapping"),
    ({"metadata": {"labels": ["a"]}}, "template.metadata.labels: must be a mapping"),
    ({"metadata": {"annotations": "a=b"}}, "template.metadata.annotations: must be a mapping"),
])
def test_a_patch_of_the_wrong_shape_is_refused_naming_where(template: dict[str, Any],
                                                            words: str) -> None:
    """A replicated job named by a list was a TypeError out of the name check, labels
    that are not a mapping one out of the merge (the back end's guard said "cannot be
    laid out", naming nothing); metadata that is not a mapping was ignored."""
    bad = {"manager": "m", "trainingRuntimeSpec": {"template": template}}
    with pytest.raises(BackendRejected, match=r"spec\.runtimePatches\[1\]") as info:
        render(trainjob(patches=[_patch(), bad]))
    assert words in str(info.value)


def test_render_does_not_modify_the_job() -> None:
    patch = _patch([_pod_patch("node", {"metadata": {"labels": {"a": "b"}},
                                        "spec": {"nodeSelector": {"x": "y"}}})],
                   metadata={"labels": {"c": "d"}})
    job = trainjob(patches=[patch])
    before = copy.deepcopy(job.to_dict())
    render(job)
    render(job)
    assert job.to_dict() == before


def test_render_does_not_modify_the_job_s_patches() -> None:
    patch = _patch([_pod_patch("node", {"metadata": {"labels": {"a": "b"}}})])
    job = trainjob(patches=[patch])
    before = copy.deepcopy(job.to_dict())
    render(job)
    assert job.to_dict() == before


def test_patch_of_unknown_replicated_job_is_refused_not_crashing() -> None:
    patch = _patch([{"name": "worker", "replicas": 2}])
    with pytest.raises(BackendRejected):
        render(trainjob(patches=[patch]))


# --------------------------------------------------------------------------- merge

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=5))
_keys = st.sampled_from(["a", "b", "env", "containers", "volumes", "name", "value", "x"])


def _json(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.lists(children, max_size=3),
                     st.dictionaries(_keys, children, max_size=4))


_values = st.recursive(_scalars, _json, max_leaves=12)
_mappings = st.dictionaries(_keys, _values, max_size=4)


@settings(max_examples=50, deadline=None)
@given(base=_mappings)
def test_merge_empty_patch_is_identity(base: dict[str, Any]) -> None:
    frozen = copy.deepcopy(base)
    assert merge(base, {}) == base
    assert base == frozen


@settings(max_examples=50, deadline=None)
@given(base=_mappings, patch=_mappings)
def test_merge_does_not_modify_its_inputs(base: dict[str, Any], patch: dict[str, Any]) -> None:
    b, p = copy.deepcopy(base), copy.deepcopy(patch)
    out = merge(base, patch)
    assert base == b and patch == p
    # Every key of the patch is in the result; keys only in base are kept as they were.
    assert set(out) == set(base) | set(patch)
    for k in set(base) - set(patch):
        assert out[k] == base[k]


_item_names = st.lists(st.sampled_from("abcdefgh"), unique=True, max_size=6)


@settings(max_examples=80, deadline=None)
@given(key=st.sampled_from(["env", "containers", "volumes", "replicatedJobs", "ports"]),
       base_names=_item_names, patch_names=_item_names, tag=st.integers())
def test_merge_named_lists(key: str, base_names: list[str], patch_names: list[str],
                           tag: int) -> None:
    base = {key: [{"name": n, "old": n} for n in base_names]}
    patch = {key: [{"name": n, "new": tag} for n in patch_names]}
    out = merge(base, patch)[key]
    new = [n for n in patch_names if n not in base_names]
    assert [i["name"] for i in out] == [*base_names, *new]
    for item in out:
        replaced = key == "env" and item["name"] in patch_names  # env items replace whole
        if item["name"] in base_names and not replaced:
            assert item["old"] == item["name"]
        if item["name"] in patch_names:
            assert item["new"] == tag
        if replaced:
            assert "old" not in item


def test_merge_replaces_unnamed_lists_and_scalars() -> None:
    base = {"tolerations": [{"key": "a"}], "args": ["x"], "n": 1, "m": {"k": 1}}
    out = merge(base, {"tolerations": [{"key": "b"}], "args": ["y"], "n": 2, "m": {"j": 2}})
    assert out == {"tolerations": [{"key": "b"}], "args": ["y"], "n": 2,
                   "m": {"k": 1, "j": 2}}


@pytest.mark.parametrize(("runtime", "spec", "words"), [
    ("torch-distributed", {"containers": [{"name": "node", "env": [{"name": ["x"]}]}]},
     "container 'node' env"),
    ("torch-distributed", {"containers": [{"name": "node", "volumeMounts": [{"name": 1}]}]},
     "container 'node' volumeMounts"),
    ("mpi-distributed", {"volumes": [{"name": {"a": 1}, "emptyDir": {}}]}, "pod volumes"),
    ("torch-distributed", {"containers": [{"name": ["node"]}]}, "pod containers"),
])
def test_a_patch_item_whose_name_is_not_a_string_is_refused_naming_the_list(
        runtime: str, spec: dict[str, Any], words: str) -> None:
    """Found by hypothesis: such a name reached merge's index of names as a key, and a
    list or mapping there was a TypeError out of render; the back end's guard turned it
    into "the JobSet cannot be laid out: TypeError: unhashable type", naming nothing."""
    patch = _patch([_pod_patch("node", {"spec": spec})])
    with pytest.raises(BackendRejected, match=re.escape(words) + " must be a list of named"):
        render(trainjob(runtime, command=["mpirun", "x"], patches=[patch]))


@pytest.mark.parametrize("spec", [
    {"containers": [{"name": "node", "env": None, "volumeMounts": None}]},
    {"containers": [{"name": "node", "env": [
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}]},
    {"initContainers": [{"name": "init", "image": "busybox"}]},
    {"containers": [{"name": "node", "ports": [{"containerPort": 8080}]}]},  # unnamed: valid
])
def test_lists_kubernetes_takes_are_not_refused(spec: dict[str, Any]) -> None:
    render(trainjob(patches=[_patch([_pod_patch("node", {"spec": spec})])]))


def test_merge_replaces_a_named_list_whose_names_are_not_all_strings() -> None:
    base = {"env": [{"name": "A", "value": "1"}], "volumes": [{"name": "v"}]}
    patch = {"env": [{"name": ["A"], "value": "2"}], "volumes": [{"name": {"v": 1}}]}
    assert merge(base, patch) == patch
