"""A TrainJob's ``spec.initializer``, as the bridge runs it: the data cache.

Kubeflow Trainer's dataset initializer downloads a dataset (``hf://``, ``s3://``) or,
with ``cache://<schema>/<table>``, starts a cache cluster that serves an Iceberg table
over Arrow Flight. The bridge runs the second idea on every back end that can start it
(:attr:`DATA_CACHE_ATTR`): cache servers in the job's own allocation, one per node,
serving files on the shared file system or an Iceberg table (``data_cache/``,
docs/data-cache.md).

Contract: :func:`data_cache_of` returns the job's :class:`DataCacheSpec`, ``None`` when
it asks for no dataset, and raises :class:`ValidationError` naming the field for
anything it would otherwise have to ignore: a model initializer, a ``secretRef``, a
scheme other than an absolute path, ``file://`` or ``cache://<schema>/<table>`` (with
Trainer's ``METADATA_LOC``, or ``CATALOG_URI``), a query or fragment, an unknown
``env`` name or a malformed value. :func:`serve_options` spells a spec as the options
of ``data-cache serve``/``run`` (one spelling for every back end).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from bridge.model import TrainJob, ValidationError
from bridge.topology import memory_bytes

__all__ = ["DATASET_FIELD", "DATA_CACHE_ATTR", "ENV_NAMES", "DataCacheSpec", "data_cache_of"]

DATASET_FIELD = "spec.initializer.dataset"
#: A back end that starts a data cache for a job sets this class attribute to True.
DATA_CACHE_ATTR = "runs_data_cache"
#: The ``env`` names the cache takes: the file format (``parquet``, ``ipc``, ``csv``:
#: else from the files' suffix), rows per block, and memory per cache node (a
#: Kubernetes quantity; Trainer's name for its workers' memory; default: the job's
#: memory per node, when it asks for one); for ``cache://`` Iceberg tables, the table's
#: metadata file (Trainer's ``METADATA_LOC``) or a ``sqlite:///`` SQL catalog (and its
#: name, default ``default``); ``CLUSTER_SIZE`` (what Trainer's SDK sends: its head plus
#: workers) only as ``numNodes + 1``, which is what the bridge runs (one server per node,
#: each also answering as the head).
ENV_NAMES = ("FORMAT", "BLOCK_ROWS", "WORKER_MEM", "METADATA_LOC", "CATALOG_URI",
             "CATALOG_NAME", "CLUSTER_SIZE")
_FORMATS = ("parquet", "ipc", "csv")
#: The most rows a block may have (a block is one message on the wire).
MAX_BLOCK_ROWS = 1 << 24


@dataclass(frozen=True)
class DataCacheSpec:
    """What the job's cache servers load and how."""

    #: An absolute path or ``file://`` URI (a file or a directory of files).
    source: str
    fmt: str | None = None
    block_rows: int | None = None
    #: The most bytes each cache node may hold; None: the job's memory per node, if any.
    memory_bytes: int | None = None
    #: ``cache://`` only: the Iceberg table's metadata file, or its SQL catalog.
    metadata_location: str | None = None
    catalog_uri: str | None = None
    catalog_name: str | None = None


def serve_options(spec: DataCacheSpec, memory_bytes: int | None = None) -> list[str]:
    """The ``data-cache serve``/``run`` options for ``spec`` (``memory_bytes``: the limit
    when the spec sets none)."""
    out = ["--source", spec.source]
    for flag, value in (("--format", spec.fmt), ("--block-rows", spec.block_rows),
                        ("--memory-limit", spec.memory_bytes or memory_bytes),
                        ("--iceberg-metadata", spec.metadata_location),
                        ("--iceberg-catalog", spec.catalog_uri),
                        ("--iceberg-catalog-name", spec.catalog_name)):
        if value:
            out += [flag, str(value)]
    return out


def _env(entries: Any) -> dict[str, str]:
    field = f"{DATASET_FIELD}.env"
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise ValidationError([(field, "must be a list of {name, value}")])
    out: dict[str, str] = {}
    for i, entry in enumerate(entries):
        where = f"{field}[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ValidationError([(where, "must be {name, value}")])
        name, value = entry["name"], entry.get("value")
        if name not in ENV_NAMES:
            raise ValidationError([(f"{where}.name", f"{name!r} is not one of "
                                    f"{', '.join(ENV_NAMES)} (what the data cache takes)")])
        if "valueFrom" in entry or not isinstance(value, str):
            raise ValidationError([(f"{where}.value", "must be a string value")])
        out[name] = value
    return out


def _source(uri: Any) -> str:
    field = f"{DATASET_FIELD}.storageUri"
    if not isinstance(uri, str) or not uri:
        raise ValidationError([(field, "required: the dataset to cache (file:///path)")])
    if "\x00" in uri or len(uri) > 4096:
        raise ValidationError([(field, "must be a path of at most 4096 characters")])
    parsed = urlparse(uri)
    if parsed.scheme and (parsed.query or parsed.fragment):
        raise ValidationError([(field, "has a query or fragment; the cache would not use it")])
    if parsed.scheme == "cache":
        parts = [parsed.netloc, *[p for p in parsed.path.split("/") if p]]
        if len(parts) != 2 or not all(parts):
            raise ValidationError([(field, "an Iceberg table is cache://<schema>/<table>")])
        return uri
    if parsed.scheme not in ("", "file"):
        raise ValidationError([(field, f"scheme {parsed.scheme!r} is not served: the bridge's "
                                "dataset initializer is its data cache, which reads the "
                                "shared file system (an absolute path or file:///path) or "
                                "an Iceberg table (cache://<schema>/<table>)")])
    path = parsed.path if parsed.scheme else uri
    if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
        raise ValidationError([(field, "a file:// URI names a local path (file:///path)")])
    if not path.startswith("/"):
        raise ValidationError([(field, "the dataset path must be absolute")])
    return uri


