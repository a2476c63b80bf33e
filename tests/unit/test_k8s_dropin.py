"""k8s_adapter.dropin: which webhook configurations are taken as Trainer's controller."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from k8s_adapter.dropin import TrainerInstalled, trainer_webhooks, watch_for_trainer


def config(name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "ValidatingWebhookConfiguration", "metadata": {"name": name},
            "webhooks": [{"name": "w", "rules": list(rules)}]}


def rule(groups: list[str], resources: list[str]) -> dict[str, Any]:
    return {"apiGroups": groups, "apiVersions": ["v1alpha1"], "operations": ["CREATE"],
            "resources": resources}


def test_only_trainers_own_webhooks_count() -> None:
    listing = {"items": [
        config("validator.trainer.kubeflow.org", rule(["trainer.kubeflow.org"],
                                                      ["trainjobs"])),
        config("jobset-validating", rule(["jobset.x-k8s.io"], ["jobsets"])),
        config("runtimes-only", rule(["trainer.kubeflow.org"], ["clustertrainingruntimes"])),
        {"metadata": {"name": "no-webhooks"}},
    ]}
    listing["items"][0]["webhooks"][0]["name"] = "validator.trainjob.trainer.kubeflow.org"
    listing["items"][2]["webhooks"][0]["name"] = "validator.ctr.trainer.kubeflow.org"
    assert trainer_webhooks(listing) == [
        "ValidatingWebhookConfiguration/validator.trainer.kubeflow.org"]
    assert trainer_webhooks({"items": []}) == [] and trainer_webhooks({}) == []


def test_kueue_and_policy_engines_are_not_trainer() -> None:
    """Kueue's TrainJob integration mutates TrainJobs too (webhook ``mtrainjob.kb.io``);
    Gatekeeper and Kyverno register catch-all rules: none of them is Trainer."""
    kueue = config("kueue-mutating-webhook-configuration",
                   rule(["trainer.kubeflow.org"], ["trainjobs"]))
    kueue["webhooks"][0]["name"] = "mtrainjob.kb.io"
    gatekeeper = config("gatekeeper-validating-webhook-configuration", rule(["*"], ["*"]))
    gatekeeper["webhooks"][0]["name"] = "validation.gatekeeper.sh"
    assert trainer_webhooks({"items": [kueue, gatekeeper]}) == []


def test_a_refusal_is_the_doors_not_the_daemons() -> None:
    assert not issubclass(TrainerInstalled, ValueError)


class Watches:
    """A Kube whose list_watch plays one script of (event, payload) per kind, then
    waits for ever (as a watch with nothing to say)."""

    api_client = None

    def __init__(self, **scripts: list[tuple[str, Any]]) -> None:
        self.scripts = scripts

    async def list_watch(self, what: str, fn: Any) -> AsyncIterator[tuple[str, Any]]:
        for event in self.scripts.get(what.removesuffix("WebhookConfigurations"), []):
            yield event
        await asyncio.Event().wait()


def trainers(name: str) -> dict[str, Any]:
    hook = config(name, rule(["trainer.kubeflow.org"], ["trainjobs"]))
    hook["webhooks"][0]["name"] = "mutator.trainjob.trainer.kubeflow.org"
    del hook["kind"]  # a listing's items carry no kind
    return hook


async def test_trainer_installed_later_is_seen_in_the_watch() -> None:
    """Deleted and foreign configurations pass; the first of Trainer's to be added (a
    Mutating one here) ends the watch with the refusal naming it."""
    kube = Watches(
        Validating=[("SYNC", [config("jobset", rule(["jobset.x-k8s.io"], ["jobsets"]))]),
                    ("DELETED", trainers("old-trainer"))],
        Mutating=[("SYNC", []), ("ADDED", trainers("trainer-mutating"))])
    found = await asyncio.wait_for(watch_for_trainer(kube, "k8s"), 5)  # type: ignore[arg-type]
    assert isinstance(found, TrainerInstalled)
    assert "MutatingWebhookConfiguration/trainer-mutating" in str(found)
    assert "old-trainer" not in str(found) and "front door k8s" in str(found)


async def test_a_watch_without_trainer_does_not_end() -> None:
    kube = Watches(Validating=[("SYNC", []), ("DELETED", trainers("gone"))])
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(watch_for_trainer(kube, "k8s"), 0.2)  # type: ignore[arg-type]
