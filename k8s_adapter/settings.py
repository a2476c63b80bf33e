"""Settings of the Kubernetes back end (``[backends.NAME] kind = "kubernetes"``) and
of the TrainJob front door (``[frontdoors.NAME] kind = "kubernetes"``), validated by
their ``create()``; docs/kubernetes.md describes each."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, model_validator

from bridge.plugin_settings import PositiveFloat, StringTuple
from k8s_adapter.kube import KubeConnection

__all__ = ["KubernetesSettings", "TrainJobDoorSettings"]


def _label_keys(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(f"must be a list of node label keys, got {value!r}")


class KubernetesSettings(KubeConnection):
    """The JobSet back end. ``users``, ``groups``, ``namespace_accounts`` and
    ``allow_privileges`` are read by :func:`k8s_adapter.access.access_policy`, which
    checks them and names the key."""

    #: The image of a job whose TrainJob and runtime name none (every built-in runtime
    #: names one).
    default_image: str | None = None
    service_account: str | None = None
    scheduler_name: str | None = None
    #: Node label keys of the topology levels, widest first (a list, or commas);
    #: None: the default levels.
    topology_labels: Annotated[tuple[str, ...] | None, BeforeValidator(_label_keys)] = None
    users: Any = None
    groups: Any = None
    namespace_accounts: Any = None
    allow_privileges: Any = None


class TrainJobDoorSettings(KubeConnection):
    """The TrainJob CR front door (:class:`k8s_adapter.frontdoor.FrontDoorSettings`
    once resolved). Lists accept one string for a list of one."""

    #: ``spec.managedBy`` values this door takes (empty: hpc-bridge's own).
    managed_by: StringTuple = ()
    backend: str | None = None
    allowed_backends: StringTuple = ()
    run_as: str = "nobody"
    #: Namespace -> the Unix user its TrainJobs run as (else ``run_as``).
    namespace_users: dict[str, str] = {}
    status_interval: PositiveFloat = 0.5
    namespaces: StringTuple = ()
    #: ``HOST:PORT`` of the mutating admission webhook that hands a queued TrainJob's
    #: topology to Kueue (k8s_adapter/topology_webhook.py); off while empty. Its
    #: certificate (chain) and key, PEM.
    webhook_listen: str = ""
    webhook_tls_cert: str = ""
    webhook_tls_key: str = ""

    @model_validator(mode="after")
    def _webhook_tls(self) -> TrainJobDoorSettings:
        if self.webhook_listen and not (self.webhook_tls_cert and self.webhook_tls_key):
            raise ValueError("webhook_listen needs webhook_tls_cert and webhook_tls_key "
                             "(the apiserver calls webhooks over TLS only)")
        if self.webhook_listen and not self.webhook_listen.rpartition(":")[2].isdigit():
            raise ValueError(f"webhook_listen must be HOST:PORT, got {self.webhook_listen!r}")
        return self
