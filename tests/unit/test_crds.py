"""The CRDs generated from bridge/model.py: committed copies current, structural, and
agreeing with the model on what they accept.

Kubernetes' own validation is imitated by ``validate`` below (types, properties,
``additionalProperties``, int-or-string, enum, minimum/maximum, length, pattern,
required, defaults, pruning of unknown fields and of ``null``); CEL rules are checked
against the apiserver in tests/integration/test_crds_apiserver.py and here only by
comparing their regular expression with the model's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field

from bridge import crds
from bridge.daemon import main
from bridge.model import (
    API_VERSION,
    GROUP,
    MANAGED_BY,
    ValidationError,
    load_document,
    load_trainjob,
    validate_trainjob,
)

REPO = Path(__file__).resolve().parents[2]
CHART_CRDS = REPO / crds.CHART_CRD_DIR
REGENERATE = f"regenerate with: .venv/bin/hpc-bridge crds --output {crds.CHART_CRD_DIR}"
DOCS = crds.crd_documents()
SCHEMAS = {d["spec"]["names"]["kind"]: d["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
           for d in DOCS}


# --- (a) the committed files are what the model gives ------------------------------

def test_committed_crds_are_current() -> None:
    files = crds.crd_files()
    for name, text in files.items():
        path = CHART_CRDS / name
        assert path.exists(), f"{path} missing; {REGENERATE}"
        assert path.read_text(encoding="utf-8") == text, f"{path} is stale; {REGENERATE}"
    stray = sorted(p.name for p in CHART_CRDS.glob("*.yaml") if p.name not in files)
    assert not stray, f"files in {CHART_CRDS} the generator does not write: {stray}"


def test_command_prints_and_writes_the_same(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crds"]) == 0
    out = capsys.readouterr().out
    assert out == crds.render_crds()
    assert out.startswith("# Generated") and "hpc-bridge crds" in out.splitlines()[0]
    assert list(yaml.safe_load_all(out)) == DOCS
    assert main(["crds", "--output", str(tmp_path / "d"), "--group", "x.example.org"]) == 0
    written = sorted(p.name for p in (tmp_path / "d").iterdir())
    assert written == ["x.example.org_clustertrainingruntimes.yaml",
                       "x.example.org_trainingruntimes.yaml", "x.example.org_trainjobs.yaml"]
    assert crds.render_crds() == crds.render_crds()  # stable


# --- names and shape, as upstream Kubeflow Trainer v2.3.0 -----------------------------

# From manifests/base/crds/trainer.kubeflow.org_*.yaml of github.com/kubeflow/trainer/v2@v2.3.0.
UPSTREAM = {
    "TrainJob": ("trainjobs", "trainjob", "Namespaced"),
    "TrainingRuntime": ("trainingruntimes", "trainingruntime", "Namespaced"),
    "ClusterTrainingRuntime": ("clustertrainingruntimes", "clustertrainingruntime", "Cluster"),
}


def test_names_and_scope_are_upstreams() -> None:
    assert [d["spec"]["names"]["kind"] for d in DOCS] == [
        "ClusterTrainingRuntime", "TrainingRuntime", "TrainJob"]
    for doc in DOCS:
        spec = doc["spec"]
        kind = spec["names"]["kind"]
        plural, singular, scope = UPSTREAM[kind]
        assert doc["apiVersion"] == "apiextensions.k8s.io/v1"
        assert doc["metadata"]["name"] == f"{plural}.{GROUP}"
        assert spec["group"] == GROUP
        assert spec["names"] == {"kind": kind, "listKind": kind + "List", "plural": plural,
                                 "singular": singular}  # no shortNames: upstream has none
        assert spec["scope"] == scope
        [version] = spec["versions"]
        assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True,
                                                                             True)
        if kind == "TrainJob":
            assert version["subresources"] == {"status": {}}
            columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
            assert columns["State"] == {"name": "State", "type": "string",
                                        "jsonPath": ".status.conditions[-1:].type"}
            assert columns["Age"] == {"name": "Age", "type": "date",
                                      "jsonPath": ".metadata.creationTimestamp"}
        else:
            assert "subresources" not in version and "status" not in version["schema"][
                "openAPIV3Schema"]["properties"]


def test_group_changes_only_the_group() -> None:
    other = crds.crd_documents("crd-test.hpc-bridge.io")
    for ours, theirs in zip(DOCS, other, strict=True):
        assert theirs["spec"]["group"] == "crd-test.hpc-bridge.io"
        assert theirs["metadata"]["name"].endswith(".crd-test.hpc-bridge.io")
        assert theirs["spec"]["versions"] == ours["spec"]["versions"]


def test_managed_by_admits_the_bridge() -> None:
    node = SCHEMAS["TrainJob"]["properties"]["spec"]["properties"]["managedBy"]
    assert MANAGED_BY in node["enum"]
    assert "trainer.kubeflow.org/trainjob-controller" in node["enum"]
    assert {"rule": "self == oldSelf", "message": "field is immutable"} in node[
        "x-kubernetes-validations"]


# --- (b) structural schema rules, over every node ------------------------------------

ALLOWED_KEYS = {"type", "format", "description", "properties", "items", "additionalProperties",
                "required", "enum", "minimum", "maximum", "minLength", "maxLength", "pattern",
                "default", "anyOf", "x-kubernetes-preserve-unknown-fields",
                "x-kubernetes-int-or-string", "x-kubernetes-validations"}
TYPES = {"object", "array", "string", "integer", "number", "boolean"}
INT_OR_STRING_ANYOF = [{"type": "integer"}, {"type": "string"}]


def walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path or "<root>", node)]
    for name, sub in node.get("properties", {}).items():
        found += walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        found += walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        found += walk(node["additionalProperties"], f"{path}{{}}")
    return found


def structural_problems(path: str, node: dict[str, Any]) -> list[str]:
    bad = [f"{path}: forbidden key {k!r}" for k in set(node) - ALLOWED_KEYS]
    if node.get("x-kubernetes-int-or-string"):
        if node["x-kubernetes-int-or-string"] is not True:
            bad.append(f"{path}: x-kubernetes-int-or-string must be true")
        if "type" in node:
            bad.append(f"{path}: int-or-string with a type")
        if node.get("anyOf", INT_OR_STRING_ANYOF) != INT_OR_STRING_ANYOF:
            bad.append(f"{path}: anyOf other than the int-or-string pattern")
    else:
        if node.get("type") not in TYPES:
            bad.append(f"{path}: type {node.get('type')!r}")
        if "anyOf" in node:
            bad.append(f"{path}: anyOf outside int-or-string")
    if "properties" in node and "additionalProperties" in node:
        bad.append(f"{path}: properties together with additionalProperties")
    if "additionalProperties" in node and not isinstance(node["additionalProperties"], dict):
        bad.append(f"{path}: additionalProperties must be a schema")
    preserve = node.get("x-kubernetes-preserve-unknown-fields")
    if preserve is not None and (preserve is not True or node.get("type") != "object"):
        bad.append(f"{path}: x-kubernetes-preserve-unknown-fields only true, on objects")
    if (node.get("type") == "object" and not {"properties", "additionalProperties"} & set(node)
            and not preserve and path != ".metadata"):
        bad.append(f"{path}: an object that would lose all its fields to pruning")
    if node.get("type") == "array" and "items" not in node:
        bad.append(f"{path}: array without items")
    if set(node.get("required", [])) - set(node.get("properties", {})):
        bad.append(f"{path}: required names an undeclared property")
    if "pattern" in node:
        re.compile(node["pattern"])
        if re.search(r"\\[dDwWsSZAz]|\(\?P", node["pattern"]):
            bad.append(f"{path}: pattern uses Python-only or Unicode-dependent syntax")
    for value in node.get("enum", []):
        _, errors = validate({k: v for k, v in node.items() if k != "enum"}, value)
        bad += [f"{path}: enum value {value!r}: {e}" for e in errors]
    if "default" in node:
        if node["default"] is None:
            bad.append(f"{path}: default null")
        else:
            _, errors = validate(node, node["default"])
            bad += [f"{path}: default: {e}" for e in errors]
    for rule in node.get("x-kubernetes-validations", []):
        if set(rule) != {"rule", "message"}:
            bad.append(f"{path}: validation rule {rule}")
    return bad


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_schema_is_structural(kind: str) -> None:
    schema = SCHEMAS[kind]
    nodes = walk(schema)
    problems = [p for path, node in nodes for p in structural_problems(path, node)]
    assert not problems, "\n".join(problems)
    assert schema["type"] == "object"
    props = schema["properties"]
    assert set(props) <= {"apiVersion", "kind", "metadata", "spec", "status"}
    assert props["metadata"] == {"type": "object"}  # the apiserver's own
    assert props["apiVersion"] == props["kind"] == {"type": "string"}
    # Every model object keeps unknown fields, as the model does (extra="allow").
    assert props["spec"]["x-kubernetes-preserve-unknown-fields"] is True
    # Nothing of pydantic's JSON schema vocabulary is left anywhere.
    text = yaml.safe_dump(schema)
    for word in ("$ref", "$defs", "title:", "const:", "oneOf", "allOf", "nullable"):
        assert word not in text


def test_opaque_fields_keep_everything() -> None:
    spec = SCHEMAS["TrainJob"]["properties"]["spec"]["properties"]
    preserved = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert spec["initializer"] == preserved
    assert spec["runtimePatches"]["items"] == preserved
    assert spec["podSpecOverrides"]["items"] == preserved
    runtime = SCHEMAS["ClusterTrainingRuntime"]["properties"]["spec"]["properties"]
    assert runtime["template"] == preserved
    trainer = spec["trainer"]["properties"]
    assert trainer["numProcPerNode"]["x-kubernetes-int-or-string"] is True
    assert (trainer["numNodes"]["minimum"], trainer["numNodes"]["type"]) == (1, "integer")


class _Recursive(BaseModel):
    child: _Recursive | None = None


class _Odd(BaseModel):
    model_config = ConfigDict(extra="allow")
    value: int | list[str]


def test_converter_refuses_what_a_crd_cannot_say() -> None:
    with pytest.raises(ValueError, match="recursive"):
        crds.structural_schema(_Recursive.model_json_schema())
    with pytest.raises(ValueError, match="union"):
        crds.structural_schema(_Odd.model_json_schema())


# --- (c) the schema accepts what the model accepts, refuses what it refuses ---------

def validate(schema: dict[str, Any], value: Any, path: str = "",
             pruned: list[str] | None = None) -> tuple[Any, list[str]]:
    """Kubernetes' treatment of ``value`` (defaulting, pruning, OpenAPI validation):
    the stored value and the errors. Paths of pruned fields go to ``pruned``."""
    errors: list[str] = []
    where = path or "<root>"
    if path == ".metadata":
        return value, []  # the apiserver's own: ObjectMeta, not this schema
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, int | str):
            return value, [f"{where}: must be of type integer or string"]
    else:
        expected = {"object": dict, "array": list, "string": str, "boolean": bool,
                    "integer": int, "number": int | float}[schema["type"]]
        if not isinstance(value, expected) or (isinstance(value, bool)
                                               and schema["type"] != "boolean"):
            return value, [f"{where}: must be of type {schema['type']}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: unsupported value {value!r}")
    if isinstance(value, int) and not isinstance(value, bool):
        if value < schema.get("minimum", value):
            errors.append(f"{where}: should be greater than or equal to {schema['minimum']}")
        if value > schema.get("maximum", value):
            errors.append(f"{where}: should be less than or equal to {schema['maximum']}")
    if isinstance(value, str):
        if len(value) > schema.get("maxLength", len(value)):
            errors.append(f"{where}: may not be longer than {schema['maxLength']}")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{where}: should match {schema['pattern']!r}")
    if isinstance(value, list):
        out_list = []
        for i, item in enumerate(value):
            stored, errs = validate(schema["items"], item, f"{path}[{i}]", pruned)
            out_list.append(stored)
            errors += errs
        return out_list, errors
    if isinstance(value, dict):
        props = schema.get("properties", {})
        out: dict[str, Any] = {}
        for key, item in value.items():
            sub = props.get(key, schema.get("additionalProperties"))
            if item is None and (sub is not None or not schema.get(
                    "x-kubernetes-preserve-unknown-fields")):
                continue  # null where nullable is not set: dropped before validation
            if sub is None:
                if schema.get("x-kubernetes-preserve-unknown-fields"):
                    out[key] = item
                elif pruned is not None:
                    pruned.append(f"{path}.{key}")
                continue
            out[key], errs = validate(sub, item, f"{path}.{key}", pruned)
            errors += errs
        for key, sub in props.items():
            if key not in out and "default" in sub:
                out[key] = sub["default"]
        errors += [f"{path}.{key}: Required value" for key in schema.get("required", [])
                   if key not in out]
        return out, errors
    return value, errors


def check(kind: str, doc: dict[str, Any]) -> tuple[dict[str, Any], list[str], list[str]]:
    pruned: list[str] = []
    stored, errors = validate(SCHEMAS[kind], doc, "", pruned)
    return stored, errors, pruned


def model_accepts(doc: dict[str, Any]) -> bool:
    try:
        loaded = load_document(doc)
        if doc.get("kind") == "TrainJob":
            validate_trainjob(loaded)  # type: ignore[arg-type]
    except ValidationError:
        return False
    return True


def example_documents() -> list[Path]:
    return sorted([*REPO.glob("examples/**/*.yaml"),
                   *(REPO / "tests/unit/fixtures/trainjobs").glob("*.yaml")])


@pytest.mark.parametrize("path", example_documents(), ids=lambda p: p.name)
def test_examples_are_accepted_and_kept_whole(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    assert model_accepts(doc)
    stored, errors, pruned = check(doc["kind"], doc)
    assert errors == [] and pruned == []
    # What the apiserver stores reads as the same object.
    assert load_document(stored).to_dict() == load_document(doc).to_dict()


def test_the_charts_runtimes_are_accepted_and_kept_whole() -> None:
    docs = [d for d in yaml.safe_load_all(
        (REPO / "charts/hpc-bridge/files/runtimes.yaml").read_text()) if d]
    assert docs
    for doc in docs:
        assert model_accepts(doc)
        stored, errors, pruned = check(doc["kind"], doc)
        assert errors == [] and pruned == [], doc["metadata"]["name"]
        assert stored["spec"]["template"] == doc["spec"]["template"]  # Trainer's shape, kept
        assert load_document(stored).to_dict() == load_document(doc).to_dict()


def test_numnodes_zero_is_refused_by_both() -> None:
    doc = yaml.safe_load((REPO / "examples/trainjob-plain.yaml").read_text())
    doc["spec"]["trainer"]["numNodes"] = 0
    with pytest.raises(ValidationError, match="numNodes"):
        load_trainjob(doc)
    _, errors, _ = check("TrainJob", doc)
    assert errors == [".spec.trainer.numNodes: should be greater than or equal to 1"]


def test_name_rule_is_the_models() -> None:
    rules = SCHEMAS["TrainJob"]["x-kubernetes-validations"]
    [pattern] = [re.fullmatch(r"self\.metadata\.name\.matches\('(.*)'\)", r["rule"]).group(1)
                 for r in rules if "matches" in r["rule"]]  # type: ignore[union-attr]
    assert any(r["rule"] == "size(self.metadata.name) <= 63" for r in rules)

    @given(st.text(alphabet="abz09-._A", min_size=1, max_size=70))
    def agree(name: str) -> None:
        doc = {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": {"name": name},
               "spec": {"runtimeRef": {"name": "plain"}}}
        assert model_accepts(doc) == bool(re.search(pattern, name) and len(name) <= 63)

    agree()


# Documents: free text without NUL (the model refuses NUL in argv and env values, which
# JSON Schema cannot say) and every field the model checks drawn from good and bad values.
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)
KEYS = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e), min_size=1, max_size=12)
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**31, 2**31) | TEXT,
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(KEYS, inner, max_size=3), max_leaves=8)
OBJECTS = st.dictionaries(KEYS, JSON, max_size=4)
INTS = st.integers(-3, 12) | st.sampled_from([100_000, 100_001, 2**31, -(2**40)])
QUANTITY = st.integers(-3, 64) | st.sampled_from(
    ["4", "500m", "16Gi", "1e3", ".5", "+1", "1.", "-2Ki", "lots", "", "1.5.2", "4 ", "Gi"])
PROCS = st.integers(-2, 64) | st.sampled_from(
    ["auto", "cpu", "gpu", "4", "0", "00", "007", "many", "", " 1", "+1", "-1", "AUTO"])
ENV_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,8}", fullmatch=True) | st.sampled_from(
    ["1BAD", "A=B", "", "-x", "A B", "ä"])


def maybe(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A dict with any subset of ``fields``; values may also be null (all these fields are
    ``X | None`` in the model: Kubernetes drops the null, the model reads None)."""
    return st.fixed_dictionaries({}, optional={k: v | st.none() for k, v in fields.items()})


