"""What a user's pods may ask for, and the security context they always get (pure).

Defence in depth beside the apiserver (impersonation + Pod Security ``restricted``):

* :func:`privileges_in` lists every privilege a pod spec asks for, as ``(path,
  privilege)`` pairs (:func:`privileges_in_template` adds the AppArmor and seccomp
  annotations of a pod template) — host namespaces, ``hostUsers: false``, volumes other than the
  ones ``restricted`` allows (``hostPath`` …), ``hostPort``, any ``securityContext``
  (pod or container: ``privileged``, added capabilities, ``runAsUser: 0`` …), another
  ``serviceAccountName``, ephemeral containers, and where and before whom the pod runs:
  ``nodeName``, ``priorityClassName``/``priority``, ``schedulerName``,
  ``runtimeClassName``, and a toleration of every taint (no key) or of a reserved one
  (``node-role.kubernetes.io/…``, ``node.kubernetes.io/…``; a GPU taint is fine).
  :func:`check_patches` applies it to the pod templates of a TrainJob's
  ``spec.runtimePatches`` and raises :class:`Forbidden` naming the first field whose
  privilege the admin did not allow (``backends.NAME.allow_privileges``).
* :func:`harden` gives every pod of a JobSet the user's uid/gid and what Pod Security
  ``restricted`` requires (``runAsNonRoot``, ``seccompProfile: RuntimeDefault``,
  ``allowPrivilegeEscalation: false``, ``capabilities.drop: [ALL]``). A field the
  user was allowed to set (``securityContext`` in ``allow_privileges``) keeps the
  user's value; the apiserver still decides.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any

from bridge.errors import BridgeError

#: Volume types Pod Security ``restricted`` allows.
SAFE_VOLUMES = frozenset({"name", "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                          "persistentVolumeClaim", "projected", "secret"})
_HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
_CONTAINER_LISTS = ("initContainers", "containers")
#: Every privilege name :func:`privileges_in` reports (what ``allow_privileges`` takes).
PRIVILEGES = frozenset({*_HOST_NAMESPACES, "hostUsers", "hostPort", "securityContext",
                        "serviceAccountName", "ephemeralContainers", "hostPath", "volumes",
                        "nodeName", "priorityClassName", "schedulerName", "runtimeClassName",
                        "tolerations", "podAffinity"})
#: Pod fields that choose where and before whom a pod runs: a user's pod must not skip
#: the scheduler (``nodeName``), jump the queue or evict other users' pods
#: (``priorityClassName``, ``priority``), leave the back end's scheduler
#: (``schedulerName``) or pick a runtime handler the admin did not vet.
_SCHEDULING_FIELDS = {"nodeName": "nodeName", "priorityClassName": "priorityClassName",
                      "priority": "priorityClassName", "schedulerName": "schedulerName",
                      "runtimeClassName": "runtimeClassName"}
#: Taints a user's pod must not tolerate (nodes kept for the control plane or taken
#: out of service, and the bridge's own: a Slurm-backed pool's nodes, which only pods
#: of a Slurm allocation may use, and a node Slurm has drained); a toleration without a
#: key tolerates them all.
_RESERVED_TAINTS = ("node-role.kubernetes.io/", "node.kubernetes.io/",
                    "node.cloudprovider.kubernetes.io/", "CriticalAddonsOnly",
                    "cluster-autoscaler.kubernetes.io/", "ToBeDeletedByClusterAutoscaler",
                    "hpc-bridge.io/")
#: Node labels a user's pod must not select on: a node's role (the control plane) and
#: the labels only the node's kubelet may not set (``--constraint`` refuses them too),
#: and the bridge's labels of a Slurm allocation's nodes (the pool's own label is
#: harmless to select: its taint keeps every pod off that does not tolerate it).
#: Choosing a node by name is the user's own business (it only narrows where the pod
#: may go; taints still keep it off the control plane).
_RESERVED_LABELS = ("node-role.kubernetes.io/", "node-restriction.kubernetes.io/",
                    "slurm.hpc-bridge.io/")


class Forbidden(BridgeError):
    """A pod asks for a privilege the admin did not allow (answered 403)."""


def privileges_in(pod_spec: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """``(field path, privilege)`` for each privilege ``pod_spec`` asks for."""
    if not isinstance(pod_spec, Mapping):
        return
    for key in _HOST_NAMESPACES:
        if pod_spec.get(key):
            yield f"{where}{key}", key
    if "hostUsers" in pod_spec and pod_spec["hostUsers"] is not True:
        yield f"{where}hostUsers", "hostUsers"
    for key in ("securityContext", "serviceAccountName", "serviceAccount",
                "ephemeralContainers"):
        if pod_spec.get(key):
            yield f"{where}{key}", "serviceAccountName" if key == "serviceAccount" else key
    volumes = pod_spec.get("volumes")
    for i, vol in enumerate(volumes if isinstance(volumes, list) else []):
        for kind in (vol if isinstance(vol, Mapping) else {"invalid": 1}):
            if kind not in SAFE_VOLUMES:
                yield (f"{where}volumes[{i}].{kind}",
                       "hostPath" if kind == "hostPath" else "volumes")
    for list_key in _CONTAINER_LISTS:
        containers = pod_spec.get(list_key)
        for i, ctr in enumerate(containers if isinstance(containers, list) else []):
            if not isinstance(ctr, Mapping):
                continue
            at = f"{where}{list_key}[{i}]."
            if ctr.get("securityContext"):
                yield f"{at}securityContext", "securityContext"
            ports = ctr.get("ports")
            for j, port in enumerate(ports if isinstance(ports, list) else []):
                if isinstance(port, Mapping) and port.get("hostPort"):
                    yield f"{at}ports[{j}].hostPort", "hostPort"


#: Pod annotations that loosen a container's confinement (the pre-field forms).
SECURITY_ANNOTATIONS = ("container.apparmor.security.beta.kubernetes.io/",
                        "seccomp.security.alpha.kubernetes.io/")


def privileges_in_template(template: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """As :func:`privileges_in` for a pod template (its spec and its annotations)."""
    if not isinstance(template, Mapping):
        return
    meta = template.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    for key in annotations if isinstance(annotations, Mapping) else {}:
        if str(key).startswith(SECURITY_ANNOTATIONS):
            yield f"{where}metadata.annotations[{key}]", "securityContext"
    yield from privileges_in(template.get("spec"), f"{where}spec.")


def scheduling_privileges_in(pod_spec: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """``(field path, privilege)`` for each field of a user's pod spec that chooses
    where and before whom it runs (module docstring). Only a user's runtime patches are
    read for these: the rendered pod carries the back end's own ``schedulerName`` and
    whatever the admin's runtime sets."""
    if not isinstance(pod_spec, Mapping):
        return
    for key, privilege in _SCHEDULING_FIELDS.items():
        if pod_spec.get(key) is not None:
            yield f"{where}{key}", privilege
    tolerations = pod_spec.get("tolerations")
    for i, tol in enumerate(tolerations if isinstance(tolerations, list) else []):
        taint = tol.get("key") if isinstance(tol, Mapping) else None
        if not taint or not isinstance(taint, str) or taint.startswith(_RESERVED_TAINTS):
            yield f"{where}tolerations[{i}]", "tolerations"
    selector = pod_spec.get("nodeSelector")
    for key in selector if isinstance(selector, Mapping) else {}:
        if _reserved_label(key):
            yield f"{where}nodeSelector[{key}]", "nodeName"
    affinity = pod_spec.get("affinity")
    affinity = affinity if isinstance(affinity, Mapping) else {}
    for path, key in _node_affinity_keys(affinity.get("nodeAffinity")):
        if _reserved_label(key):
            yield f"{where}affinity.nodeAffinity.{path}", "nodeName"
    # A required pod (anti-)affinity is symmetric: an empty selector over a wide
    # topology keeps every other user's new pods off the domain (a cluster-wide DoS).
    for kind in ("podAffinity", "podAntiAffinity"):
        rules = affinity.get(kind)
        if isinstance(rules, Mapping) and rules.get(
                "requiredDuringSchedulingIgnoredDuringExecution"):
            yield (f"{where}affinity.{kind}.requiredDuringSchedulingIgnoredDuringExecution",
                   "podAffinity")


