"""Building test inputs for tests/unit: owners, TrainJobs (as a renderer sees them, as a
store or engine admits them), submit requests and node inventories.

Each builder takes the variations the tests need as keyword parameters with defaults;
a test module that wants other defaults wraps it in a line or two of its own."""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from bridge.backend import Inventory, NodeInfo, Owner, SubmitRequest
from bridge.model import (
    ANN_BATCH_SCRIPT,
    ANN_SCHEDULING,
    TrainJob,
    ensure_identity,
    load_document,
    load_trainjob,
)
from bridge.placement import Placement
from bridge.runtimes import RuntimeCatalog
from bridge.scheduling import SchedulingOptions, scheduling_of
from bridge.shape import resolve_shape

# --------------------------------------------------------------------------- owners

ALICE = Owner(uid=1001, gid=1001, user="alice")
BOB = Owner(uid=1002, gid=1002, user="bob")

# --------------------------------------------------------------------------- constants

#: The TrainJob uid of the renderer tests (a valid RFC 4122 uid).
UID = "00000000-0000-4000-8000-000000000001"
IMAGE = "registry.example/train:1"
#: A string every quoting layer must carry through unchanged.
HOSTILE = "it's \"quoted\" $(touch /tmp/pwned) `touch /tmp/pwned` ${HOME} ; rm -rf / # é✓"
API_VERSION = "trainer.kubeflow.org/v1alpha1"


# --------------------------------------------------------------------------- runtimes


def bare_catalog(name: str = "torch-bare", framework: str = "torch") -> RuntimeCatalog:
    """The built-in catalogue plus the ClusterTrainingRuntime ``name`` of ``framework``
    with ``template: {}``: a runtime with no trainer container (no image, no command)."""
    policy = {"numNodes": 1} | ({} if framework == "plain" else {framework: {}})
    runtime = load_document({
        "apiVersion": API_VERSION, "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": framework}},
        "spec": {"mlPolicy": policy}})
    assert not isinstance(runtime, TrainJob)
    return RuntimeCatalog([runtime])


# --------------------------------------------------------------------------- TrainJobs


