"""A TrainJob's data cache (``spec.initializer.dataset``: bridge/dataset.py, data_cache/)
on Kubernetes: one more replicated job of the job's JobSet (pure functions).

Layout, when ``plan.data_cache`` is set (:func:`replicated_job`, :func:`finish`):

* replicatedJob ``data-cache``, **first** in the JobSet: 1 Job, ``parallelism =
  completions = numNodes`` (one server per training node), ``completionMode:
  Indexed``, container ``data-cache`` (the trainer's image, which must have
  hpc-bridge with pyarrow: ``data-cache`` on its ``PATH``) running ``data-cache serve``
  with ``--index`` = the pod's completion index (downward API, through ``$(VAR)``
  expansion), ``--count N``, ``--port 50051`` (Trainer's cache port), ``--advertise``
  its own stable name and ``--peers`` every server's address
  ``grpc://<jobset>-data-cache-0-<i>.<jobset>:50051`` (the JobSet's subdomain), and a
  TCP readiness probe on 50051 (the server listens only once its partition is loaded).
  ``WORKER_MEM`` is the pod's memory request and limit; the server keeps its data under
  :func:`data_budget` of it. The pod is the node pod's otherwise: its
  ``restartPolicy``, ``backoffLimit``, ``activeDeadlineSeconds``, affinity, service
  account and scheduler; after the patches it also mounts, read-only, what the
  training container mounts (so that ``file:///path`` is where training sees it);
* every other replicated job (``node``; ``launcher`` for MPI) ``dependsOn:
  [{name: data-cache, status: Ready}]`` (JobSet ≥ v0.8): JobSet creates their Jobs
  only once every cache pod is ready. Their containers get ``HPC_BRIDGE_DATA_CACHE``
  (the ``grpc+tls://`` address list, in server order) and the job's credentials;
* the credentials (:func:`data_cache.credentials.generate`: a token of 32 random bytes,
  hex; a self-signed TLS certificate and key, with which servers and readers speak
  mutual TLS) are a per-job Secret ``<jobset>-data-cache-token`` (:func:`secret`,
  keys ``token``, ``cert.pem``, ``key.pem``; ``immutable``), made before the JobSet and
  then handed to it as owner, as the MPI Secret is (k8s_adapter/backend.py): a retry
  after a crash keeps the Secret an earlier attempt made, so every pod has the same
  credentials (``secretKeyRef``, never a literal value in the JobSet).

Trainer's own cache is a LeaderWorkerSet ``<trainjob>-cache`` behind a Service
``<trainjob>-cache-service:50051``, without authentication; here the servers are pods
of the job's own JobSet, reached one by one by their stable names, over mutual TLS with
a token.

Contract: :func:`check_name` (called by :func:`replicated_job`) raises
:class:`BackendRejected` for a JobSet name too long for the cache's pod names; every
user value in the container's arguments is escaped against ``$(VAR)`` expansion.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

from bridge.backend import BackendRejected
from bridge.dataset import DATASET_FIELD, DataCacheSpec, serve_options
from bridge.runtime_steps import ANCESTOR_LABEL, STEP_CONTAINERS
from data_cache.credentials import (
    CERT_ENV,
    FILES,
    KEY_ENV,
    TOKEN_ENV,
    Credentials,
    generate,
    location,
)
from k8s_adapter import trainer_layout

__all__ = ["ADDRESSES_ENV", "CACHE", "PORT", "TOKEN_ENV", "addresses", "check_name",
           "credential_env", "data_budget", "finish", "new_credentials", "replicated_job",
           "secret", "secret_name", "training_env"]

#: The replicated job (and its container).
CACHE = "data-cache"
#: Trainer's data cache port.
PORT = 50051
#: What the training ranks read (data_cache/reader.py, data_cache/server.py).
ADDRESSES_ENV = "HPC_BRIDGE_DATA_CACHE"
#: The cache pod's completion index, for ``$(...)`` in its arguments.
INDEX_ENV = "HPC_BRIDGE_DATA_CACHE_INDEX"
SECRET_SUFFIX = "-data-cache-token"  # noqa: S105 - a name, not a password
COMMAND = "data-cache"
#: Trainer's ``trainjob-ancestor-step`` of a dataset initializer.
ANCESTOR = "dataset-initializer"
#: JobSet's webhook checks pod names with a 5-character suffix ("-abcde") added.
_POD_SUFFIX = len("-abcde")
_MAX_LABEL = 63


def secret_name(jobset: str) -> str:
    return jobset + SECRET_SUFFIX


def _host(jobset: str, index: int | str) -> str:
    """Cache pod ``index``'s stable DNS name (JobSet's hostname + subdomain)."""
    return f"{jobset}-{CACHE}-0-{index}.{jobset}"


def addresses(jobset: str, count: int) -> list[str]:
    """Every cache server's address, in server order."""
    return [location(_host(jobset, i), PORT, True) for i in range(count)]


