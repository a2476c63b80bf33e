"""Progress reports from pods (bridge/trainer_status.py), as Kubeflow Trainer mounts
them: a Secret ``<jobset>-trainer-status`` holding the job's bearer token (``token``)
and the endpoint's CA certificate (``ca.crt``), mounted read-only in every container
at ``/var/run/secrets/kubeflow/trainer`` (Trainer's path), and the three
``KUBEFLOW_TRAINER_STATUS_*`` variables pointing there.

Contract: :func:`secret` is the Secret (created before the JobSet, then handed to it
as owner, as the MPI Secret is: k8s_adapter/backend.py); :func:`mount` adds the volume,
mounts and variables to every pod template of a rendered JobSet, in place, keeping
what the job itself set under those names.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

__all__ = ["MOUNT_PATH", "mount", "secret", "secret_name"]

SECRET_SUFFIX = "-trainer-status"  # noqa: S105 - a name, not a password
VOLUME = "kubeflow-trainer"
MOUNT_PATH = "/var/run/secrets/kubeflow/trainer"


def secret_name(jobset: str) -> str:
    return jobset + SECRET_SUFFIX


def secret(jobset: str, namespace: str, labels: Mapping[str, str], token: str,
           ca_pem: str) -> dict[str, Any]:
    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": secret_name(jobset), "namespace": namespace,
                         "labels": dict(labels)},
            "data": {"token": b64(token), "ca.crt": b64(ca_pem)}}


def _list(owner: dict[str, Any], key: str, where: str) -> list[Any]:
    value = owner.get(key)
    if value is None:
        value = owner[key] = []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError(f"{where}.{key} is not a list of objects")
    return value


def mount(body: dict[str, Any], jobset: str, url: str) -> None:
    """Mount the Secret and set the variables in every container of ``body``;
    :class:`ValueError` for a pod a runtime patch left in a shape that cannot take them
    (the back end refuses the job, naming the field)."""
    env = {"KUBEFLOW_TRAINER_STATUS_URL": url,
           "KUBEFLOW_TRAINER_STATUS_TOKEN": f"{MOUNT_PATH}/token",
           "KUBEFLOW_TRAINER_STATUS_CA_CERT": f"{MOUNT_PATH}/ca.crt"}
    for i, rjob in enumerate(body["spec"]["replicatedJobs"]):
        pod = rjob["template"]["spec"]["template"]["spec"]
        where = f"replicatedJobs[{i}].template.spec.template.spec"
        volumes = _list(pod, "volumes", where)
        if all(v.get("name") != VOLUME for v in volumes):
            volumes.append({"name": VOLUME, "secret": {"secretName": secret_name(jobset),
                                                       "defaultMode": 0o444}})
        for j, container in enumerate(_list(pod, "containers", where)):
            at = f"{where}.containers[{j}]"
            variables = _list(container, "env", at)
            have = {e.get("name") for e in variables}
            variables += [{"name": k, "value": v} for k, v in env.items() if k not in have]
            mounts = _list(container, "volumeMounts", at)
            if all(m.get("name") != VOLUME for m in mounts):
                mounts.append({"name": VOLUME, "mountPath": MOUNT_PATH, "readOnly": True})