def trainjob_doc(runtime: str = "plain", *, name: str = "train",
                 namespace: str | None = "team-a", uid: str | None = UID,
                 nodes: int | None = None, procs: int | str | None = None,
                 command: Sequence[str] | None = None, args: Sequence[str] | None = None,
                 env: Mapping[str, str] | None = None, image: str | None = None,
                 resources: dict[str, Any] | None = None, script: str | None = None,
                 annotations: Mapping[str, str] | None = None,
                 deadline: int | None = None, patches: list[dict[str, Any]] | None = None,
                 suspend: bool | None = None) -> dict[str, Any]:
    """A TrainJob document; only what is given is set (``None``: left out). ``script``
    goes in the batch-script annotation, beside ``annotations``."""
    trainer: dict[str, Any] = {}
    if nodes is not None:
        trainer["numNodes"] = nodes
    if procs is not None:
        trainer["numProcPerNode"] = procs
    if command is not None:
        trainer["command"] = list(command)
    if args is not None:
        trainer["args"] = list(args)
    if env:
        trainer["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if image is not None:
        trainer["image"] = image
    if resources is not None:
        trainer["resourcesPerNode"] = resources
    spec: dict[str, Any] = {"runtimeRef": {"name": runtime}, "trainer": trainer}
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    if patches is not None:
        spec["runtimePatches"] = patches
    if suspend is not None:
        spec["suspend"] = suspend
    meta_annotations = dict(annotations or {})
    if script is not None:
        meta_annotations[ANN_BATCH_SCRIPT] = script
    metadata: dict[str, Any] = {"name": name, "annotations": meta_annotations}
    if namespace is not None:
        metadata["namespace"] = namespace
    if uid is not None:
        metadata["uid"] = uid
    return {"metadata": metadata, "spec": spec}


def trainjob(runtime: str = "plain", **fields: Any) -> TrainJob:
    """:func:`trainjob_doc`, loaded: a job as a back end's renderer gets it."""
    return load_trainjob(trainjob_doc(runtime, **fields))


def new_trainjob(name: str = "", *, command: Sequence[str] = ("true",),
                 nodes: int | None = None, scheduling: Mapping[str, object] | None = None,
                 runtime: str = "plain") -> TrainJob:
    """A job as a client sends it (kind, apiVersion, no namespace), given its identity
    as admission does: what the store and engine tests store. ``name`` empty: none
    (identity makes one); ``scheduling``: the scheduling annotation, as JSON."""
    metadata: dict[str, object] = {"name": name} if name else {}
    if scheduling is not None:
        metadata["annotations"] = {ANN_SCHEDULING: json.dumps(scheduling)}
    trainer: dict[str, object] = {"command": list(command)}
    if nodes is not None:
        trainer["numNodes"] = nodes
    return ensure_identity(load_trainjob({
        "kind": "TrainJob", "apiVersion": API_VERSION, "metadata": metadata,
        "spec": {"runtimeRef": {"name": runtime}, "trainer": trainer}}))


def scheduled_trainjob(nodes: int = 2, **options: Any) -> TrainJob:
    """A ``hostname`` job on ``nodes`` nodes with these scheduling options (always
    annotated, ``{}`` for none) and a name of its own: what the engine tests admit."""
    doc = {"metadata": {"name": f"j{time.monotonic_ns()}",
                        "annotations": {ANN_SCHEDULING: SchedulingOptions(
                            **options).model_dump_json(exclude_defaults=True)}},
           "spec": {"runtimeRef": {"name": "plain"},
                    "trainer": {"numNodes": nodes, "command": ["hostname"]}}}
    return ensure_identity(load_trainjob(doc))


# --------------------------------------------------------------------------- requests


def submit_request(job: TrainJob, options: SchedulingOptions | None = None, *,
                   owner: Owner = ALICE, uid: str = UID, job_id: int = 42,
                   placement: Placement | None = None, catalog: RuntimeCatalog | None = None,
                   resolve: bool = False) -> SubmitRequest:
    """A request as the engine builds it (``bridge/engine.py`` ``_request``): the plan from
    ``catalog`` (the built-in one by default). ``options`` ``None``: no options, or with
    ``resolve`` those of the job's annotation; ``resolve`` also stores the shape, as
    admission does (otherwise the request resolves it when asked)."""
    plan = (catalog or RuntimeCatalog()).resolve(job)
    if options is None:
        options = scheduling_of(job) if resolve else SchedulingOptions()
    shape = resolve_shape(job, plan, options) if resolve else None
    return SubmitRequest(job_uid=uid, job_id=job_id, job=job, plan=plan, options=options,
                         owner=owner, placement=placement, shape=shape)


# --------------------------------------------------------------------------- inventories

#: Two leaf switches of two nodes each under one spine (``inventory``'s topology).
BED = {"leaf1": ((), ("node1", "node2")), "leaf2": ((), ("node3", "node4")),
       "spine": (("leaf1", "leaf2"), ())}


def inventory(busy: Collection[str] = ()) -> Inventory:
    """node1..node4 (2 CPUs, 2000 MB, partition ``debug``) on :data:`BED`; the ``busy``
    ones allocated, with no CPU free."""
    return Inventory(nodes=tuple(
        NodeInfo(f"node{i}", "ALLOCATED" if f"node{i}" in busy else "IDLE", 2,
                 0 if f"node{i}" in busy else 2, 2000, 2000, partitions=("debug",))
        for i in range(1, 5)), switches=BED)


def slurm_fields(job: Any) -> dict[str, Any]:
    """The fields of a Slurm job record the bridge reads (a dict's, or a decoded
    :class:`slurm_adapter.listing.JobFields`'), to compare a decoded listing with JSON."""
    from slurm_adapter.listing import JobFields

    return {key: job.get(key) for key in JobFields.__struct_fields__}