def check_name(jobset: str, count: int) -> None:
    """BackendRejected when pod ``<jobset>-data-cache-0-<count-1>`` would have a name
    JobSet refuses (with its 5-character suffix, more than 63 characters)."""
    longest = len(f"{jobset}-{CACHE}-0-{count - 1}") + _POD_SUFFIX
    if longest > _MAX_LABEL:
        room = len(jobset) - (longest - _MAX_LABEL)
        raise BackendRejected(
            f"{DATASET_FIELD}: the JobSet name {jobset!r} is too long for the data cache's "
            f"pods ({jobset}-{CACHE}-0-{count - 1}-xxxxx would exceed {_MAX_LABEL} "
            f"characters): give the TrainJob a name of at most {room} characters")


def credential_env(jobset: str) -> list[dict[str, Any]]:
    """The job's cache credentials (token, TLS certificate and key: what
    :func:`data_cache.credentials.from_env` reads) from its Secret."""
    return [{"name": var, "valueFrom": {"secretKeyRef": {
        "name": secret_name(jobset), "key": FILES[field]}}}
        for var, field in ((TOKEN_ENV, "token"), (CERT_ENV, "cert"), (KEY_ENV, "key"))]


def training_env(env: list[dict[str, Any]], jobset: str, count: int) -> list[dict[str, Any]]:
    """``env`` of the training containers with the servers' addresses and the token
    (in place of a value the job gave those names)."""
    return [*(e for e in env if e.get("name") not in (ADDRESSES_ENV, TOKEN_ENV, CERT_ENV,
                                                         KEY_ENV)),
            {"name": ADDRESSES_ENV, "value": ",".join(addresses(jobset, count))},
            *credential_env(jobset)]