TRAINER = maybe(
    image=TEXT, command=st.lists(TEXT, max_size=3), args=st.lists(TEXT, max_size=3),
    env=st.lists(st.fixed_dictionaries({"name": ENV_NAMES}, optional={
        "value": TEXT, "valueFrom": OBJECTS}), max_size=3),
    numNodes=INTS, numProcPerNode=PROCS,
    resourcesPerNode=maybe(limits=st.dictionaries(st.sampled_from(
        ["cpu", "memory", "nvidia.com/gpu"]), QUANTITY, max_size=3), requests=st.dictionaries(
        st.sampled_from(["cpu", "memory"]), QUANTITY, max_size=2)),
    futureTrainerField=JSON,
)
SPEC = st.fixed_dictionaries(
    {"runtimeRef": st.fixed_dictionaries({"name": TEXT}, optional={
        "apiGroup": st.sampled_from([GROUP, "example.org"]),
        "kind": st.sampled_from(["ClusterTrainingRuntime", "TrainingRuntime", "Runtime"]),
        "futureRefField": TEXT})},
    optional={"trainer": TRAINER, "initializer": OBJECTS,
              "labels": st.dictionaries(KEYS, TEXT, max_size=2),
              "annotations": st.dictionaries(KEYS, TEXT, max_size=2),
              "podSpecOverrides": st.lists(OBJECTS, max_size=2),
              "runtimePatches": st.lists(OBJECTS, max_size=2),
              "suspend": st.booleans(), "activeDeadlineSeconds": INTS,
              "managedBy": st.sampled_from(crds.MANAGED_BY_VALUES),
              "futureSpecField": JSON})
