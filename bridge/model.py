"""The TrainJob model: the Kubeflow Trainer ``trainer.kubeflow.org/v1alpha1`` shape.

The classes here read and write the same YAML/JSON as Kubeflow Trainer (camelCase
field names, ``apiVersion``/``kind``/``metadata``/``spec``/``status``). Unknown
fields are kept (``extra="allow"``) so a TrainJob made for upstream Trainer
round-trips through the bridge without losing what the bridge does not use.

Bridge-specific settings that have no Trainer field travel as annotations under
the ``hpc-bridge.io/`` prefix (see :data:`ANNOTATION_PREFIX`), the way Kubeflow
itself extends objects.

Contract:

* :func:`load_trainjob` / :func:`load_document` accept YAML or JSON text and raise
  :class:`ValidationError` whose message names the offending field
  (``spec.trainer.numNodes: must be >= 1, got 0``); they never raise anything else
  for bad input. Untrusted text goes through :func:`parse_json_object` (API bodies) or
  :func:`parse_text` (YAML); both, and :func:`load_trainjob` given a dict, apply
  :func:`check_shape` (depth, size, JSON types, 64-bit integers, valid Unicode)
  before the models see the document.
* :meth:`TrainJob.to_dict` gives the camelCase document, without ``None`` fields.
"""

from __future__ import annotations

import functools
import json
import math
import re
import uuid as uuid_mod
from datetime import UTC, datetime
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from bridge.errors import BridgeError

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
ANNOTATION_PREFIX = "hpc-bridge.io/"
#: Annotation carrying a batch script submitted by ``tbatch`` (run as-is by the back end).
ANN_BATCH_SCRIPT = ANNOTATION_PREFIX + "batch-script"
#: Annotation carrying the scheduling options (JSON, see :mod:`bridge.scheduling`).
ANN_SCHEDULING = ANNOTATION_PREFIX + "scheduling"
#: Annotation naming the back end the job should run on (``slurm``, ``flux``, ``kubernetes``).
ANN_BACKEND = ANNOTATION_PREFIX + "backend"
#: Annotation the engine sets on a job re-admitted as "taken before" whose options its
#: back end refuses today: it is adopted if its back end has it, and never submitted
#: (failed with this refusal) if not. Set only by admission; a client's is dropped.
ANN_ADOPT_ONLY = ANNOTATION_PREFIX + "adopt-only"
#: Annotation naming the TrainJob front door a job came through (set by the door, over
#: any the TrainJob had): its cluster's runtimes are the job's (bridge/runtimes.py).
ANN_FRONTDOOR = ANNOTATION_PREFIX + "frontdoor"
#: The value of ``spec.managedBy`` that hands a TrainJob to the bridge.
MANAGED_BY = "hpc-bridge.io/controller"
#: The ``manager`` of the ``spec.runtimePatches`` entry Kueue's webhook adds to every
#: TrainJob it may queue (k8s_adapter/kueue.py): Kueue's bookkeeping and admission
#: decision for pods, not a user's request.
KUEUE_PATCH_MANAGER = "kueue.x-k8s.io/manager"

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_MAX_ENV_VALUE = 128 * 1024


class ValidationError(BridgeError, ValueError):
    """Bad input. ``str(err)`` names each offending field and why, one per line."""

    def __init__(self, errors: list[tuple[str, str]]):
        self.errors = errors
        super().__init__("\n".join(f"{loc}: {msg}" if loc else msg for loc, msg in errors))


class _Model(BaseModel):
    """Base: camelCase aliases, populate by field name too, keep unknown fields."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
        validate_assignment=True,
        # Build each class's validator on first use, not at import: ``tbatch`` imports
        # this module on every run and needs a few of the classes only.
        defer_build=True,
    )

    def to_dict(self) -> dict[str, Any]:
        """The camelCase document without ``None`` fields."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class ObjectMeta(_Model):
    name: str = ""
    namespace: str | None = None
    uid: str | None = None
    generate_name: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    creation_timestamp: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    finalizers: list[str] | None = None