def data_budget(memory: int) -> int:
    """The bytes of data a server may hold in a pod of ``memory`` bytes: what is left
    after an eighth for the process itself (interpreter, Arrow Flight, the file batch
    being read), at least 256 MiB of it and at most half the pod."""
    return memory - min(max(memory // 8, 256 << 20), memory // 2)


def _literal(value: str) -> str:
    """``value`` as an argument the kubelet passes unchanged (``$$`` is ``$``)."""
    return value.replace("$", "$$")


def container(jobset: str, spec: DataCacheSpec, count: int, image: str) -> dict[str, Any]:
    """The ``data-cache`` container (see the module docstring)."""
    index = f"$({INDEX_ENV})"
    budget = replace(spec, memory_bytes=data_budget(spec.memory_bytes)
                     if spec.memory_bytes else None)
    args = ["serve", *(_literal(a) for a in serve_options(budget)), "--index", index,
            "--count", str(count)]
    args += ["--port", str(PORT), "--advertise", _host(jobset, index),
             "--peers", ",".join(addresses(jobset, count))]
    out: dict[str, Any] = {
        "name": CACHE, "image": image, "command": [COMMAND], "args": args,
        "env": [{"name": INDEX_ENV, "valueFrom": {"fieldRef": {
            "fieldPath": trainer_layout.COMPLETION_INDEX}}}, *credential_env(jobset)],
        "ports": [{"name": CACHE, "containerPort": PORT}],
        "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 2},
        # A server that cannot load its partition says why on stderr, then exits 1:
        # that line becomes the pod's termination message, and so the job's failure.
        "terminationMessagePolicy": "FallbackToLogsOnError"}
    if spec.memory_bytes:
        memory = str(spec.memory_bytes)
        out["resources"] = {"requests": {"memory": memory}, "limits": {"memory": memory}}
    return out


def replicated_job(rjob: dict[str, Any], jobset: str, spec: DataCacheSpec, count: int,
                   image: str, node_defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The ``data-cache`` replicated job, from ``rjob`` (laid out as a node job of
    ``count`` pods with no container of its own): its one container is the cache's, its
    ``backoffLimit`` the node Job's (``node_defaults``: what
    :func:`k8s_adapter.trainer_layout.job_spec_defaults` gives the node job; not its
    ``podFailurePolicy``, whose rules name the node's containers)."""
    check_name(jobset, count)
    out = copy.deepcopy(rjob)
    out["name"] = CACHE
    job_spec = out["template"]["spec"]
    job_spec["template"]["spec"]["containers"] = [container(jobset, spec, count, image)]
    job_spec.pop("backoffLimit", None)
    if node_defaults.get("backoffLimit") is not None:
        job_spec["backoffLimit"] = node_defaults["backoffLimit"]
    return out


def _pod_spec(rjob: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = rjob["template"]["spec"]["template"]["spec"]
    return spec


def finish(body: dict[str, Any], training: str, training_container: str,
           own_volumes: Collection[str]) -> None:
    """After the patches: every replicated job but the cache and the runtime's
    initializer steps (laid out before it) depends on it (a patch does not change
    that; the JobSet's ``startupPolicy`` goes), and the cache container mounts,
    read-only, what replicated job ``training``'s ``training_container`` mounts, with
    those pod volumes (except ``own_volumes``, the bridge's; a volume or path the cache
    has already stays)."""
    rjobs = {rj["name"]: rj for rj in body["spec"]["replicatedJobs"]}
    # dependsOn orders the set: JobSet refuses it beside startupPolicy InOrder.
    body["spec"].pop("startupPolicy", None)
    for name, rj in rjobs.items():
        labels = ((rj.get("template") or {}).get("metadata") or {}).get("labels") or {}
        if name == CACHE:
            rj.pop("dependsOn", None)
        elif labels.get(ANCESTOR_LABEL) not in STEP_CONTAINERS:  # steps come before it
            # first in the list, with what the runtime's template says
            rj["dependsOn"] = [{"name": CACHE, "status": "Ready"}, *(
                d for d in rj.get("dependsOn") or [] if d.get("name") != CACHE)]
    source, cache = _pod_spec(rjobs[training]), _pod_spec(rjobs[CACHE])
    trainer: Mapping[str, Any] = next((c for c in source.get("containers") or []
                                       if c.get("name") == training_container), {})
    server = next((c for c in cache["containers"] if c.get("name") == CACHE), None)
    if server is None:  # runtime patches replaced the list (an unnamed item, then a new one)
        raise BackendRejected(f"replicatedJob {CACHE!r}: its container {CACHE!r} is gone "
                              f"(spec.runtimePatches replaced the pod's containers); the "
                              f"data cache runs in it")
    mounts = [m for m in trainer.get("volumeMounts") or [] if m.get("name") not in own_volumes]
    if not mounts:
        return
    volumes = {v.get("name"): v for v in source.get("volumes") or []}
    have_volumes = {v.get("name") for v in cache.get("volumes") or []}
    have_paths = {m.get("mountPath") for m in server.get("volumeMounts") or []}
    for mount in mounts:
        if mount.get("mountPath") in have_paths or mount.get("name") not in volumes:
            continue
        server.setdefault("volumeMounts", []).append({**copy.deepcopy(mount), "readOnly": True})
        have_paths.add(mount.get("mountPath"))
        if mount["name"] not in have_volumes:
            cache.setdefault("volumes", []).append(copy.deepcopy(volumes[mount["name"]]))
            have_volumes.add(mount["name"])


def new_credentials() -> Credentials:
    """Fresh credentials: a token of 32 random bytes (hex), a TLS certificate and key."""
    return generate()


def secret(jobset: str, namespace: str, labels: Mapping[str, str],
           creds: Credentials) -> dict[str, Any]:
    """The credentials' Secret (made before its JobSet; the back end hands it to the
    JobSet after, so that it is garbage-collected with it)."""
    values = {"token": creds.token.encode(), "cert": creds.cert or b"", "key": creds.key or b""}
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "immutable": True,
            "metadata": {"name": secret_name(jobset), "namespace": namespace,
                         "labels": dict(labels)},
            "data": {FILES[f]: base64.b64encode(v).decode() for f, v in values.items()}}
