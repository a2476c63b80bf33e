"""The objects a JobSet needs before it exists, and their hand-over to it.

An MPI job's hostfile ConfigMap and SSH key Secret, a data cache's token Secret and the
progress token Secret (k8s_adapter/trainer_status.py) are created *before* the JobSet,
so that it never exists without them, and handed to it as owner once it exists
(garbage-collected with it). A retry after a crash finds them: ``409`` keeps what the
first attempt made, except that

* a Secret whose credentials must be this job's alone (``own_only``) must carry the
  job's uid label — one that someone else made could hold credentials they know;
* a Secret that must hold this attempt's data (``refresh``: the progress token) is
  patched with it, whoever made it.

The calls go through the job's identity's :class:`k8s_adapter.kube.Kube`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from bridge.backend import BackendRejected, BackendUnavailable
from k8s_adapter.jobset import GROUP, UID_LABEL, VERSION, controller_reference
from k8s_adapter.kube import Kube, is_status

__all__ = ["Dependent", "config_map", "create_all", "hand_over", "secret"]

log = structlog.get_logger("k8s_adapter.backend")


@dataclass(frozen=True)
class Dependent:
    """One object to make before the JobSet (see the module docstring)."""

    kind: str
    create: Callable[..., Any]
    patch: Callable[..., Any]
    obj: dict[str, Any]
    own_only: bool = False
    refresh: bool = False

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])


def config_map(kube: Kube, obj: dict[str, Any]) -> Dependent:
    return Dependent("ConfigMap", kube.core.create_namespaced_config_map,
                     kube.core.patch_namespaced_config_map, obj)


def secret(kube: Kube, obj: dict[str, Any], *, own_only: bool = False,
           refresh: bool = False) -> Dependent:
    return Dependent("Secret", kube.core.create_namespaced_secret,
                     kube.core.patch_namespaced_secret, obj, own_only, refresh)


async def create_all(kube: Kube, namespace: str, dependents: Sequence[Dependent],
                     job_uid: str) -> None:
    """Create each of ``dependents`` in ``namespace`` (module docstring)."""
    for dep in dependents:
        try:
            await kube.call(f"create {dep.kind} {namespace}/{dep.name}", dep.create,
                            namespace, dep.obj)
        except BackendRejected as exc:
            if not is_status(exc, 409):  # made by an earlier attempt: keep it
                raise
            if dep.own_only:  # an earlier attempt's, or someone else's?
                found = await kube.call(f"get Secret {namespace}/{dep.name}",
                                        kube.core.read_namespaced_secret, dep.name, namespace)
                labels = getattr(getattr(found, "metadata", None), "labels", None) or {}
                if labels.get(UID_LABEL) != job_uid:
                    raise BackendRejected(
                        f"a Secret named {namespace}/{dep.name} exists and is not this "
                        f"job's (its {UID_LABEL} is {labels.get(UID_LABEL)!r}): its "
                        "credentials could be known to whoever made it") from None
            if dep.refresh:  # whoever made it, it holds this job's data now
                await kube.call(f"update Secret {namespace}/{dep.name}", dep.patch, dep.name,
                                namespace, {"metadata": {"labels": dep.obj["metadata"]["labels"]},
                                            "data": dep.obj["data"]})


async def hand_over(kube: Kube, namespace: str, dependents: Sequence[Dependent],
                    jobset: str, jobset_uid: str) -> None:
    """Make JobSet ``jobset`` the owner of each of ``dependents``; a failure is logged
    (the job runs; only the clean-up of that object is at stake)."""
    owned = {"metadata": {"ownerReferences": [controller_reference(
        f"{GROUP}/{VERSION}", "JobSet", jobset, jobset_uid)]}}
    for dep in dependents:
        try:
            await kube.call(f"hand {dep.kind} {dep.name} to its JobSet", dep.patch,
                            dep.name, namespace, owned)
        except (BackendRejected, BackendUnavailable) as exc:
            log.error("%s %s/%s is not owned by its JobSet (delete it by hand after "
                      "the job): %s", dep.kind, namespace, dep.name, exc)
