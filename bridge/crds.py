"""Kubernetes CRDs for TrainJob, TrainingRuntime and ClusterTrainingRuntime, from the model.

For clusters without Kubeflow Trainer installed, the bridge brings its own
``CustomResourceDefinition``\\ s for ``trainer.kubeflow.org/v1alpha1``, generated from
the pydantic classes in :mod:`bridge.model` (``hpc-bridge crds``; the Helm chart's
copies in ``charts/hpc-bridge/crds/`` are this module's output, checked by a test).

Contract:

* Pure functions: the same model gives the same bytes (keys sorted, fixed order of
  documents: clustertrainingruntimes, trainingruntimes, trainjobs).
* Names, scope and subresources are upstream Trainer v2.3.0's: group
  ``trainer.kubeflow.org`` (``group=`` overrides it, e.g. to install beside
  upstream's CRDs for a test), kinds/plurals/singulars as upstream, no short names
  (upstream has none); TrainJob and TrainingRuntime are namespaced,
  ClusterTrainingRuntime is cluster-scoped; TrainJob has the ``status``
  subresource and upstream's printer columns (State, Age) plus Runtime, Nodes and
Trainer's Progress %.
* The ``openAPIV3Schema`` is *structural*: :func:`structural_schema` turns pydantic's
  JSON schema (validation mode: the CRD gates what is *written*, i.e. what the model
  *reads*; for these models both modes give the same schema today, and validation
  mode stays right should a serializer ever change the output side) into one where
  every node has a ``type`` (or is int-or-string), with no ``$ref``/``anyOf``/``title``
  /``const``; each model class keeps unknown fields (``extra="allow"``), so each of
  its objects is ``x-kubernetes-preserve-unknown-fields`` (so is every
  ``dict[str, Any]``): nothing a document for upstream carries is pruned. Optional
  fields are plain (not ``nullable``): the apiserver drops a ``null``, which the
  model reads as absent anyway.
* The object's top level is ``apiVersion``/``kind``/``metadata``/``spec``/``status``
  only, as for every Kubernetes object; ``metadata`` is the apiserver's.
* Rules the model states as validators are carried over where a schema can say them
  (:data:`_REFINEMENTS`): ``numNodes`` 1..100000, ``numProcPerNode`` a positive
  integer or auto/cpu/gpu, ``activeDeadlineSeconds`` >= 1, env names, env value
  length, resource quantities, ``runtimeRef.apiGroup``, and the TrainJob name (a
  DNS-1123 label, as CEL on the root, the way upstream checks its own rule). So the
  apiserver refuses what the bridge would refuse, with a message naming the field.
* Where the CRD is narrower than the model: a quantity written as a float or bool
  (``cpu: 0.5``; write ``"500m"``) is refused (Kubernetes' int-or-string quantity, as
  upstream); ``spec.managedBy`` must be upstream's controller, MultiKueue or
  :data:`bridge.model.MANAGED_BY` (upstream's rule plus the bridge; the model keeps any
  string) and, as upstream, cannot change once set.
* :func:`structural_schema` raises ``ValueError`` for a JSON schema it cannot express
  (a union other than ``X | None`` and ``int | str``), so a model change that would
  produce an invalid CRD fails the generator, not the apiserver.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bridge import model
from bridge.model import GROUP, MANAGED_BY, VERSION

#: Where the Helm chart keeps the generated CRDs (relative to the repository root).
CHART_CRD_DIR = "charts/hpc-bridge/crds"
HEADER = (
    "# Generated from bridge/model.py by `hpc-bridge crds` (bridge/crds.py): do not edit.\n"
    f"# Regenerate the chart's copies with: hpc-bridge crds --output {CHART_CRD_DIR}\n"
)
#: Values of ``spec.managedBy`` the CRD admits: upstream Trainer's, MultiKueue's, ours.
MANAGED_BY_VALUES = ("trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue",
                     MANAGED_BY)

Schema = dict[str, Any]
FieldPath = tuple[str, ...]

# Keys of pydantic's JSON schema carried into the CRD as they are; everything else is
# either converted below or dropped (title, examples, ...).
_KEPT = frozenset({"type", "description", "format", "enum", "required", "minimum", "maximum",
                   "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
                   "pattern", "minItems", "maxItems", "multipleOf", "minProperties",
                   "maxProperties", "default"})
_INT_OR_STRING: Schema = {"anyOf": [{"type": "integer"}, {"type": "string"}],
                          "x-kubernetes-int-or-string": True}


def _re2(pattern: str) -> str:
    """A Python pattern of the model as Kubernetes (Go RE2) reads it: ``\\d`` is ASCII there."""
    return pattern.replace(r"\d", "[0-9]").replace(r"\-", "-")


_QUANTITY = _re2(model._QUANTITY.pattern)
_DNS1123_LABEL = _re2(model._DNS1123_LABEL.pattern)


def structural_schema(schema: Mapping[str, Any]) -> Schema:
    """Convert a pydantic JSON schema (with ``$defs``) into a structural OpenAPI v3 schema.

    ``$ref`` is inlined (siblings such as ``description`` win over the target's),
    ``anyOf [X, null]`` becomes X, ``int | str`` (and ``str | int | float``, the
    model's quantities) becomes ``x-kubernetes-int-or-string``, ``const`` becomes a
    one-value ``enum``, ``exclusiveMinimum: N`` becomes ``minimum: N`` +
    ``exclusiveMinimum: true`` (OpenAPI v3.0), ``additionalProperties: true`` becomes
    ``x-kubernetes-preserve-unknown-fields: true``, ``default: null`` and ``title``
    are dropped; anything else (``uniqueItems``, ``not``, ...) is refused.
    """
    defs: Mapping[str, Any] = schema.get("$defs", {})

    def resolve(node: Mapping[str, Any], seen: tuple[str, ...]) -> Mapping[str, Any]:
        ref = node.get("$ref")
        if ref is None:
            return node
        name = ref.removeprefix("#/$defs/")
        if not ref.startswith("#/$defs/") or name not in defs:
            raise ValueError(f"unresolvable $ref {ref!r}")
        if name in seen:
            raise ValueError(f"recursive model {name!r} cannot be a structural schema")
        target = dict(resolve(defs[name], (*seen, name)))
        target.update({k: v for k, v in node.items() if k != "$ref"})
        return target

    def convert(raw: Mapping[str, Any], seen: tuple[str, ...], where: str) -> Schema:
        node = dict(resolve(raw, seen))
        if "$ref" in raw:
            seen = (*seen, raw["$ref"].removeprefix("#/$defs/"))
        for union in ("anyOf", "oneOf"):
            if union in node:
                node = _union(node, union, where)
                if "$ref" in node:  # Optional[Model]: the model, then as above
                    return convert(node, seen, where)
        if "const" in node:
            node.setdefault("enum", [node.pop("const")])
        if node.get("default", 0) is None:
            del node["default"]
        for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if not isinstance(node.get(bound, True), bool):  # JSON Schema's number -> OpenAPI's
                node[limit], node[bound] = node[bound], True
        out: Schema = {k: v for k, v in node.items() if k in _KEPT}
        if node.get("x-kubernetes-int-or-string"):
            out.update(_INT_OR_STRING)
            return out
        unknown = set(node) - _KEPT - {"title", "properties", "items", "additionalProperties",
                                       "$defs"}
        if unknown:
            raise ValueError(f"{where}: cannot express {sorted(unknown)} in a CRD")
        if "type" not in out:
            raise ValueError(f"{where}: no type")
        if isinstance(out["type"], list):
            raise ValueError(f"{where}: several types {out['type']}")
        if "properties" in node:
            out["properties"] = {name: convert(sub, seen, f"{where}.{name}")
                                 for name, sub in node["properties"].items()}
        if "items" in node:
            out["items"] = convert(node["items"], seen, f"{where}[]")
        extra = node.get("additionalProperties")
        if extra is True:
            out["x-kubernetes-preserve-unknown-fields"] = True
        elif isinstance(extra, Mapping):
            if "properties" in node:
                raise ValueError(f"{where}: both properties and a schema for other keys")
            out["additionalProperties"] = convert(extra, seen, f"{where}{{}}")
        # additionalProperties false / absent: Kubernetes prunes unknown fields anyway.
        return out

    return convert(schema, (), "<root>")


def _union(node: Schema, key: str, where: str) -> Schema:
    """``X | None`` -> X; ``int | str`` (``| float``) -> int-or-string; else refuse."""
    variants = [v for v in node.pop(key) if v.get("type") != "null"]
    if len(variants) == 1:
        merged = dict(variants[0])
        merged.update(node)  # the outer description/default win
        return merged
    types = {v.get("type") for v in variants}
    if types in ({"integer", "string"}, {"integer", "number", "string"}) and all(
            set(v) == {"type"} for v in variants):
        return {**node, "x-kubernetes-int-or-string": True}
    raise ValueError(f"{where}: a union of {variants} is not a structural schema")


def _cel(rule: str, message: str) -> Schema:
    return {"rule": rule, "message": message}


def _immutable() -> Schema:
    return _cel("self == oldSelf", "field is immutable")


# Rules the model checks in validators (invisible to its JSON schema), as schema
# keywords on the node at a path ("[]": list items, "{}": map values). A path that
# no longer exists in the model fails the generator.
_REFINEMENTS: dict[str, dict[FieldPath, Schema]] = {
    "TrainJob": {
        ("spec", "runtimeRef", "apiGroup"): {"enum": [GROUP]},
        ("spec", "managedBy"): {
            "enum": list(MANAGED_BY_VALUES),
            "description": "The controller that reconciles this TrainJob: "
                           f"{MANAGED_BY} hands it to hpc-bridge. Immutable.",
            "x-kubernetes-validations": [_immutable()]},
        ("spec", "activeDeadlineSeconds"): {"minimum": 1, "format": "int64"},
        ("spec", "trainer", "numNodes"): {"minimum": 1, "maximum": 100_000, "format": "int32"},
        ("spec", "trainer", "numProcPerNode"): {
            "minimum": 1, "pattern": "^(auto|cpu|gpu|0*[1-9][0-9]*)$",
            "description": "Processes per node: a positive integer, auto, cpu or gpu."},
        ("spec", "trainer", "env", "[]", "name"): {"pattern": _re2(model._ENV_NAME.pattern)},
        ("spec", "trainer", "env", "[]", "value"): {"maxLength": model._MAX_ENV_VALUE},
        ("spec", "trainer", "resourcesPerNode", "limits", "{}"): {"pattern": _QUANTITY},
        ("spec", "trainer", "resourcesPerNode", "requests", "{}"): {"pattern": _QUANTITY},
    },
    "TrainingRuntime": {},
    "ClusterTrainingRuntime": {},
}

_NAME_RULES = [
    _cel(f"self.metadata.name.matches('{_DNS1123_LABEL}')",
         "metadata.name must be a DNS-1123 label (a-z, 0-9 and '-', starting and ending "
         "with a letter or digit)"),
    _cel("size(self.metadata.name) <= 63", "metadata.name must be no more than 63 characters"),
]


def _node(schema: Schema, path: FieldPath) -> Schema:
    node = schema
    for step in path:
        key = {"[]": ("items",), "{}": ("additionalProperties",)}.get(step, ("properties", step))
        for k in key:
            if k not in node:
                raise ValueError(f"refinement path {'.'.join(path)}: no {step!r} in the model")
            node = node[k]
    return node


def object_schema(cls: type[BaseModel], kind: str) -> Schema:
    """The ``openAPIV3Schema`` of one kind: the model's spec/status, refined."""
    converted = structural_schema(cls.model_json_schema(by_alias=True, mode="validation"))
    for path, extra in _REFINEMENTS[kind].items():
        _node(converted, path).update(extra)
    props = converted["properties"]
    root: Schema = {
        "type": "object",
        "description": f"{kind} ({GROUP}/{VERSION} as Kubeflow Trainer defines it), "
                       f"served by hpc-bridge; generated from bridge.model.{cls.__name__}.",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            **{k: props[k] for k in ("spec", "status") if k in props},
        },
        "required": ["spec"],
    }
    if kind == "TrainJob":
        root["x-kubernetes-validations"] = _NAME_RULES
    return root


_KINDS: list[tuple[type[BaseModel], str, str]] = [
    (model.ClusterTrainingRuntime, "ClusterTrainingRuntime", "Cluster"),
    (model.TrainingRuntime, "TrainingRuntime", "Namespaced"),
    (model.TrainJob, "TrainJob", "Namespaced"),
]
_TRAINJOB_COLUMNS = [
    {"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"},
    {"name": "Runtime", "type": "string", "jsonPath": ".spec.runtimeRef.name"},
    {"name": "Nodes", "type": "integer", "jsonPath": ".spec.trainer.numNodes"},
    {"name": "Progress %", "type": "integer",
     "jsonPath": ".status.trainerStatus.progressPercentage"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def crd_documents(group: str = GROUP) -> list[dict[str, Any]]:
    """The three ``apiextensions.k8s.io/v1`` CRDs, in file-name order."""
    docs: list[dict[str, Any]] = []
    for cls, kind, scope in _KINDS:
        plural = kind.lower() + "s"
        version: Schema = {"name": VERSION, "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": object_schema(cls, kind)}}
        if kind == "TrainJob":
            version["subresources"] = {"status": {}}
            version["additionalPrinterColumns"] = _TRAINJOB_COLUMNS
        docs.append({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}",
                         "labels": {"app.kubernetes.io/part-of": "hpc-bridge"}},
            "spec": {"group": group,
                     "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural,
                               "singular": kind.lower()},
                     "scope": scope,
                     "versions": [version]},
        })
    return copy.deepcopy(docs)  # callers may edit theirs; the shared tables stay as they are


def _dump(doc: Mapping[str, Any]) -> str:
    import yaml

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:  # no &id001 anchors: plain text
            return True

    return "---\n" + yaml.dump(dict(doc), Dumper=_Dumper, sort_keys=True, width=100,
                                allow_unicode=True)


def render_crds(group: str = GROUP) -> str:
    """All three CRDs as one multi-document YAML text, with the generated-file header."""
    return HEADER + "".join(_dump(doc) for doc in crd_documents(group))


def crd_files(group: str = GROUP) -> dict[str, str]:
    """File name (upstream's: ``<group>_<plural>.yaml``) -> text, one CRD per file."""
    return {f"{doc['spec']['group']}_{doc['spec']['names']['plural']}.yaml": HEADER + _dump(doc)
            for doc in crd_documents(group)}


def write_crds(directory: str | Path, group: str = GROUP,
               log: Callable[[str], object] = lambda _line: None) -> list[Path]:
    """Write :func:`crd_files` into ``directory`` (created if missing); the paths written."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in crd_files(group).items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        log(str(path))
        written.append(path)
    return written