class RuntimeRef(_Model):
    name: str
    api_group: str = GROUP
    kind: Literal["ClusterTrainingRuntime", "TrainingRuntime"] = "ClusterTrainingRuntime"


class EnvVar(_Model):
    name: str
    value: str | None = None
    value_from: dict[str, Any] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _ENV_NAME.match(v):
            raise ValueError(f"invalid environment variable name {v!r}")
        return v

    @field_validator("value")
    @classmethod
    def _value(cls, v: str | None) -> str | None:
        if v is not None:
            if "\x00" in v:
                raise ValueError("environment value contains a NUL byte")
            if len(v.encode()) > _MAX_ENV_VALUE:
                raise ValueError(f"environment value longer than {_MAX_ENV_VALUE} bytes")
        return v


class ResourceRequirements(_Model):
    limits: dict[str, str | int | float] | None = None
    requests: dict[str, str | int | float] | None = None

    @field_validator("limits", "requests")
    @classmethod
    def _quantities(
        cls, v: dict[str, str | int | float] | None
    ) -> dict[str, str | int | float] | None:
        for key, q in (v or {}).items():
            if not _QUANTITY.match(str(q)):
                raise ValueError(f"{key}: invalid quantity {q!r}")
        return v


class Trainer(_Model):
    image: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] | None = None
    num_nodes: int | None = None
    num_proc_per_node: int | str | None = None
    resources_per_node: ResourceRequirements | None = None

    @field_validator("num_nodes")
    @classmethod
    def _nodes(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError(f"must be >= 1, got {v}")
        if v is not None and v > 100_000:
            raise ValueError(f"must be <= 100000, got {v}")
        return v

    @field_validator("num_proc_per_node")
    @classmethod
    def _procs(cls, v: int | str | None) -> int | str | None:
        if isinstance(v, str):
            if v in ("auto", "cpu", "gpu"):
                return v
            if not v.isdigit():
                raise ValueError(f"must be a positive integer, 'auto', 'cpu' or 'gpu'; got {v!r}")
            v = int(v)
        if v is not None and v < 1:
            raise ValueError(f"must be >= 1, got {v}")
        return v

    @field_validator("command", "args")
    @classmethod
    def _argv(cls, v: list[str] | None) -> list[str] | None:
        for item in v or []:
            if "\x00" in item:
                raise ValueError("contains a NUL byte")
        return v


class TrainJobSpec(_Model):
    runtime_ref: RuntimeRef
    trainer: Trainer | None = None
    initializer: dict[str, Any] | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    pod_spec_overrides: list[dict[str, Any]] | None = None
    #: Trainer >= v2.3: patches to the runtime's JobSet template (pod labels,
    #: nodeSelector, tolerations, container env …), applied by the Kubernetes back end.
    runtime_patches: list[dict[str, Any]] | None = None
    suspend: bool | None = None
    active_deadline_seconds: int | None = None
    managed_by: str | None = None

    @field_validator("active_deadline_seconds")
    @classmethod
    def _deadline(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError(f"must be >= 1, got {v}")
        return v


class Condition(_Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None
    observed_generation: int | None = None


class Metric(_Model):
    name: str
    value: str


class TrainerStatus(_Model):
    """Trainer v2.3's ``trainerStatus``: how far the trainer got (the bridge writes
    ``progressPercentage`` 100 and ``lastUpdatedTime`` once a job completes)."""

    progress_percentage: int | None = None
    estimated_remaining_seconds: int | None = None
    metrics: list[Metric] | None = None
    last_updated_time: str | None = None


class TrainJobStatus(_Model):
    conditions: list[Condition] = Field(default_factory=list)
    jobs_status: list[dict[str, Any]] | None = None
    trainer_status: TrainerStatus | None = None


class TrainJob(_Model):
    api_version: str = API_VERSION
    kind: Literal["TrainJob"] = "TrainJob"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: TrainJobSpec
    status: TrainJobStatus | None = None

    @field_validator("api_version")
    @classmethod
    def _api(cls, v: str) -> str:
        if v != API_VERSION:
            raise ValueError(f"must be {API_VERSION!r}, got {v!r}")
        return v

    @property
    def uid(self) -> str:
        """The job's uid; assigned by :func:`ensure_identity` if the input had none."""
        assert self.metadata.uid, "TrainJob has no uid yet"
        return self.metadata.uid


class MLPolicy(_Model):
    num_nodes: int | None = None
    torch: dict[str, Any] | None = None
    mpi: dict[str, Any] | None = None
    jax: dict[str, Any] | None = None
    xgboost: dict[str, Any] | None = None


class TrainingRuntimeSpec(_Model):
    ml_policy: MLPolicy | None = None
    pod_group_policy: dict[str, Any] | None = None
    template: dict[str, Any] = Field(default_factory=dict)


class TrainingRuntime(_Model):
    api_version: str = API_VERSION
    kind: Literal["TrainingRuntime"] = "TrainingRuntime"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: TrainingRuntimeSpec


class ClusterTrainingRuntime(_Model):
    api_version: str = API_VERSION
    kind: Literal["ClusterTrainingRuntime"] = "ClusterTrainingRuntime"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: TrainingRuntimeSpec


Document = TrainJob | TrainingRuntime | ClusterTrainingRuntime
_KINDS: dict[str, type[_Model]] = {
    "TrainJob": TrainJob,
    "TrainingRuntime": TrainingRuntime,
    "ClusterTrainingRuntime": ClusterTrainingRuntime,
}


def _loc(loc: tuple[int | str, ...]) -> str:
    """``("spec", "trainer", "num_nodes")`` -> ``spec.trainer.numNodes``; ints become ``[i]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + to_camel(part)
    return out


def _errors(exc: pydantic.ValidationError) -> ValidationError:
    items: list[tuple[str, str]] = []
    for err in exc.errors(include_url=False):
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        items.append((_loc(err["loc"]), msg))
    return ValidationError(items)


#: Limits on an untrusted document's shape (see :func:`check_shape`): deeper than any
#: Kubernetes object, more values than any TrainJob, Kubernetes' own integer range.
MAX_DEPTH = 64
MAX_VALUES = 200_000
_INT_RANGE = range(-(2**63), 2**63)
_SCALARS = (str, bool, int, float, type(None))


def _where(path: tuple[str | int, ...]) -> str:
    """A path inside a raw document as in messages: ``spec.trainer.command[0]``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out or "(document)"


def check_shape(data: Any, source: str = "<input>") -> None:
    """Refuse what no TrainJob holds and what would break a later step: nesting deeper
    than :data:`MAX_DEPTH`, more than :data:`MAX_VALUES` values (as YAML aliases expand
    them), keys that are not strings, values that are not JSON (dates, bytes, sets from
    YAML tags), NaN or infinite numbers, integers outside 64 bits, and text with lone
    surrogates (not encodable as UTF-8). Raises :class:`ValidationError` naming the path.
    Iterative: a self-referencing YAML document ends at the depth limit."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    count = 0
    while stack:
        value, path = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise ValidationError([("", f"{source}: more than {MAX_VALUES} values")])
        if isinstance(value, dict | list):
            if len(path) >= MAX_DEPTH:
                raise ValidationError([(_where(path), f"nested deeper than {MAX_DEPTH} levels")])
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(value, dict) and not isinstance(key, str):
                    raise ValidationError([(_where(path), f"key {key!r} is not a string")])
                if isinstance(key, str) and not _utf8(key):
                    raise ValidationError([(_where(path), f"key {key!r} is not valid Unicode "
                                                          "(lone surrogate)")])
                stack.append((item, (*path, key)))
        elif not isinstance(value, _SCALARS):
            raise ValidationError([(_where(path), f"a {type(value).__name__} is not a JSON "
                                                  "value (quote it)")])
        elif isinstance(value, float) and not math.isfinite(value):
            raise ValidationError([(_where(path), f"{value} is not a number JSON allows")])
        elif isinstance(value, int) and value not in _INT_RANGE:
            raise ValidationError([(_where(path), "integer out of range (64 bits)")])
        elif isinstance(value, str) and not _utf8(value):
            raise ValidationError([(_where(path), "not valid Unicode (lone surrogate)")])


def _utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def parse_json_object(raw: bytes, source: str = "request body") -> dict[str, Any]:
    """Decode an untrusted JSON object (UTF-8, RFC 8259: no NaN or Infinity) and check its
    :func:`check_shape`. Raises :class:`ValidationError` saying what is wrong."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError([("", f"{source} is not UTF-8: byte {raw[exc.start]:#04x} at "
                                    f"offset {exc.start}")]) from None

    def constant(name: str) -> None:
        raise ValueError(f"{name} is not a JSON number")

    try:
        data = json.loads(text, parse_constant=constant)
    except RecursionError:
        raise ValidationError([("", f"{source}: nested deeper than {MAX_DEPTH} levels")]
                              ) from None
    except ValueError as exc:
        raise ValidationError([("", f"{source} is not JSON: {exc}")]) from None
    if not isinstance(data, dict):
        raise ValidationError([("", f"{source} must be a JSON object (a TrainJob), got "
                                    f"{_json_type(data)}")])
    check_shape(data, source)
    return data


def _json_type(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


@functools.cache
def _yaml_loader() -> Any:
    """PyYAML's safe loader (libyaml's when PyYAML has it: the pure-Python scanner is
    quadratic in flow nesting) without implicit timestamps: an unquoted date stays the
    text it is, as kubectl reads it (Kubernetes fields holding times are strings)."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    resolvers = {
        first: [(tag, rx) for tag, rx in found if tag != "tag:yaml.org,2002:timestamp"]
        for first, found in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    return type("Loader", (base,), {"yaml_implicit_resolvers": resolvers})


def parse_text(text: str, source: str = "<input>") -> dict[str, Any]:
    """Parse YAML or JSON text holding one object, checked by :func:`check_shape`.
    Errors name the source and line (or the path inside the document)."""
    import yaml  # here, not at the top: most importers (tbatch) never parse YAML

    try:
        data = yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise ValidationError([("", f"{where}: malformed YAML: {problem}")]) from None
    except RecursionError:
        raise ValidationError([("", f"{source}: nested deeper than {MAX_DEPTH} levels")]
                              ) from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise ValidationError([("", f"{source}: {exc}")]) from None
    if not isinstance(data, dict):
        raise ValidationError([("", f"{source}: expected a mapping (a TrainJob object), got "
                                    f"{type(data).__name__}")])
    check_shape(data, source)
    return data


def load_document(data: dict[str, Any] | str, source: str = "<input>") -> Document:
    """Build a TrainJob / TrainingRuntime / ClusterTrainingRuntime from a dict or text."""
    if isinstance(data, str):
        data = parse_text(data, source)
    kind = data.get("kind", "TrainJob")
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValidationError([("kind", f"must be one of {sorted(_KINDS)}, got {kind!r}")])
    try:
        doc = cls.model_validate(data)
    except pydantic.ValidationError as exc:
        raise _errors(exc) from None
    assert isinstance(doc, TrainJob | TrainingRuntime | ClusterTrainingRuntime)
    return doc


def load_trainjob(data: dict[str, Any] | str, source: str = "<input>") -> TrainJob:
    """Build and statically validate a TrainJob (see :func:`validate_trainjob`)."""
    if isinstance(data, dict):
        check_shape(data, source)
    doc = load_document(data, source)
    if not isinstance(doc, TrainJob):
        raise ValidationError([("kind", f"expected TrainJob, got {doc.kind}")])
    validate_trainjob(doc)
    return doc


def validate_trainjob(job: TrainJob) -> None:
    """Checks that need the whole object; raise :class:`ValidationError` naming fields."""
    errors: list[tuple[str, str]] = []
    name = job.metadata.name
    if name and (len(name) > 63 or not _DNS1123_LABEL.fullmatch(name)):
        errors.append(("metadata.name", f"must be a DNS-1123 label (a-z, 0-9, '-', at most 63 "
                                        f"characters), got {name!r}"))
    namespace = job.metadata.namespace
    if namespace and (len(namespace) > 63 or not _DNS1123_LABEL.fullmatch(namespace)):
        errors.append(("metadata.namespace", f"must be a DNS-1123 label (a-z, 0-9, '-', at "
                                             f"most 63 characters), got {namespace!r}"))
    if job.spec.runtime_ref.api_group != GROUP:
        errors.append(("spec.runtimeRef.apiGroup", f"must be {GROUP!r}, got "
                                                   f"{job.spec.runtime_ref.api_group!r}"))
    for key, value in job.metadata.annotations.items():
        if "\x00" in value:
            errors.append((f"metadata.annotations[{key}]", "contains a NUL byte"))
    if ANN_SCHEDULING in job.metadata.annotations:
        where = f"metadata.annotations[{ANN_SCHEDULING}]"
        try:  # the one decoder of untrusted JSON (depth, NaN, size: parse_json_object)
            parse_json_object(job.metadata.annotations[ANN_SCHEDULING].encode(
                "utf-8", "surrogatepass"), where)
        except ValidationError as exc:
            # Its messages name the annotation already when they name no path inside.
            errors += [(f"{where}.{path}" if path else "", message)
                       for path, message in exc.errors]
    if errors:
        raise ValidationError(errors)


#: An RFC 4122 uid in its canonical text form (lower-case hex, 8-4-4-4-12, the RFC's
#: variant bits ``10xx``): what ``uuid4()`` and Kubernetes (a CR's ``metadata.uid``) make.
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def is_job_uid(uid: str) -> bool:
    """Whether ``uid`` is an RFC 4122 uid in canonical form (nothing else: no NUL, no
    upper case, no braces, no prefix or suffix)."""
    return _UID.fullmatch(uid) is not None


def ensure_identity(job: TrainJob, default_namespace: str = "default") -> TrainJob:
    """Give the job a uid, a namespace and a name (``tj-<uid prefix>``) where missing.
    A uid the job brings must be RFC 4122 (:func:`is_job_uid`), else
    :class:`ValidationError` on ``metadata.uid``: the uid is the key back-end jobs
    carry, so it must not be confusable with another job's."""
    meta = job.metadata
    if not meta.uid:
        meta.uid = str(uuid_mod.uuid4())
    elif not is_job_uid(meta.uid):
        raise ValidationError([("metadata.uid", f"{meta.uid[:80]!r} is not an RFC 4122 uid "
                                                "(lower-case 8-4-4-4-12 hex); omit it and "
                                                "the bridge makes one")])
    if not meta.namespace:
        meta.namespace = default_namespace
    if not meta.name:
        prefix = meta.generate_name or "tj-"
        meta.name = (prefix + meta.uid.replace("-", "")[:10])[:63]
    if not meta.creation_timestamp:
        meta.creation_timestamp = now_rfc3339()
    return job


def now_rfc3339() -> str:
    """The current UTC time as Kubernetes writes it (``2026-01-02T03:04:05Z``)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def dump_yaml(doc: _Model) -> str:
    """The document as YAML (camelCase, no ``None`` fields)."""
    import yaml

    return yaml.safe_dump(doc.to_dict(), sort_keys=False, allow_unicode=True)