CONDITIONS = st.lists(st.fixed_dictionaries(
    {"type": TEXT, "status": st.sampled_from(["True", "False", "Unknown", "Maybe"])},
    optional={"reason": TEXT, "message": TEXT, "lastTransitionTime": TEXT,
              "observedGeneration": INTS, "futureConditionField": JSON}), max_size=3)
STATUS = st.fixed_dictionaries({}, optional={  # conditions is a list, never None
    "conditions": CONDITIONS,
    "jobsStatus": st.lists(OBJECTS, max_size=2) | st.none(),
    "trainerStatus": maybe(backend=TEXT, backendJobId=TEXT, nodes=st.lists(TEXT, max_size=2),
                           exitCode=INTS, progressPercentage=st.integers(0, 100)) | st.none(),
})
TRAINJOBS = st.fixed_dictionaries(
    {"apiVersion": st.just(API_VERSION), "kind": st.just("TrainJob"),
     "metadata": st.fixed_dictionaries({"name": st.from_regex(
         r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)}),
     "spec": SPEC},
    optional={"status": STATUS})


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(TRAINJOBS)
def test_schema_and_model_agree_on_trainjobs(doc: dict[str, Any]) -> None:
    accepted = model_accepts(doc)
    stored, errors, pruned = check("TrainJob", doc)
    assert accepted == (not errors), f"model {'accepts' if accepted else 'refuses'}; " \
                                     f"schema: {errors}"
    if accepted:
        assert pruned == []
        assert load_document(stored).to_dict() == load_document(doc).to_dict()


