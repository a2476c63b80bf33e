"""The TrainJob model reads and writes Kubeflow Trainer's v1alpha1 documents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.model import (
    ANN_SCHEDULING,
    TrainJob,
    ValidationError,
    dump_yaml,
    ensure_identity,
    load_document,
    load_trainjob,
)

FIXTURES = Path(__file__).parent / "fixtures" / "trainjobs"


def minimal(**trainer: object) -> dict[str, object]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "t1"},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"command": ["python", "train.py"], **trainer}},
    }


def test_upstream_document_round_trips_unchanged() -> None:
    text = (FIXTURES / "upstream-torch.yaml").read_text()
    original = yaml.safe_load(text)
    job = load_trainjob(text)
    assert job.spec.trainer is not None
    assert job.spec.trainer.num_nodes == 2
    assert job.spec.runtime_ref.kind == "ClusterTrainingRuntime"  # defaulted
    out = job.to_dict()
    # Everything upstream wrote survives, including fields the bridge ignores.
    assert out["spec"]["initializer"] == original["spec"]["initializer"]
    assert out["spec"]["podSpecOverrides"] == original["spec"]["podSpecOverrides"]
    assert out["spec"]["trainer"] == original["spec"]["trainer"]
    assert out["metadata"]["labels"] == original["metadata"]["labels"]
    # camelCase on the way out, and YAML <-> JSON agree.
    assert "runtimeRef" in out["spec"] and "runtime_ref" not in out["spec"]
    assert load_trainjob(dump_yaml(job)).to_dict() == out
    assert load_trainjob(json.dumps(out)).to_dict() == out


@pytest.mark.parametrize(
    ("patch", "field", "words"),
    [
        ({"numNodes": 0}, "spec.trainer.numNodes", "must be >= 1, got 0"),
        ({"numNodes": -3}, "spec.trainer.numNodes", "got -3"),
        ({"numProcPerNode": "many"}, "spec.trainer.numProcPerNode", "positive integer"),
        ({"env": [{"name": "1BAD", "value": "x"}]}, "spec.trainer.env[0].name", "invalid"),
        ({"env": [{"name": "A", "value": "x" * 200_000}]}, "spec.trainer.env[0].value",
         "longer than"),
        ({"resourcesPerNode": {"limits": {"cpu": "lots"}}},
         "spec.trainer.resourcesPerNode.limits", "invalid quantity"),
        ({"command": "python train.py"}, "spec.trainer.command", "list"),
    ],
)
def test_errors_name_the_field(patch: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(ValidationError) as err:
        load_trainjob(minimal(**patch))
    assert field in str(err.value)
    assert words in str(err.value)


def test_bad_names_and_kinds() -> None:
    doc = minimal()
    doc["metadata"] = {"name": "Bad_Name; rm -rf /"}
    with pytest.raises(ValidationError, match=r"metadata\.name: must be a DNS-1123 label"):
        load_trainjob(doc)
    with pytest.raises(ValidationError, match="kind: must be one of"):
        load_document({**minimal(), "kind": "PyTorchJob"})
    with pytest.raises(ValidationError, match="apiVersion"):
        load_trainjob({**minimal(), "apiVersion": "kubeflow.org/v1"})
    with pytest.raises(ValidationError, match=r"spec\.runtimeRef"):
        load_trainjob({**minimal(), "spec": {"trainer": {}}})


def test_malformed_yaml_names_the_line() -> None:
    with pytest.raises(ValidationError, match=r"job\.yaml:\d+:\d+: malformed YAML"):
        load_trainjob("kind: TrainJob\nspec:\n  a: [unclosed\nb: 1\n", "job.yaml")
    with pytest.raises(ValidationError, match="expected a mapping"):
        load_trainjob("- just\n- a list\n")


def test_scheduling_annotation_must_be_json() -> None:
    doc = minimal()
    doc["metadata"] = {"name": "t1", "annotations": {ANN_SCHEDULING: "{not json"}}
    with pytest.raises(ValidationError, match="not JSON"):
        load_trainjob(doc)


def test_ensure_identity_fills_only_what_is_missing() -> None:
    job = load_trainjob({**minimal(), "metadata": {}})
    ensure_identity(job, "research")
    assert job.metadata.uid and job.metadata.namespace == "research"
    assert job.metadata.name.startswith("tj-")
    named = ensure_identity(load_trainjob(minimal()))
    assert named.metadata.name == "t1"


text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)


@settings(max_examples=200, deadline=None)
@given(text)
def test_arbitrary_text_gives_validation_error_or_job(source: str) -> None:
    try:
        job = load_trainjob(source)
    except ValidationError:
        return
    assert isinstance(job, TrainJob)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=50).filter(lambda s: "\x00" not in s), max_size=5),
       st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,10}", fullmatch=True),
                       st.text(max_size=100).filter(lambda s: "\x00" not in s), max_size=5))
def test_hostile_strings_are_data(args: list[str], env: dict[str, str]) -> None:
    doc = minimal(args=args, env=[{"name": k, "value": v} for k, v in env.items()])
    job = load_trainjob(doc)
    again = load_trainjob(json.loads(json.dumps(job.to_dict())))
    assert again.spec.trainer is not None
    assert again.spec.trainer.args == args
    assert {e.name: e.value for e in again.spec.trainer.env or []} == env
