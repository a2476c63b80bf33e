"""The SSH key pair of an MPI JobSet (the launcher reaches the node pods' sshd), as
Kubeflow Trainer makes it: a ``kubernetes.io/ssh-auth`` Secret ``<name>-mpi-ssh-auth``
with an ECDSA P-521 key (``ssh-privatekey``, PEM) and its public key
(``ssh-publickey``), mounted at ``/root/.ssh`` as ``id_rsa``, ``id_rsa.pub`` and
``authorized_keys`` (Trainer's file names and modes).

The key is made by ``ssh-keygen`` (OpenSSH, on every host the daemon runs on) rather
than by a crypto library the bridge would otherwise not need; it never touches disk
outside a private temporary directory that is removed at once.
"""

from __future__ import annotations

import base64
import os
import tempfile
from pathlib import Path
from typing import Any

from bridge import subproc
from bridge.backend import BackendUnavailable

SECRET_SUFFIX = "-mpi-ssh-auth"  # noqa: S105 - a name, not a password
VOLUME = "mpi-ssh-auth"
MOUNT_PATH = "/root/.ssh"
PRIVATE_KEY = "ssh-privatekey"
PUBLIC_KEY = "ssh-publickey"


def secret_name(jobset: str) -> str:
    return jobset + SECRET_SUFFIX


def volume(jobset: str) -> dict[str, Any]:
    """The pod volume with Trainer's items and modes."""
    return {"name": VOLUME, "secret": {
        "secretName": secret_name(jobset), "defaultMode": 0o400,
        "items": [{"key": PRIVATE_KEY, "path": "id_rsa", "mode": 0o640},
                  {"key": PUBLIC_KEY, "path": "id_rsa.pub", "mode": 0o644},
                  {"key": PUBLIC_KEY, "path": "authorized_keys", "mode": 0o644}]}}


def volume_mount(path: str | None = None) -> dict[str, Any]:
    """The keys' mount: at ``path`` (an MPI runtime's ``sshAuthMountPath``, as Trainer
    mounts them), else :data:`MOUNT_PATH`."""
    return {"name": VOLUME, "mountPath": path or MOUNT_PATH}


async def keypair() -> tuple[bytes, bytes]:
    """A fresh (private PEM, public ``authorized_keys`` line); BackendUnavailable when
    ssh-keygen is missing or fails (the submit is retried, not lost)."""
    with tempfile.TemporaryDirectory(prefix="hpcb-ssh-") as tmp:
        path = os.path.join(tmp, "id")
        try:
            returncode, _, err = await subproc.communicate(
                ["ssh-keygen", "-q", "-t", "ecdsa", "-b", "521", "-m", "PEM", "-N", "",
                 "-C", "hpc-bridge", "-f", path])
        except OSError as exc:
            raise BackendUnavailable(f"cannot run ssh-keygen for the MPI key: {exc}") from exc
        if returncode != 0:
            raise BackendUnavailable(f"ssh-keygen failed: {err.decode(errors='replace')}")
        # Two small local files: reading them does not block the loop for long.
        private = Path(path).read_bytes()
        public = Path(path + ".pub").read_bytes()
    return private, public


def secret(jobset: str, namespace: str, labels: dict[str, str],
           private: bytes, public: bytes) -> dict[str, Any]:
    """The Secret (made before its JobSet; the back end hands it to the JobSet after)."""
    meta: dict[str, Any] = {"name": secret_name(jobset), "namespace": namespace,
                            "labels": dict(labels)}
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/ssh-auth",
            "metadata": meta, "immutable": True,
            "data": {PRIVATE_KEY: base64.b64encode(private).decode(),
                     PUBLIC_KEY: base64.b64encode(public).decode()}}