@given(st.sampled_from(["TrainingRuntime", "ClusterTrainingRuntime"]), st.fixed_dictionaries(
    {}, optional={"template": OBJECTS, "futureSpecField": JSON,  # template: a dict, not None
                  "mlPolicy": maybe(numNodes=INTS, torch=OBJECTS, mpi=OBJECTS, jax=OBJECTS,
                                    xgboost=OBJECTS, flux=OBJECTS) | st.none(),
                  "podGroupPolicy": OBJECTS | st.none()}))
def test_runtimes_the_model_accepts_are_stored_whole(kind: str, spec: dict[str, Any]) -> None:
    doc = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": "rt"}, "spec": spec}
    assert model_accepts(doc)
    stored, errors, pruned = check(kind, doc)
    assert errors == [] and pruned == []
    assert load_document(stored).to_dict() == load_document(doc).to_dict()


class _Bounds(BaseModel):
    positive: int = Field(gt=0)
    small: float = Field(lt=1.5, ge=-1)
    tags: set[str] = Field(default_factory=set)


def test_converter_speaks_openapi_v3_0_bounds() -> None:
    schema = _Bounds.model_json_schema()
    del schema["properties"]["tags"]
    out = crds.structural_schema(schema)["properties"]
    assert out["positive"] == {"type": "integer", "minimum": 0, "exclusiveMinimum": True}
    assert out["small"] == {"type": "number", "maximum": 1.5, "exclusiveMaximum": True,
                            "minimum": -1}
    with pytest.raises(ValueError, match="uniqueItems"):
        crds.structural_schema(_Bounds.model_json_schema())
