"""TrainJob → JobSet, as Kubeflow Trainer lays it out (pure functions).

Layout (``jobset.x-k8s.io/v1alpha2``), one JobSet per TrainJob, named like it; what
Trainer's controller decides is in :mod:`k8s_adapter.trainer_layout` (and checked
against a fixture derived from Trainer's source: tests/unit/test_trainer_layout.py):

* replicatedJob ``node`` (1 Job, ``parallelism = completions = numNodes``,
  ``completionMode: Indexed``), container ``node``; the pod ``restartPolicy`` and the
  Job's ``backoffLimit`` are the runtime template's, else what Trainer's JobSets get
  (``OnFailure``; ``backoffLimit`` unset, so Kubernetes' 6); no JobSet
  ``failurePolicy`` unless the runtime's template has one (the first failed Job fails
  the JobSet: a failing job ends Failed once its Job's backoff is spent, or at its
  ``activeDeadlineSeconds``);
* ``network.subdomain`` = the JobSet name with ``enableDNSHostnames`` and
  ``publishNotReadyAddresses``, so pod ``i`` is ``<name>-node-0-<i>.<name>`` — the
  names :func:`mpi_launch.allocation.jobset_allocation` gives, so every rank sees the
  same hosts in the same order as on Slurm or Flux (Trainer gets the same from
  JobSet's defaults; the bridge writes them out, and also ``restartPolicy`` and
  ``completionMode``, which JobSet would default to the same values);
* the rank environment Trainer sets (``PET_NNODES``, ``PET_NPROC_PER_NODE`` resolved
  as Trainer resolves it, ``PET_NODE_RANK`` from the pod's completion index,
  ``PET_MASTER_ADDR``, ``PET_MASTER_PORT`` = 29500, the torch container's
  ``containerPort``; ``JAX_*`` / ``DMLC_*`` for those runtimes) plus the ``JOBSET_*``
  variables ``mpi-launch`` reads inside a pod. An explicit ``--ntasks-per-node`` /
  ``--ntasks`` (the bridge's scheduling options) is written as the number instead;
* MPI runtimes: replicatedJob ``launcher`` (1 pod, runs the command: ``mpirun …``)
  before ``node`` (the other pods run ``sshd``, Trainer's image convention); the
  hostfile (from :mod:`mpi_launch.hostfile`) is a ConfigMap ``<name>-mpi-hostfile``
  mounted at ``/etc/mpi`` and named by the launcher's variables (plus Trainer's
  ``OMPI_MCA_orte_set_default_slots`` and ``OMPI_MCA_plm_rsh_args`` for OpenMPI); the
  SSH keys are the Secret ``<name>-mpi-ssh-auth`` at ``/root/.ssh``
  (:mod:`k8s_adapter.sshauth`). Unlike Trainer, which mounts the hostfile on the
  launcher only, the bridge mounts it (and sets the variables) on every pod, so that
  ``mpi-launch`` finds the same hosts in any pod;
* a data cache (``spec.initializer.dataset``): replicatedJob ``data-cache`` first, the
  others depending on it (:mod:`k8s_adapter.data_cache`);
* ``spec.podSpecOverrides`` (Trainer's, written as patches: k8s_adapter/overrides.py)
  and then ``spec.runtimePatches`` (Trainer ≥ 2.3) are merged last: maps merge, lists of
  named items (replicatedJobs, containers, env, volumes …) merge by ``name`` (so a job
  may set its own ``restartPolicy`` / ``backoffLimit``).

Labels ``app.kubernetes.io/managed-by=hpc-bridge`` and ``hpc-bridge.io/job-uid``
(the idempotency key) are on the JobSet and on every pod.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bridge import torchtune
from bridge.backend import BackendRejected, SubmitRequest
from bridge.jobid import identity_env
from bridge.model import ValidationError
from bridge.runtime_steps import SSH_AUTH_MOUNT_PATH, TORCHTUNE, TORCHTUNE_RDZV
from bridge.runtimes import Framework, MpiImplementation
from bridge.scheduling import scheduling_of
from k8s_adapter import data_cache, runtime_template, sshauth, trainer_layout
from k8s_adapter.affinity import keep_affinity, node_affinity
from k8s_adapter.jobset_merge import apply_template_patch
from k8s_adapter.overrides import as_runtime_patches
from k8s_adapter.pod_resources import container_resources, torch_nproc_per_node
from k8s_adapter.podsecurity import dig
from mpi_launch.allocation import Host, jobset_allocation
from mpi_launch.hostfile import hostfile_env, render_hostfile

GROUP = "jobset.x-k8s.io"
VERSION = "v1alpha2"
PLURAL = "jobsets"
API_VERSION = f"{GROUP}/{VERSION}"

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "hpc-bridge"
UID_LABEL = "hpc-bridge.io/job-uid"
JOB_ID_LABEL = "hpc-bridge.io/job-id"
#: Trainer's own labels, so tools written for Trainer find the pods.
TRAINJOB_NAME_LABEL = "trainer.kubeflow.org/trainjob-name"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
COMPLETION_INDEX = trainer_layout.COMPLETION_INDEX

NODE = "node"
LAUNCHER = "launcher"
#: Trainer's torch master port (each pod has its own IP, so one fixed port serves).
TORCH_PORT = trainer_layout.TRAINER_PORT
#: Coordinator / tracker port of JAX and XGBoost pods.
COORDINATOR_PORT = trainer_layout.TRAINER_PORT
HOSTFILE_DIR = "/etc/mpi"
HOSTFILE_KEY = "hostfile"
SSHD_COMMAND = ("/usr/sbin/sshd", "-De")

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
#: The longest pod hostname part is ``<name>-launcher-0-<index>``; a label is ≤ 63.
_MAX_NAME = 63 - len("-launcher-0-") - 5
#: With a launcher (MPI), JobSet's webhook also wants its pod's *name*,
#: ``<name>-launcher-0-0`` and the Job controller's 5-character suffix, within 63.
_MAX_NAME_WITH_LAUNCHER = 63 - len("-launcher-0-0") - len("-abcde")


@dataclass(frozen=True)
class JobSetOptions:
    """What the back end's configuration adds to every JobSet."""

    #: Image of a job that names none (``None``: such a job is refused).
    default_image: str | None = None
    service_account: str | None = None
    #: Node label keys of the topology levels, top first (for pinned placements).
    topology_labels: tuple[str, ...] = ()
    #: Pod-level ``schedulerName`` (e.g. a gang scheduler), if any.
    scheduler_name: str | None = None