def _reserved_label(key: Any) -> bool:
    return not isinstance(key, str) or key.startswith(_RESERVED_LABELS)


def _node_affinity_keys(node_affinity: Any) -> Iterator[tuple[str, Any]]:
    """``(path, label key)`` of every label expression of a node affinity (required
    terms and preferred ones; ``matchFields`` select by name, which is allowed)."""
    if not isinstance(node_affinity, Mapping):
        return
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    pairs = [(f"requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]", t)
             for i, t in enumerate(terms if isinstance(terms, list) else [])]
    preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
    pairs += [(f"preferredDuringSchedulingIgnoredDuringExecution[{i}].preference",
               p.get("preference") if isinstance(p, Mapping) else None)
              for i, p in enumerate(preferred if isinstance(preferred, list) else [])]
    for path, term in pairs:
        if not isinstance(term, Mapping):
            continue
        exprs = term.get("matchExpressions")
        for j, expr in enumerate(exprs if isinstance(exprs, list) else []):
            key = expr.get("key") if isinstance(expr, Mapping) else None
            yield f"{path}.matchExpressions[{j}]", key


def patch_pod_specs(patches: Any, field: str = "spec.runtimePatches"
                    ) -> Iterator[tuple[str, Any]]:
    """``(path, pod template)`` of every pod template in Trainer ``runtimePatches``
    (``field``: what the paths name them: ``spec.podSpecOverrides`` written as patches,
    k8s_adapter/overrides.py)."""
    for i, patch in enumerate(patches if isinstance(patches, list) else []):
        base = f"{field}[{i}].trainingRuntimeSpec.template.spec"
        template = ((patch.get("trainingRuntimeSpec") or {}) if isinstance(patch, Mapping)
                    else {})
        template = template.get("template") if isinstance(template, Mapping) else None
        spec = template.get("spec") if isinstance(template, Mapping) else None
        rjobs = spec.get("replicatedJobs") if isinstance(spec, Mapping) else None
        for j, rj in enumerate(rjobs if isinstance(rjobs, list) else []):
            pod = dig(rj, "template", "spec", "template")
            if pod is not None:
                yield f"{base}.replicatedJobs[{j}].template.spec.template.", pod


