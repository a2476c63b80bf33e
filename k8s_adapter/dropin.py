"""Drop-in for Kubeflow Trainer's controller: may the TrainJob front door claim
TrainJobs with Trainer's own ``spec.managedBy``?

A front door whose ``managed_by`` names Trainer's value
(:data:`TRAINER_MANAGED_BY`, what the apiserver defaults an unset ``managedBy`` to, so
every TrainJob the Kubeflow SDK's ``TrainerClient.train()`` makes) runs those jobs as
Trainer would. Two controllers must never run one TrainJob, so before it takes any, the
door checks that no Trainer controller is installed: Trainer's controller serves
admission webhooks for TrainJobs, named under ``trainer.kubeflow.org``
(``validator.trainjob.trainer.kubeflow.org`` …), so a Validating- or
MutatingWebhookConfiguration with such a webhook and a rule on ``trainjobs`` is taken as
Trainer's (:func:`trainer_webhooks`; Kueue's and policy engines' are not).

Contract: :func:`trainer_webhooks` names those configurations in a listing (pure);
:func:`check_no_trainer` reads both listings and raises :class:`TrainerInstalled` naming
them, or :class:`TrainerInstalled` for an answer it cannot read (404, 400); an apiserver
it cannot reach, or one that refuses the listing (401/403: the bridge's RBAC lacks
``list`` on webhook configurations, charts/hpc-bridge/files/rbac.yaml) is
:class:`bridge.backend.BackendUnavailable`, as everywhere in the bridge: the door tries
again, logging why, until an admin grants it.

Trainer installed *after* the door started: :func:`watch_for_trainer` follows both kinds
of webhook configuration (list, then watch: ``watch`` in the same RBAC rule) and returns,
as a :class:`TrainerInstalled`, the first of Trainer's to appear; the door then stops
taking and writing TrainJobs (k8s_adapter/frontdoor.py). A webhook configuration is
installed with Trainer, before its controller runs, so the door is usually gone before
Trainer's controller takes its first TrainJob; jobs the door started run on in their
back ends, and an admin decides what becomes of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from bridge.backend import BackendRejected
from bridge.errors import BridgeError
from bridge.model import GROUP
from k8s_adapter.kube import Kube

__all__ = ["TRAINER_MANAGED_BY", "TrainerInstalled", "check_no_trainer", "trainer_webhooks",
           "watch_for_trainer"]

#: Trainer's ``spec.managedBy`` (and the apiserver's default for it).
TRAINER_MANAGED_BY = "trainer.kubeflow.org/trainjob-controller"


class TrainerInstalled(BridgeError):
    """The door may not claim Trainer's TrainJobs (the message says why): it does not
    start; the rest of the daemon serves on."""


def _names_trainjobs(rule: Mapping[str, Any]) -> bool:
    """A rule on ``trainer.kubeflow.org`` ``trainjobs`` by name (a ``*`` rule, a policy
    engine's, is not Trainer's)."""
    return GROUP in (rule.get("apiGroups") or []) and any(
        str(r).split("/")[0] == "trainjobs" for r in rule.get("resources") or [])


def trainer_webhooks(listing: Mapping[str, Any]) -> list[str]:
    """Names of the webhook configurations in ``listing`` (a list object) that are
    Trainer's: a webhook named ``….trainer.kubeflow.org`` (Trainer's own, e.g.
    ``validator.trainjob.trainer.kubeflow.org``) with a rule on ``trainer.kubeflow.org``
    ``trainjobs``. Kueue's TrainJob webhook (``mtrainjob.kb.io``) and policy engines'
    catch-all rules are not Trainer's controller."""
    found = []
    for item in listing.get("items") or []:
        for hook in item.get("webhooks") or []:
            if str(hook.get("name") or "").endswith("." + GROUP) and any(
                    _names_trainjobs(rule) for rule in hook.get("rules") or []):
                found.append(f"{item.get('kind', 'WebhookConfiguration')}/"
                             f"{(item.get('metadata') or {}).get('name')}")
                break
    return found


async def check_no_trainer(kube: Kube, door: str) -> None:
    """Raise :class:`TrainerInstalled` unless it is certain that no Trainer controller
    is installed (module docstring)."""
    from kubernetes_asyncio import client

    api = client.AdmissionregistrationV1Api(kube.api_client)
    found: list[str] = []
    for kind, fn in (("ValidatingWebhookConfiguration",
                      api.list_validating_webhook_configuration),
                     ("MutatingWebhookConfiguration", api.list_mutating_webhook_configuration)):
        try:
            listing = await kube.raw(f"list {kind}s", fn)
        except BackendRejected as exc:
            raise TrainerInstalled(
                f"front door {door}: managed_by names {TRAINER_MANAGED_BY} (drop-in for "
                f"Kubeflow Trainer), but whether Trainer's controller is installed cannot "
                f"be told: {exc}; the bridge needs list on {kind.lower()}s "
                f"(charts/hpc-bridge/files/rbac.yaml)") from exc
        for item in listing.get("items") or []:
            item.setdefault("kind", kind)
        found += trainer_webhooks(listing)
    if found:
        raise _installed(door, found)


def _installed(door: str, found: list[str]) -> TrainerInstalled:
    return TrainerInstalled(
        f"front door {door}: managed_by names {TRAINER_MANAGED_BY} (drop-in for "
        f"Kubeflow Trainer), but Trainer's controller is installed "
        f"({', '.join(sorted(found))} admit TrainJobs): two controllers would run "
        f"each TrainJob. Leave Trainer's TrainJobs to Trainer (remove "
        f"{TRAINER_MANAGED_BY} from managed_by) or uninstall Trainer's controller")


async def watch_for_trainer(kube: Kube, door: str) -> TrainerInstalled:
    """Follow the Validating- and MutatingWebhookConfigurations until one of Trainer's
    is there; return the :class:`TrainerInstalled` naming it (module docstring). Failed
    reads are logged and retried by :meth:`Kube.list_watch`; it does not return
    otherwise."""
    from kubernetes_asyncio import client

    api = client.AdmissionregistrationV1Api(kube.api_client)

    async def follow(kind: str, fn: Callable[..., Awaitable[Any]]) -> list[str]:
        async for event, payload in kube.list_watch(f"{kind}s", fn):
            items = payload if event == "SYNC" else [] if event == "DELETED" else [payload]
            for item in items:
                item.setdefault("kind", kind)
            found = trainer_webhooks({"items": items})
            if found:
                return found
        raise RuntimeError(f"the watch of {kind}s ended")  # Kube.list_watch does not end

    tasks = [asyncio.create_task(follow("ValidatingWebhookConfiguration",
                                        api.list_validating_webhook_configuration)),
             asyncio.create_task(follow("MutatingWebhookConfiguration",
                                        api.list_mutating_webhook_configuration))]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        found = next(iter(done)).result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return _installed(door, found)