def jobset_name(request: SubmitRequest) -> str:
    """The JobSet's name: the TrainJob's when it makes valid pod hostnames (and, with an
    MPI launcher, a launcher pod name JobSet accepts), else a cleaned, shortened form
    with a hash of the uid (stable across retries)."""
    name = request.job.metadata.name or ""
    limit = (_MAX_NAME_WITH_LAUNCHER if request.plan.framework is Framework.MPI
             else _MAX_NAME)
    if _DNS1035.fullmatch(name) and len(name) <= limit:
        return name
    clean = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    clean = re.sub(r"^[^a-z]+", "", clean) or "tj"
    suffix = hashlib.sha256(request.job_uid.encode()).hexdigest()[:8]
    return f"{clean[:limit - 9].rstrip('-')}-{suffix}"


def hostfile_configmap_name(name: str) -> str:
    return f"{name}-mpi-hostfile"


def _env(items: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"name": k, "value": v} for k, v in items.items()]


def _index_env(name: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}}


def _is_mpi(request: SubmitRequest) -> bool:
    """MPI layout (launcher + sshd nodes + hostfile), for a command or a tbatch script
    alike: as on Slurm, the script runs once, on the first node, with the hostfile."""
    return request.plan.framework is Framework.MPI


def _hosts(name: str, request: SubmitRequest) -> list[str]:
    """Pod DNS names in rank order (launcher first for MPI with runLauncherAsNode)."""
    plan = request.plan
    slots = request.job_shape.ranks_per_node or 1
    if _is_mpi(request):
        workers = jobset_allocation(name, nodes=max(plan.num_nodes - 1, 1), slots=slots,
                                    pod_index=0).names
        launcher = jobset_allocation(name, nodes=1, slots=slots, pod_index=0,
                                     replicated_job=LAUNCHER).names
        return [*launcher, *workers[: plan.num_nodes - 1]]
    return jobset_allocation(name, nodes=plan.num_nodes, slots=slots, pod_index=0).names