def dig(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]…``, or None where a level is not a mapping or lacks the key."""
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


#: Secrets the bridge makes for a job (its MPI SSH key, its progress token): no user's
#: patch may mount one, another job's included (a namespace may be shared by users).
BRIDGE_SECRET_SUFFIXES = ("-mpi-ssh-auth", "-trainer-status", "-data-cache-token")


def bridge_secret(name: Any) -> bool:
    """Whether ``name`` is that of a Secret the bridge makes for a job."""
    return isinstance(name, str) and name.endswith(BRIDGE_SECRET_SUFFIXES)


def _env_secrets(pod_spec: Mapping[str, Any], where: str) -> Iterator[str]:
    """The paths of containers' ``env`` items and ``envFrom`` sources that read a Secret
    the bridge makes."""
    for key in _CONTAINER_LISTS:
        containers = pod_spec.get(key)
        for i, ctr in enumerate(containers if isinstance(containers, list) else []):
            env = ctr.get("env") if isinstance(ctr, Mapping) else None
            for j, item in enumerate(env if isinstance(env, list) else []):
                if bridge_secret(dig(item, "valueFrom", "secretKeyRef", "name")):
                    yield f"{where}{key}[{i}].env[{j}]"
            sources = ctr.get("envFrom") if isinstance(ctr, Mapping) else None
            for j, source in enumerate(sources if isinstance(sources, list) else []):
                if bridge_secret(dig(source, "secretRef", "name")):
                    yield f"{where}{key}[{i}].envFrom[{j}]"


def bridge_secrets_in(pod_spec: Any, where: str = "") -> Iterator[str]:
    """The paths of ``pod_spec``'s volumes, ``env`` items and ``envFrom`` sources that
    name a Secret the bridge makes."""
    if isinstance(pod_spec, Mapping):
        yield from _env_secrets(pod_spec, where)
    volumes = pod_spec.get("volumes") if isinstance(pod_spec, Mapping) else None
    for i, vol in enumerate(volumes if isinstance(volumes, list) else []):
        if not isinstance(vol, Mapping):
            continue
        names = [(vol.get("secret") or {}).get("secretName") if isinstance(
            vol.get("secret"), Mapping) else None]
        projected = vol.get("projected")
        sources = projected.get("sources") if isinstance(projected, Mapping) else None
        for source in sources if isinstance(sources, list) else []:
            if isinstance(source, Mapping) and isinstance(source.get("secret"), Mapping):
                names.append(source["secret"].get("name"))
        if any(bridge_secret(n) for n in names):
            yield f"{where}volumes[{i}]"


def check_patches(patches: Any, allowed: Collection[str], setting: str,
                  field: str = "spec.runtimePatches") -> None:
    """Raise :class:`Forbidden` for the first privilege in ``patches`` not in
    ``allowed``, or for a volume of a Secret the bridge makes (whatever is allowed);
    ``setting`` names the allow-list in the message, ``field`` the patches
    (:func:`patch_pod_specs`)."""
    for where, template in patch_pod_specs(patches, field):
        check_users_template(template, allowed, setting, where)


def check_users_template(template: Any, allowed: Collection[str], setting: str,
                         where: str = "") -> None:
    """As :func:`check_patches`, for one pod template a user wrote (a patch's, or the
    template of a runtime a namespace's users may write): privileges, placement, and
    the bridge's Secrets."""
    check_template(template, allowed, setting, where)
    spec = template.get("spec") if isinstance(template, Mapping) else None
    _refuse_first(scheduling_privileges_in(spec, f"{where}spec."), allowed, setting)
    for path in bridge_secrets_in(spec, f"{where}spec."):
        raise Forbidden(f"{path}: not allowed: it reads a Secret the bridge makes for "
                        f"a job (an SSH key, a progress or data cache token: "
                        f"*{', *'.join(BRIDGE_SECRET_SUFFIXES)})")


def check_template(template: Any, allowed: Collection[str], setting: str,
                   where: str = "") -> None:
    """As :func:`check_patches`, for one pod template (``metadata`` and ``spec``; not
    :func:`scheduling_privileges_in`, which only a user's patches are checked for)."""
    _refuse_first(privileges_in_template(template, where), allowed, setting)


def _refuse_first(found: Iterable[tuple[str, str]], allowed: Collection[str],
                  setting: str) -> None:
    for path, privilege in found:
        if privilege not in allowed:
            raise Forbidden(f"{path}: not allowed: it asks for the privilege {privilege!r}, "
                            f"which {setting} does not grant (jobs of local users run "
                            f"as their own uid under Pod Security 'restricted', placed by "
                            f"the cluster's scheduler)")


def harden(pod_spec: dict[str, Any], uid: int | None, gid: int | None,
           keep_user_values: bool) -> None:
    """Set the user's uid/gid (when given; else the image's user, which must not be
    root) and the ``restricted`` security context on ``pod_spec`` and each of its
    containers, in place (see the module docstring)."""
    def put(target: dict[str, Any], key: str, value: Any) -> None:
        if keep_user_values:
            target.setdefault(key, value)
        else:
            target[key] = value

    pod_ctx = pod_spec.get("securityContext")
    if not isinstance(pod_ctx, dict) or not keep_user_values:
        pod_ctx = {}
    pod_spec["securityContext"] = pod_ctx
    if uid is not None:
        put(pod_ctx, "runAsUser", uid)
    if gid is not None:
        put(pod_ctx, "runAsGroup", gid)
    put(pod_ctx, "runAsNonRoot", True)
    put(pod_ctx, "seccompProfile", {"type": "RuntimeDefault"})
    for list_key in _CONTAINER_LISTS:
        for ctr in pod_spec.get(list_key) or []:
            if not isinstance(ctr, dict):
                continue
            ctx = ctr.get("securityContext")
            if not isinstance(ctx, dict) or not keep_user_values:
                ctx = {}
            ctr["securityContext"] = ctx
            put(ctx, "allowPrivilegeEscalation", False)
            put(ctx, "capabilities", {"drop": ["ALL"]})
            put(ctx, "runAsNonRoot", True)
