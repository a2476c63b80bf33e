"""Hostile TrainJob YAML/JSON through ``tbatch -f``'s path (:func:`trainjob_from_file`
over :func:`bridge.model.load_trainjob`): a TrainJob the API would take, or an
:class:`SbatchError` naming the file — never another exception or a hang
(tests/hostile.py: budget, seed)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from bridge.model import MAX_DEPTH, ValidationError, load_trainjob, parse_json_object
from bridge.sbatch import SbatchError, parse_tbatch, trainjob_from_file
from tests.hostile import (
    ANY_CHAR,
    JSON,
    cases,
    mutated_trainjobs,
    trainjobs,
    within_case_timeout,
)

SOURCE = "job.yaml"


def tbatch_f(text: str) -> None:
    """What ``tbatch -f job.yaml`` does with the file's text, with its checks."""
    try:
        with within_case_timeout():
            job = trainjob_from_file(parse_tbatch(["-f", SOURCE]), text)
    except SbatchError as exc:
        assert str(exc).startswith(f"tbatch: error: {SOURCE}"), str(exc)
        assert exc.message.strip()
        return
    # Accepted: the document the client sends is JSON the daemon decodes to the same job.
    body = json.dumps(job.to_dict(), allow_nan=False).encode()
    again = load_trainjob(parse_json_object(body), "request")
    assert again.to_dict() == job.to_dict()


HOSTILE_YAML = [
    "a: &a [1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    + "".join(f"c{i}: &c{i} [{', '.join([f'*{p}'] * 9)}]\n"
              for i, p in enumerate(["b"] + [f"c{j}" for j in range(7)]))
    + "kind: TrainJob\nspec: {runtimeRef: {name: plain}}\n",
    "spec: &s {runtimeRef: {name: plain}, x: *s}\n",
    "spec: " + "[" * 5000 + "]" * 5000 + "\n",
    "spec: " + "{a: " * 200 + "1" + "}" * 200 + "\n",
    "metadata: {labels: {a: !!binary aGVsbG8=}}\nspec: {runtimeRef: {name: plain}}\n",
    "metadata: {labels: !!set {a, b}}\nspec: {runtimeRef: {name: plain}}\n",
    "metadata: !!python/object:os.system {}\n",
    "metadata: {generation: " + "1" * 5000 + "}\n",
    "metadata: {generation: 0x" + "f" * 40 + "}\n",
    "metadata: {creationTimestamp: !!timestamp 2024-01-01}\nspec: {}\n",
    "metadata: {1: 2}\nspec: {runtimeRef: {name: plain}}\n",
    "metadata: {name: a}\n---\nmetadata: {name: b}\n",
    "metadata: {name: \"\\ud800\"}\n",
    "spec: {runtimeRef: {name: plain}, trainer: {numNodes: .inf}}\n",
    "spec: {runtimeRef: {name: plain}, trainer: {numNodes: .nan}}\n",
    "\x00", "\ufeff", "", "- a\n- b\n", "'unterminated", "\t- tab",
]


@st.composite
def yaml_texts(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["dump", "dump", "json", "hostile", "text", "splice"]))
    if kind == "hostile":
        return draw(st.sampled_from(HOSTILE_YAML))
    if kind == "text":
        return draw(st.text(alphabet=ANY_CHAR, max_size=60))
    doc = draw(mutated_trainjobs())
    if kind == "json":
        return json.dumps(doc, ensure_ascii=draw(st.booleans()))
    try:
        text = yaml.safe_dump(doc, allow_unicode=draw(st.booleans()))
    except yaml.YAMLError:  # PyYAML will not write some strings (lone surrogates)
        text = json.dumps(doc)
    if kind == "splice":  # a hostile line appended: later keys win in YAML
        text += draw(st.sampled_from(HOSTILE_YAML)).split("\n")[0] + "\n"
    return text


@cases(2.5)
@given(yaml_texts())
def test_trainjob_files(text: str) -> None:
    tbatch_f(text)


@cases(0.5)
@given(trainjobs())
def test_valid_trainjob_files_are_accepted(doc: dict[str, Any]
                                           ) -> None:
    job = trainjob_from_file(parse_tbatch(["-f", SOURCE]), yaml.safe_dump(doc))
    assert job.spec.runtime_ref.name == doc["spec"]["runtimeRef"]["name"]
    assert job.spec.trainer is not None
    assert job.spec.trainer.num_nodes == doc["spec"]["trainer"]["numNodes"]


@cases(1)
@given(JSON)
def test_any_json_value_as_a_document(value: Any) -> None:
    """load_trainjob given any decoded value (the API's and the CR front door's path)."""
    if not isinstance(value, dict):
        value = {"spec": value}
    try:
        with within_case_timeout():
            load_trainjob(value, "request")
    except ValidationError as exc:
        assert str(exc).strip()


# --- each bug the suite found, as a plain example -------------------------------------

@pytest.mark.parametrize(("text", "words"), [
    (HOSTILE_YAML[0], "more than 200000 values"),  # a billion laughs: was a hang
    (HOSTILE_YAML[1], f"nested deeper than {MAX_DEPTH} levels"),  # self-referencing
    (HOSTILE_YAML[2], "nest"),  # was RecursionError
    (HOSTILE_YAML[4], "metadata.labels.a: a bytes is not a JSON value"),
    (HOSTILE_YAML[7], "Exceeds the limit"),  # was ValueError from int()
    (HOSTILE_YAML[8], "metadata.generation: integer out of range"),
    (HOSTILE_YAML[10], "metadata: key 1 is not a string"),
    (HOSTILE_YAML[12], "Unicode"),
    (HOSTILE_YAML[13], "spec.trainer.numNodes: inf is not a number JSON allows"),
])
def test_hostile_yaml_is_refused_by_name(text: str, words: str
                                         ) -> None:
    with pytest.raises(SbatchError) as err, within_case_timeout():
        trainjob_from_file(parse_tbatch(["-f", SOURCE]), text)
    assert words in str(err.value) and str(err.value).startswith(f"tbatch: error: {SOURCE}")


def test_unquoted_dates_stay_text_as_kubectl_reads_them() -> None:
    job = trainjob_from_file(parse_tbatch(["-f", SOURCE]), (
        "metadata: {name: a, creationTimestamp: 2024-01-02T03:04:05Z}\n"
        "spec: {runtimeRef: {name: plain}, trainer: {command: [date], env: "
        "[{name: D, value: 2024-01-02}]}}\n"))
    assert job.metadata.creation_timestamp == "2024-01-02T03:04:05Z"
    assert job.spec.trainer and job.spec.trainer.env and job.spec.trainer.env[0].value == (
        "2024-01-02")