def hostfile_text(name: str, request: SubmitRequest) -> str:
    """The MPI hostfile of the job's pods (``mpi_launch`` renders it)."""
    slots = request.job_shape.ranks_per_node or 1
    flavour = _mpi_flavour(request)
    return render_hostfile(flavour, [Host(h, slots) for h in _hosts(name, request)])


def _mpi_flavour(request: SubmitRequest) -> str:
    """``mpi-launch`` flavour of the job (typed at admission: IntelMPI is Intel here too)."""
    return (request.plan.mpi_implementation or MpiImplementation.OPENMPI).flavour


def rank_env(name: str, request: SubmitRequest) -> list[dict[str, Any]]:
    """The launcher environment of a node pod (static values and downward-API rank)."""
    plan = request.plan
    hosts = _hosts(name, request)
    nodes = plan.num_nodes
    procs = request.job_shape.ranks_per_node
    env: list[dict[str, Any]] = _env({
        "JOBSET_NAME": name, "JOBSET_NNODES": str(nodes),
        "JOBSET_NPROC_PER_NODE": str(procs or 1),
        **identity_env(request.job_id, request.job_uid, request.array),
    })
    fw = plan.framework
    if fw is Framework.TORCH:
        env += _env({"PET_NNODES": str(nodes),
                     "PET_NPROC_PER_NODE": torch_nproc_per_node(request)})
        if not plan.extra.get(TORCHTUNE):  # torchtune: none, as in Trainer
            env += _env({"PET_MASTER_ADDR": hosts[0], "PET_MASTER_PORT": str(TORCH_PORT)})
        env.append(_index_env("PET_NODE_RANK"))
    elif fw is Framework.JAX:
        env += _env({"JAX_NUM_PROCESSES": str(nodes),
                     "JAX_COORDINATOR_ADDRESS": f"{hosts[0]}:{COORDINATOR_PORT}",
                     "JAX_COORDINATOR_PORT": str(COORDINATOR_PORT)})
        env.append(_index_env("JAX_PROCESS_ID"))
    elif fw is Framework.XGBOOST:
        env += _env({"DMLC_TRACKER_URI": hosts[0], "DMLC_TRACKER_PORT": str(COORDINATOR_PORT),
                     "DMLC_NUM_WORKER": str(nodes)})
        env.append(_index_env("DMLC_TASK_ID"))
    elif _is_mpi(request):
        path = f"{HOSTFILE_DIR}/{HOSTFILE_KEY}"
        env += _env(hostfile_env(_mpi_flavour(request), path,
                                 [Host(h, procs or 1) for h in hosts]))
        if _mpi_flavour(request) == "openmpi":
            own = {k for k, _ in plan.env}  # the job's own value of one of these stays
            env += _env({k: v for k, v in trainer_layout.openmpi_env(procs or 1).items()
                         if k not in own})
    return env


def _command(request: SubmitRequest) -> tuple[list[str], list[str]]:
    plan = request.plan
    if plan.batch_script is not None:
        # The script is one argv element of bash, never pasted into another string.
        return ["/bin/bash", "-c", plan.batch_script, "tbatch-script"], list(plan.args)
    command = list(plan.command)
    if plan.extra.get(TORCHTUNE_RDZV):  # Trainer's torchtune: after "tune run"
        host = _hosts(jobset_name(request), request)[0]
        command.insert(len(torchtune.ENTRYPOINT),
                       f"{torchtune.RDZV_ARG}={host}:{TORCH_PORT}")
    return command, list(plan.args)


