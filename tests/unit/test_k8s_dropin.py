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


def test_a_webhook_on_trainjobs_is_trainers() -> None:
    listing = {"items": [
        config("validator.trainer.kubeflow.org", rule(["trainer.kubeflow.org"],
                                                      ["trainjobs"])),
        config("jobset-validating", rule(["jobset.x-k8s.io"], ["jobsets"])),
        config("runtimes-only", rule(["trainer.kubeflow.org"], ["clustertrainingruntimes"])),
        config("everything", rule(["*"], ["*"])),
        config("status", rule(["trainer.kubeflow.org"], ["trainjobs/status"])),
        {"metadata": {"name": "no-webhooks"}},
    ]}
    assert trainer_webhooks(listing) == [
        "ValidatingWebhookConfiguration/validator.trainer.kubeflow.org",
        "ValidatingWebhookConfiguration/everything",
        "ValidatingWebhookConfiguration/status"]
    assert trainer_webhooks({"items": []}) == [] and trainer_webhooks({}) == []


def test_a_refusal_ends_serve_as_a_bad_setting_does() -> None:
    assert issubclass(TrainerInstalled, ValueError)
