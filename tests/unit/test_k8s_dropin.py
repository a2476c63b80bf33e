"""k8s_adapter.dropin: which webhook configurations are taken as Trainer's controller."""

from __future__ import annotations

from typing import Any

from k8s_adapter.dropin import TrainerInstalled, trainer_webhooks


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