def _local_path(value: str, name: str) -> str:
    parsed = urlparse(value)
    path = parsed.path if parsed.scheme == "file" else value
    if (parsed.scheme not in ("", "file") or parsed.netloc not in ("", "localhost")
            or parsed.query or parsed.fragment or not path.startswith("/")
            or "\x00" in value):
        raise ValidationError([(f"{DATASET_FIELD}.env[{name}]",
                                "must be an absolute path or file:///path")])
    return value


def _iceberg(env: dict[str, str], source: str, num_nodes: int) -> dict[str, str | None]:
    iceberg = urlparse(source).scheme == "cache"
    names = [n for n in ("METADATA_LOC", "CATALOG_URI", "CATALOG_NAME") if n in env]
    if not iceberg:
        if names:
            raise ValidationError([(f"{DATASET_FIELD}.env[{names[0]}]",
                                    "only for an Iceberg table (cache://<schema>/<table>)")])
        return {}
    if ("METADATA_LOC" in env) == ("CATALOG_URI" in env):
        raise ValidationError([(f"{DATASET_FIELD}.env", "an Iceberg table needs exactly one "
                                "of METADATA_LOC (its metadata file) and CATALOG_URI "
                                "(a sqlite:/// SQL catalog)")])
    catalog = env.get("CATALOG_URI")
    if catalog is not None and not (catalog.startswith("sqlite:////")
                                    and "\x00" not in catalog):
        raise ValidationError([(f"{DATASET_FIELD}.env[CATALOG_URI]",
                                "must be a sqlite:////absolute/path SQL catalog")])
    if "CLUSTER_SIZE" in env and env["CLUSTER_SIZE"] != str(num_nodes + 1):
        raise ValidationError([(f"{DATASET_FIELD}.env[CLUSTER_SIZE]",
                                f"the bridge runs one cache server per node of the job, each "
                                f"also the head: {num_nodes + 1} (numNodes + 1) in "
                                f"Trainer's terms, not {env['CLUSTER_SIZE']!r}")])
    return {"metadata_location": _local_path(env["METADATA_LOC"], "METADATA_LOC")
            if "METADATA_LOC" in env else None,
            "catalog_uri": catalog, "catalog_name": env.get("CATALOG_NAME")}


def data_cache_of(job: TrainJob, num_nodes: int = 1,
                  model_step: bool = False) -> DataCacheSpec | None:
    """The job's data cache (see the module docstring); ``num_nodes``: the job's;
    ``model_step``: its runtime has a model initializer (bridge/runtime_steps.py), which
    ``spec.initializer.model`` configures."""
    init = job.spec.initializer
    if not init:
        return None
    if not isinstance(init, dict):
        raise ValidationError([("spec.initializer", "must be an object")])
    if init.get("model") is not None and not model_step:
        raise ValidationError([("spec.initializer.model", "the job's runtime has no model "
                                "initializer step: fetch the model in the training command")])
    unknown = sorted(set(init) - {"dataset", "model"})
    if unknown:
        raise ValidationError([(f"spec.initializer.{unknown[0]}", "unknown field")])
    dataset = init.get("dataset")
    if dataset is None:
        return None
    if not isinstance(dataset, dict):
        raise ValidationError([(DATASET_FIELD, "must be an object")])
    if dataset.get("secretRef") is not None:
        raise ValidationError([(f"{DATASET_FIELD}.secretRef", "the data cache reads the shared "
                                "file system as the job's user: no secret is used")])
    unknown = sorted(set(dataset) - {"storageUri", "env", "secretRef"})
    if unknown:
        raise ValidationError([(f"{DATASET_FIELD}.{unknown[0]}", "unknown field")])
    source = _source(dataset.get("storageUri"))
    env = _env(dataset.get("env"))
    fmt = env.get("FORMAT")
    if fmt is not None and fmt not in _FORMATS:
        raise ValidationError([(f"{DATASET_FIELD}.env[FORMAT]",
                                f"{fmt!r} is not one of {', '.join(_FORMATS)}")])
    block_rows = None
    if "BLOCK_ROWS" in env:
        raw = env["BLOCK_ROWS"]
        if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_BLOCK_ROWS:
            raise ValidationError([(f"{DATASET_FIELD}.env[BLOCK_ROWS]",
                                    f"must be an integer in 1..{MAX_BLOCK_ROWS}, not {raw!r}")])
        block_rows = int(raw)
    memory = None
    if "WORKER_MEM" in env:
        try:
            memory = memory_bytes(env["WORKER_MEM"])
        except ValueError:
            memory = 0
        if memory <= 0:
            raise ValidationError([(f"{DATASET_FIELD}.env[WORKER_MEM]", "must be a positive "
                                    f"memory quantity (e.g. 2Gi), not {env['WORKER_MEM']!r}")])
    if "CLUSTER_SIZE" in env and urlparse(source).scheme != "cache":
        raise ValidationError([(f"{DATASET_FIELD}.env[CLUSTER_SIZE]",
                                "only for an Iceberg table (cache://<schema>/<table>)")])
    iceberg = _iceberg(env, source, num_nodes)
    return DataCacheSpec(source=source, fmt=fmt, block_rows=block_rows, memory_bytes=memory,
                         **iceberg)
