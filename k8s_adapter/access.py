"""The Kubernetes back end's access policy: who may run where, as whom, with what.

Ties :mod:`k8s_adapter.identity` (user → namespace and service account) and
:mod:`k8s_adapter.podsecurity` (privileges, uid/gid) to the three moments of a job:

* :meth:`AccessPolicy.admit` — before the engine stores a job (403 on refusal):
  a local (socket or token) user needs a mapping and may use only its namespace
  (an empty ``metadata.namespace`` becomes it); no job may ask, through
  ``spec.runtimePatches``, for a privilege outside ``allow_privileges`` (nor through
  the template of a namespaced TrainingRuntime, which that namespace's users may
  write: checked as a patch is; nor a ``spec.initializer`` ``secretRef`` naming a
  Secret the bridge makes); a local
  user's multi-node MPI job is refused (its worker pods would run ``sshd`` as root);
  the annotation ``hpc-bridge.io/origin`` is the CR door's alone.
* :meth:`AccessPolicy.identity_of` — at submit: whom to impersonate (``None``: the
  bridge's own credentials: root without a mapping, or a TrainJob CR whose namespace
  has no ``namespace_accounts`` entry). A mapping removed since admission refuses.
* :meth:`AccessPolicy.secure` — on the rendered JobSet: the privilege check again on
  the merged pod templates, then the user's uid/gid and Pod Security ``restricted``'s
  security context on every pod of a local, non-root user (a TrainJob CR created as
  its namespace's account: the same context without a uid).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from bridge.backend import AdmissionDenied, BackendRejected, Owner
from bridge.model import TrainJob
from bridge.runtime_steps import NAMESPACED_RUNTIME
from bridge.runtimes import Framework, LaunchPlan
from k8s_adapter.identity import Denied, Identity, IdentityMap, identity_settings
from k8s_adapter.overrides import as_runtime_patches
from k8s_adapter.podsecurity import (
    PRIVILEGES,
    Forbidden,
    bridge_secret,
    check_patches,
    check_template,
    check_users_template,
    dig,
    harden,
)

#: Annotation the TrainJob front door puts on the bridge's copy of a TrainJob CR.
ANN_ORIGIN = "hpc-bridge.io/origin"
ORIGIN_KUBERNETES = "kubernetes"
#: Annotation on a JobSet: the identity (``NS/SA``) it was created as; its cancel and
#: suspend act as the same identity.
ANN_IDENTITY = "hpc-bridge.io/identity"


def from_cr_door(job: TrainJob) -> bool:
    """Whether the job came in as a TrainJob CR (admission refuses the annotation to
    everyone else)."""
    return job.metadata.annotations.get(ANN_ORIGIN) == ORIGIN_KUBERNETES


@dataclass(frozen=True)
class AccessPolicy:
    """See the module docstring. ``section`` is ``backends.NAME``, for messages."""

    section: str
    identities: IdentityMap
    allow_privileges: frozenset[str] = frozenset()

    @property
    def _allow_setting(self) -> str:
        return f"{self.section}.allow_privileges"

    def check_patches(self, patches: Any) -> None:
        """Refuse (:class:`BackendRejected`) runtime patches that ask for a privilege
        outside ``allow_privileges``: the check admission makes, for patches read
        later (Kueue's entry, :mod:`k8s_adapter.kueue_admission`)."""
        try:
            check_patches(patches, self.allow_privileges, self._allow_setting)
        except Forbidden as exc:
            raise BackendRejected(str(exc)) from None

    def admit(self, job: TrainJob, plan: LaunchPlan, owner: Owner, origin: str) -> None:
        """Refuse (:class:`AdmissionDenied`) or accept ``job``; may set its namespace."""
        annotations = job.metadata.annotations
        if origin != ORIGIN_KUBERNETES and ANN_ORIGIN in annotations:
            raise AdmissionDenied(f"metadata.annotations[{ANN_ORIGIN}]: set by the bridge's "
                                  f"TrainJob front door only")
        try:
            check_patches(job.spec.runtime_patches, self.allow_privileges, self._allow_setting)
            # A malformed override is refused (400) when the JobSet is laid out.
            with suppress(BackendRejected, TypeError, ValueError, AttributeError):
                check_patches(as_runtime_patches(job.spec.pod_spec_overrides),
                              self.allow_privileges, self._allow_setting,
                              field="spec.podSpecOverrides")
            self._check_runtime(job, plan)
        except Forbidden as exc:
            raise AdmissionDenied(str(exc)) from None
        if origin == ORIGIN_KUBERNETES:
            return  # the CR's namespace is where it was created
        try:
            grant = self.identities.for_user(owner.user, owner.uid, owner.gid)
        except Denied as exc:
            raise AdmissionDenied(str(exc)) from None
        if grant is None:
            return  # root, unmapped: the bridge's own identity (docs/kubernetes.md)
        identity, setting = grant
        asked = job.metadata.namespace
        if not asked:
            job.metadata.namespace = identity.namespace
        elif asked != identity.namespace:
            raise AdmissionDenied(
                f"metadata.namespace: {asked!r} is not allowed for user {owner.user!r}: "
                f"{setting} maps the user to namespace {identity.namespace!r}")
        if owner.uid != 0 and plan.framework is Framework.MPI and plan.num_nodes > 1:
            raise AdmissionDenied(
                f"spec.trainer.numNodes: {plan.num_nodes} MPI nodes on Kubernetes: the worker "
                f"pods of an MPI job run sshd as root, and jobs of local users run as the "
                f"user's uid under Pod Security 'restricted' ({setting}); run it on Slurm "
                f"or Flux, or on one node")

    def _check_runtime(self, job: TrainJob, plan: LaunchPlan) -> None:
        """Raise :class:`Forbidden` for what a user may not ask through the runtime: a
        namespaced TrainingRuntime's template is checked as a patch is (its namespace's
        users may write it); an initializer's ``secretRef`` may not name a Secret the
        bridge makes (k8s_adapter/runtime_template.py loads it into the step)."""
        runtime = plan.extra.get(NAMESPACED_RUNTIME)
        jobs = dig(plan.extra.get("template"), "spec", "replicatedJobs") if runtime else None
        for j, rj in enumerate(jobs if isinstance(jobs, list) else []):
            pod = dig(rj, "template", "spec", "template")
            if pod is not None:
                check_users_template(
                    pod, self.allow_privileges, self._allow_setting,
                    f"TrainingRuntime {runtime}: spec.template.spec.replicatedJobs[{j}]"
                    f".template.spec.template.")
        init = job.spec.initializer if isinstance(job.spec.initializer, Mapping) else {}
        for key in ("dataset", "model"):
            if bridge_secret(dig(init, key, "secretRef", "name")):
                raise Forbidden(f"spec.initializer.{key}.secretRef: not allowed: it names a "
                                f"Secret the bridge makes for a job")

    def identity_of(self, job: TrainJob, owner: Owner) -> Identity | None:
        """Whom the job's objects are created as (see the module docstring)."""
        if from_cr_door(job):
            return self.identities.for_namespace(job.metadata.namespace or "")
        try:
            grant = self.identities.for_user(owner.user, owner.uid, owner.gid)
        except Denied as exc:
            raise BackendRejected(str(exc)) from None
        if grant is None:
            return None
        identity, setting = grant
        if job.metadata.namespace != identity.namespace:
            raise BackendRejected(f"metadata.namespace: {job.metadata.namespace!r} is not "
                                  f"allowed for user {owner.user!r}: {setting} maps the user "
                                  f"to namespace {identity.namespace!r}")
        return identity

    def secure(self, body: dict[str, Any], job: TrainJob, owner: Owner,
               admin_account: str | None = None, impersonated: bool = False) -> None:
        """Check and harden the rendered JobSet ``body`` in place (BackendRejected).
        ``admin_account`` is the back end's own ``service_account`` setting (allowed).
        A local user's pods get their uid/gid; a TrainJob CR's pods created as its
        namespace's account (``impersonated``) get the restricted context without a
        uid (the image's non-root user); other pods are left as rendered."""
        cr_door = from_cr_door(job)
        local_user = not cr_door and owner.uid != 0
        for rj in body["spec"]["replicatedJobs"]:
            template = rj["template"]["spec"]["template"]
            pod = template["spec"]
            where = (f"replicatedJob {rj.get('name')!r} (the runtime's template or "
                     f"spec.runtimePatches): pod template ")
            checked = dict(pod)
            if admin_account and checked.get("serviceAccountName") == admin_account:
                del checked["serviceAccountName"]
            try:
                check_template({**template, "spec": checked}, self.allow_privileges,
                               self._allow_setting, where)
            except Forbidden as exc:
                raise BackendRejected(str(exc)) from None
            keep = "securityContext" in self.allow_privileges
            if local_user:
                harden(pod, owner.uid, owner.gid, keep_user_values=keep)
            elif cr_door and impersonated:
                harden(pod, None, None, keep_user_values=keep)


def access_policy(section: str, settings: Mapping[str, Any]) -> AccessPolicy:
    """:class:`AccessPolicy` from a back end's settings; ValueError names a bad key."""
    allowed = settings.get("allow_privileges") or []
    if not isinstance(allowed, list) or not all(isinstance(a, str) for a in allowed):
        raise ValueError(f"{section}.allow_privileges must be a list of names, got {allowed!r}")
    unknown = set(allowed) - PRIVILEGES
    if unknown:
        raise ValueError(f"{section}.allow_privileges: unknown {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(sorted(PRIVILEGES))}")
    return AccessPolicy(section, identity_settings(section, settings), frozenset(allowed))