def _pod_template(name: str, rjob: str, request: SubmitRequest, options: JobSetOptions,
                  labels: dict[str, str], image: str, command: list[str], args: list[str],
                  env: list[dict[str, Any]], mpi: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"name": NODE, "image": image, "env": env}
    if command:
        container["command"] = command
    if args:
        container["args"] = args
    resources = container_resources(request)
    if resources:
        container["resources"] = resources
    if request.plan.framework in (Framework.TORCH, Framework.JAX, Framework.XGBOOST):
        # Trainer v2.3 opens its trainer port on the node container of these three
        # (recorded: tests/fixtures/trainer-v2.3-jobsets/).
        container["ports"] = [{"containerPort": TORCH_PORT}]
    spec: dict[str, Any] = {"restartPolicy": trainer_layout.restart_policy(
        request.plan.extra.get(trainer_layout.TEMPLATE_KEY), rjob,
        batch=request.plan.batch_script is not None), "containers": [container]}
    if mpi:
        container["volumeMounts"] = [{"name": "mpi-hostfile", "mountPath": HOSTFILE_DIR},
                                     sshauth.volume_mount(
                                         request.plan.extra.get(SSH_AUTH_MOUNT_PATH))]
        spec["volumes"] = [{"name": "mpi-hostfile", "configMap": {
            "name": hostfile_configmap_name(name),
            "items": [{"key": HOSTFILE_KEY, "path": HOSTFILE_KEY, "mode": 0o444}]}},
            sshauth.volume(name)]
    affinity = node_affinity(request)
    if affinity is not None:
        spec["affinity"] = affinity
    if options.service_account:
        spec["serviceAccountName"] = options.service_account
    if options.scheduler_name:
        spec["schedulerName"] = options.scheduler_name
    return {"metadata": {"labels": dict(labels)}, "spec": spec}


def active_deadline(request: SubmitRequest) -> int | None:
    """Each Job's ``activeDeadlineSeconds``: ``--time`` as the job gave it (its
    scheduling annotation), else the TrainJob's own ``activeDeadlineSeconds`` (the job
    shape's precedence), else ``--time`` as the engine filled it in. As with any
    Kubernetes Job, the deadline counts from the Job's start, Pending pods included."""
    deadline = request.job.spec.active_deadline_seconds
    limit = request.options.time_limit_minutes
    try:
        given = scheduling_of(request.job).time_limit_minutes is not None
    except ValidationError:
        given = False
    if limit is not None and (given or deadline is None):
        return limit * 60
    return deadline


def _keep_deadline(job_spec: dict[str, Any], deadline: int | None) -> None:
    """A patch may shorten a Job's ``activeDeadlineSeconds``, never lengthen it."""
    patched = job_spec.get("activeDeadlineSeconds")
    if deadline and not (isinstance(patched, int) and 0 < patched < deadline):
        job_spec["activeDeadlineSeconds"] = deadline


def _replicated_job(rjob: str, count: int, pod: dict[str, Any], deadline: int | None,
                    template: Any, batch: bool = False,
                    ancestor: str = "trainer") -> dict[str, Any]:
    job_spec: dict[str, Any] = {"parallelism": count, "completions": count,
                                "completionMode": "Indexed",
                                **trainer_layout.job_spec_defaults(template, rjob, batch),
                                "template": pod}
    if deadline:
        job_spec["activeDeadlineSeconds"] = deadline
    return {"name": rjob, "replicas": 1,
            "template": {"metadata": {"labels": {ANCESTOR_LABEL: ancestor}},
                         "spec": job_spec}}


