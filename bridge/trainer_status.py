"""Progress reports from inside a job (Kubeflow Trainer's KEP-2779 protocol) on every
back end: what a report may say, each job's token, and the environment a job gets.

A job learns where to report from three variables, as Trainer sets them for its pods:

* ``KUBEFLOW_TRAINER_STATUS_URL``:
  ``{url}/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/{name}/status``;
* ``KUBEFLOW_TRAINER_STATUS_TOKEN``: the path of a file holding the job's bearer token;
* ``KUBEFLOW_TRAINER_STATUS_CA_CERT``: the path of the CA certificate of the endpoint.

Contract:

* :func:`parse_report` reads ``{"trainerStatus": {...}}`` (Trainer's field names and
  limits: ``progressPercentage`` 0 to 100, ``estimatedRemainingSeconds`` at least 0, ``metrics``
  of ``{name, value}`` strings, ``lastUpdatedTime`` RFC 3339) and returns the status to
  store, with ``lastUpdatedTime`` the daemon's clock when the job gave none; anything
  else is a :class:`bridge.model.ValidationError` naming the field.
* :func:`job_token` is the job's token: an HMAC of its uid under the daemon's secret
  (:func:`load_secret`, made once, private), so no token is stored and a job's token
  names that job only. :func:`token_matches` compares in constant time.
* :func:`write_token_file` writes a job's token into ``token_dir`` (root's, mode 0711:
  no one lists it) as a file the job's owner alone can read; :func:`status_env` is what
  the job's environment gets.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticError

from bridge.backend import Owner
from bridge.model import ValidationError

__all__ = ["STATUS_PATH", "ReportSettings", "job_token", "load_secret", "parse_report",
           "status_env", "token_matches", "write_token_file"]

#: The endpoint's path, as Trainer serves it (``{namespace}``, ``{name}``: the job's).
STATUS_PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"
MAX_METRICS = 64
_INT32 = 2**31 - 1


class _Metric(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128)
    value: str = Field(min_length=1, max_length=256)


class _Status(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    progressPercentage: int | None = Field(default=None, ge=0, le=100)
    estimatedRemainingSeconds: int | None = Field(default=None, ge=0, le=_INT32)
    metrics: list[_Metric] | None = Field(default=None, max_length=MAX_METRICS)
    lastUpdatedTime: str | None = Field(default=None, max_length=64)


class _Report(BaseModel):
    model_config = ConfigDict(extra="forbid")

    trainerStatus: _Status


def _rfc3339(value: str) -> str:
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError([("trainerStatus.lastUpdatedTime",
                                f"{value[:64]!r} is not an RFC 3339 time")]) from None
    if when.tzinfo is None:
        raise ValidationError([("trainerStatus.lastUpdatedTime",
                                "needs a time zone (e.g. 2025-01-23T10:30:45Z)")])
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_report(body: bytes, now: float) -> dict[str, Any]:
    """The ``trainerStatus`` to store from a request body (module docstring)."""
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise ValidationError([("", f"the body is not JSON: {exc}")]) from None
    try:
        report = _Report.model_validate(data)
    except PydanticError as exc:
        raise ValidationError([(".".join(str(p) for p in e["loc"]), e["msg"])
                               for e in exc.errors()[:5]]) from None
    status = report.trainerStatus.model_dump(exclude_none=True)
    status["lastUpdatedTime"] = (
        _rfc3339(report.trainerStatus.lastUpdatedTime) if report.trainerStatus.lastUpdatedTime
        else datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return status


def load_secret(state_dir: Path) -> bytes:
    """The daemon's token secret (``state_dir/trainer-status.key``), made on first use
    (mode 0600, created exclusively: two starts never make two)."""
    path = state_dir / "trainer-status.key"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        data = path.read_bytes()
        if len(data) >= 32:
            return data
        raise ValueError(f"{path}: too short to be a key; remove it to make a new one") from None
    key = secrets.token_bytes(32)
    try:
        os.write(fd, key)
        os.fsync(fd)
    finally:
        os.close(fd)
    return key


def job_token(secret: bytes, uid: str) -> str:
    """Job ``uid``'s bearer token."""
    return hmac.new(secret, f"trainer-status:{uid}".encode(), hashlib.sha256).hexdigest()


def token_matches(secret: bytes, uid: str, token: str) -> bool:
    return hmac.compare_digest(job_token(secret, uid).encode(), token.encode())


def token_path(token_dir: Path, uid: str) -> Path:
    return token_dir / f"{uid}.token"


def write_token_file(token_dir: Path, uid: str, owner: Owner, token: str) -> Path:
    """Write the job's token where only ``owner`` can read it (module docstring)."""
    token_dir.mkdir(mode=0o711, parents=True, exist_ok=True)
    st = token_dir.lstat()
    if st.st_uid != os.geteuid() or st.st_mode & 0o022 or not os.path.isdir(token_dir):
        raise PermissionError(f"{token_dir}: must be the daemon's and not writable by others")
    if st.st_mode & 0o777 != 0o711:  # the daemon's umask (077) made it 0700
        os.chmod(token_dir, 0o711)  # noqa: S103 - traversable, never listable
    path = token_path(token_dir, uid)
    tmp = token_dir / f".{uid}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o400)
    try:
        os.write(fd, token.encode())
        if os.geteuid() == 0:
            os.fchown(fd, owner.uid, owner.gid)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def status_env(base_url: str, namespace: str, name: str, token_file: Path,
               ca_cert: str) -> dict[str, str]:
    """The three variables a job reports with (module docstring)."""
    return {
        "KUBEFLOW_TRAINER_STATUS_URL": base_url.rstrip("/")
        + STATUS_PATH.format(namespace=namespace, name=name),
        "KUBEFLOW_TRAINER_STATUS_TOKEN": str(token_file),
        "KUBEFLOW_TRAINER_STATUS_CA_CERT": ca_cert,
    }


@dataclass(frozen=True)
class ReportSettings:
    """Where the daemon's jobs report (``[trainer_status]``), and its token secret."""

    base_url: str
    token_dir: Path
    ca_cert: str
    secret: bytes

    def env_for(self, uid: str, namespace: str, name: str, owner: Owner) -> dict[str, str]:
        """The job's token file written (again), and its three variables."""
        path = write_token_file(self.token_dir, uid, owner, job_token(self.secret, uid))
        return status_env(self.base_url, namespace, name, path, self.ca_cert)