def render_jobset(request: SubmitRequest, options: JobSetOptions,
                  owner_reference: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JobSet for ``request``. The image is the plan's (the TrainJob's, else its
    runtime's trainer container's: :meth:`bridge.runtimes.RuntimeCatalog.resolve`), else
    ``options.default_image``; the site's ``default_image`` goes before a built-in
    runtime's image (``plan.builtin_image``: a mirror for an offline cluster). Raises
    :class:`BackendRejected` for a job that cannot run on Kubernetes (no image from any
    of them, a runtime patch that is not a mapping)."""
    job = request.job
    plan = request.plan
    image = ((options.default_image or plan.image) if plan.builtin_image
             else plan.image or options.default_image)
    if not image:
        raise BackendRejected("spec.trainer.image: required by the Kubernetes back end "
                              "(neither the job nor its runtime names an image and the "
                              "back end has no default_image)")
    name = jobset_name(request)
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, UID_LABEL: request.job_uid,
              JOB_ID_LABEL: str(request.job_id), TRAINJOB_NAME_LABEL: job.metadata.name}
    command, args = _command(request)
    env = [*_env(dict(plan.env)), *rank_env(name, request)]
    cache = plan.data_cache
    if cache is not None:
        env = data_cache.training_env(env, name, plan.num_nodes)
    mpi = _is_mpi(request)
    deadline = active_deadline(request)
    replicated: list[dict[str, Any]] = []
    target = NODE
    template = plan.extra.get(trainer_layout.TEMPLATE_KEY)
    batch = plan.batch_script is not None  # sbatch's semantics: no retries
    if mpi:
        launcher_pod = _pod_template(name, LAUNCHER, request, options, labels, image,
                                     command, args, env, mpi=True)
        replicated.append(_replicated_job(LAUNCHER, 1, launcher_pod, deadline, template,
                                          batch))
        if plan.num_nodes > 1:
            node_pod = _pod_template(name, NODE, request, options, labels, image,
                                     list(SSHD_COMMAND), [], env, mpi=True)
            replicated.append(_replicated_job(NODE, plan.num_nodes - 1, node_pod, deadline,
                                              template, batch))
        target = LAUNCHER
    else:
        pod = _pod_template(name, NODE, request, options, labels, image, command, args, env,
                            mpi=False)
        replicated.append(_replicated_job(NODE, plan.num_nodes, pod, deadline, template,
                                          batch))
    if cache is not None:  # first: the others wait for it (k8s_adapter/data_cache.py)
        pod = _pod_template(name, NODE, request, options, labels, image, [], [], [], False)
        replicated.insert(0, data_cache.replicated_job(
            _replicated_job(data_cache.CACHE, plan.num_nodes, pod, deadline, None,
                            ancestor=data_cache.ANCESTOR), name, cache, plan.num_nodes,
            image, trainer_layout.job_spec_defaults(template, NODE, batch)))
    metadata: dict[str, Any] = {"name": name, "namespace": job.metadata.namespace,
                                "labels": dict(labels),
                                "annotations": {UID_LABEL: request.job_uid}}
    if owner_reference is not None:
        metadata["ownerReferences"] = [dict(owner_reference)]
    body: dict[str, Any] = {
        "apiVersion": API_VERSION, "kind": "JobSet", "metadata": metadata,
        "spec": {
            "suspend": bool(job.spec.suspend),
            "network": {"enableDNSHostnames": True, "subdomain": name,
                        "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [target]},
            **trainer_layout.jobset_spec_defaults(template, batch),
            "replicatedJobs": replicated,
        },
    }
    pod_defaults = {k: v for k, v in (("serviceAccountName", options.service_account),
                                      ("schedulerName", options.scheduler_name)) if v}
    runtime_template.graft(body, template, job, (NODE, LAUNCHER, data_cache.CACHE), target,
                           plan.initializers, pod_defaults)
    sizes = {rj["name"]: _size(rj) for rj in body["spec"]["replicatedJobs"]}
    js_spec = {k: body["spec"].get(k) for k in _KEPT_SPEC}
    own_annotations = dict(metadata["annotations"])
    for field, patches in (("spec.podSpecOverrides",
                            as_runtime_patches(job.spec.pod_spec_overrides)),
                           ("spec.runtimePatches", job.spec.runtime_patches or [])):
        for i, patch in enumerate(patches):
            if not isinstance(patch, Mapping):
                raise BackendRejected(f"{field}[{i}]: must be a mapping")
            template = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
            if not isinstance(template, Mapping):
                raise BackendRejected(
                    f"{field}[{i}].trainingRuntimeSpec.template: must be a mapping")
            body = apply_template_patch(body, template, f"{field}[{i}]")
    _check_pods(body)
    # Whatever the patches said, the bridge's identity labels, the user's --exclude and
    # --constraint, the pinned hosts and --time stay; so do the job's size (the nodes
    # admission counted: replicas, parallelism, completions) and who manages the
    # JobSet and when it runs (managedBy, suspend).
    affinity = node_affinity(request)
    for key, value in js_spec.items():
        _restore(body["spec"], key, value)
    for rj in body["spec"]["replicatedJobs"]:
        replicas, parallelism, completions = sizes[rj["name"]]
        _restore(rj, "replicas", replicas)
        _restore(rj["template"]["spec"], "parallelism", parallelism)
        _restore(rj["template"]["spec"], "completions", completions)
        pod_meta = rj["template"]["spec"]["template"].setdefault("metadata", {})
        pod_meta.setdefault("labels", {}).update(labels)
        keep_affinity(rj["template"]["spec"]["template"].setdefault("spec", {}), affinity)
        _keep_deadline(rj["template"]["spec"], deadline)
    if cache is not None:
        data_cache.finish(body, target, NODE, {"mpi-hostfile", sshauth.VOLUME})
    # The JobSet's own labels and annotations under the bridge's prefix are the bridge's
    # word (its identity, what it recorded: k8s_adapter/kueue.py), never a patch's.
    for key in ("labels", "annotations"):
        mine = labels if key == "labels" else own_annotations
        body["metadata"][key] = {
            **{k: v for k, v in (body["metadata"].get(key) or {}).items()
               if not k.startswith(BRIDGE_PREFIX)}, **mine}
    return body


def _check_pods(body: Mapping[str, Any]) -> None:
    """Refuse (:class:`BackendRejected`) a JobSet whose replicated jobs, pod specs or
    containers are not what Kubernetes takes (a runtime's template or a patch can make
    them anything): every later step reads them as mappings and lists of mappings."""
    for rj in body["spec"]["replicatedJobs"]:
        name = rj.get("name") if isinstance(rj, Mapping) else rj
        pod = dig(rj, "template", "spec", "template", "spec")
        if not isinstance(pod, Mapping):
            raise BackendRejected(f"replicatedJob {name!r}: template.spec.template.spec must "
                                  f"be a mapping (the runtime's template or "
                                  f"spec.runtimePatches)")
        for key in ("containers", "initContainers", "volumes"):
            _check_named(name, f"pod {key}", pod.get(key))
        for key in ("containers", "initContainers"):
            for c in pod.get(key) or ():
                for field in ("env", "volumeMounts"):  # a name each, in Kubernetes
                    _check_named(name, f"container {c['name']!r} {field}", c.get(field))


def _check_named(rjob: object, what: str, items: object) -> None:
    """Refuse ``items`` unless absent or a list of mappings with a string ``name`` each."""
    if items is not None and not (isinstance(items, list) and all(
            isinstance(i, Mapping) and isinstance(i.get("name"), str) for i in items)):
        raise BackendRejected(f"replicatedJob {rjob!r}: {what} must be a list of named "
                              f"mappings (the runtime's template or spec.runtimePatches)")


#: The prefix of the bridge's own labels and annotations.
BRIDGE_PREFIX = "hpc-bridge.io/"


#: JobSet spec fields the bridge sets or leaves unset that no patch may change.
_KEPT_SPEC = ("managedBy", "suspend")


def _restore(obj: dict[str, Any], key: str, value: Any) -> None:
    """``obj[key]`` back to ``value`` (absent when it was absent)."""
    if value is None:
        obj.pop(key, None)
    else:
        obj[key] = value


def _size(rj: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """A replicated job's ``replicas`` and its Job's ``parallelism`` and ``completions``."""
    spec = rj["template"]["spec"]
    return rj.get("replicas"), spec.get("parallelism"), spec.get("completions")


def controller_reference(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    """An ``ownerReferences`` entry making ``name`` the object's controller (the object
    is garbage-collected with it, and cannot outlive a foreground delete)."""
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
            "controller": True, "blockOwnerDeletion": True}


def hostfile_configmap(name: str, namespace: str, request: SubmitRequest,
                       owner_uid: str | None) -> dict[str, Any]:
    """The ConfigMap with the MPI hostfile, owned by the JobSet (garbage-collected with it)."""
    meta: dict[str, Any] = {"name": hostfile_configmap_name(name), "namespace": namespace,
                            "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE,
                                       UID_LABEL: request.job_uid}}
    if owner_uid:
        meta["ownerReferences"] = [controller_reference(API_VERSION, "JobSet", name, owner_uid)]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
            "data": {HOSTFILE_KEY: hostfile_text(name, request)}}


def needs_hostfile(request: SubmitRequest) -> bool:
    return _is_mpi(request)


# --------------------------------------------------------------------------- status
