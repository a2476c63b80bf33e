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
import re
import secrets
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticError

from bridge.backend import Owner
from bridge.filemodes import check_secret_file, untrusted_component
from bridge.model import ValidationError, is_job_uid

__all__ = ["STATUS_PATH", "ReportSettings", "check_token_dir", "job_token", "load_secret",
           "parse_report", "remove_token_files", "status_env", "token_matches", "token_uid",
           "write_token_file"]

#: The endpoint's path, as Trainer serves it (``{namespace}``, ``{name}``: the job's).
STATUS_PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"
MAX_METRICS = 64
#: The most a stored report may take (its JSON, UTF-8): what each job keeps.
MAX_STORED_BYTES = 8192
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
    if len(json.dumps(status, ensure_ascii=False).encode()) > MAX_STORED_BYTES:
        raise ValidationError([("trainerStatus", f"over {MAX_STORED_BYTES} bytes once "
                                                 f"stored: report fewer or shorter metrics")])
    status["lastUpdatedTime"] = (
        _rfc3339(report.trainerStatus.lastUpdatedTime) if report.trainerStatus.lastUpdatedTime
        else datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return status


def load_secret(state_dir: Path, secret_file: str = "") -> bytes:
    """The daemon's token secret: ``secret_file`` if given (the admin's, shared by the
    replicas of a leader election: bridge/filemodes.py ``check_secret_file``), else
    ``state_dir/trainer-status.key``, made on first use (mode 0600, created exclusively:
    two starts never make two)."""
    if secret_file:
        shared = Path(secret_file)
        check_secret_file(shared, "trainer_status.secret_file")
        data = shared.read_bytes()
        if len(data) < 32:
            raise ValueError(f"trainer_status.secret_file {shared}: under 32 bytes")
        return data
    path = state_dir / "trainer-status.key"
    if not path.exists():  # made whole beside it, then linked: a crash leaves no half key
        tmp = state_dir / f".trainer-status.key.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, secrets.token_bytes(32))
            os.fsync(fd)
        finally:
            os.close(fd)
        with suppress(FileExistsError):  # another start made it first: theirs stands
            os.link(tmp, path)
        tmp.unlink()
    data = path.read_bytes()
    if len(data) < 32:
        raise ValueError(f"{path}: too short to be a key; remove it to make a new one")
    return data


def job_token(secret: bytes, uid: str) -> str:
    """Job ``uid``'s bearer token: ``UID.MAC``, the uid (so that the endpoint finds the
    job by its unique key, whatever else bears its name) and an HMAC of it."""
    mac = hmac.new(secret, f"trainer-status:{uid}".encode(), hashlib.sha256).hexdigest()
    return f"{uid}.{mac}"


def token_uid(token: str) -> str | None:
    """The job uid a token names (not yet checked), or None for one of no such form."""
    uid, dot, _ = token.partition(".")
    return uid if dot and is_job_uid(uid) else None


def token_matches(secret: bytes, uid: str, token: str) -> bool:
    """Whether ``token`` is job ``uid``'s (constant time; any other text: False)."""
    if not token.isascii():
        return False
    return hmac.compare_digest(job_token(secret, uid).encode(), token.encode())


def token_path(token_dir: Path, uid: str) -> Path:
    return token_dir / f"{uid}.token"


def check_token_dir(token_dir: Path, state_dir: Path) -> None:
    """At start: ``token_dir`` must be an absolute path whose every directory only root
    or the daemon may change (bridge/filemodes.py ``untrusted_component``; its parent
    must exist), and outside ``state_dir`` (made 0700 at each start: no user could
    reach a token there). :class:`ValueError` saying which."""
    if not token_dir.is_absolute():
        raise ValueError(f"trainer_status.token_dir {token_dir}: must be an absolute path")
    real, state = Path(os.path.realpath(token_dir)), Path(os.path.realpath(state_dir))
    if real == state or state in real.parents:
        raise ValueError(f"trainer_status.token_dir {token_dir}: inside the state directory "
                         f"{state_dir}, which only the daemon may enter; choose a directory "
                         f"the compute nodes see, e.g. /var/lib/hpc-bridge-trainer-status")
    why = untrusted_component(token_dir if token_dir.exists() else token_dir.parent)
    if why is not None:
        raise ValueError(f"trainer_status.token_dir {token_dir}: {why}")


def _open_token_dir(token_dir: Path) -> int:
    """A descriptor of ``token_dir`` (made 0711 if missing; its parent must exist),
    checked through the descriptor itself: every later step works relative to it, so
    no path can be swapped under the daemon between the check and the write."""
    with suppress(FileExistsError):
        os.mkdir(token_dir, 0o711)
    fd = os.open(token_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise PermissionError(f"{token_dir}: must be the daemon's and not writable by "
                                  f"others")
        if st.st_mode & 0o777 != 0o711:  # the daemon's umask (077) made it 0700
            os.fchmod(fd, 0o711)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_token_file(token_dir: Path, uid: str, owner: Owner, token: str) -> Path:
    """Write the job's token where only ``owner`` can read it (module docstring)."""
    if not is_job_uid(uid):  # admission checked it; a path must never come of it
        raise ValueError(f"{uid[:80]!r} is not a job uid")
    dir_fd = _open_token_dir(token_dir)
    try:
        tmp = f".{uid}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o400,
                     dir_fd=dir_fd)
        try:
            try:
                os.write(fd, token.encode())
                if os.geteuid() == 0:
                    os.fchown(fd, owner.uid, owner.gid)
            finally:
                os.close(fd)
            os.replace(tmp, f"{uid}.token", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
    finally:
        os.close(dir_fd)
    return token_path(token_dir, uid)


def remove_token_files(token_dir: Path, uids: Iterable[str]) -> int:
    """Remove the token files of ``uids`` (relative to the directory's descriptor); how
    many were there."""
    try:
        dir_fd = os.open(token_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return 0
    removed = 0
    try:
        for uid in uids:
            if is_job_uid(uid):
                with suppress(FileNotFoundError):
                    os.unlink(f"{uid}.token", dir_fd=dir_fd)
                    removed += 1
    finally:
        os.close(dir_fd)
    return removed


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
    #: None: no token files (only pods, which get a Secret, can report).
    token_dir: Path | None
    ca_cert: str
    secret: bytes

    def env_for(self, uid: str, namespace: str, name: str, owner: Owner) -> dict[str, str]:
        """The job's token file written (again), and its three variables; none without
        a ``token_dir``."""
        if self.token_dir is None:
            return {}
        path = write_token_file(self.token_dir, uid, owner, job_token(self.secret, uid))
        return status_env(self.base_url, namespace, name, path, self.ca_cert)

    def secret_for(self, uid: str, namespace: str, name: str) -> dict[str, str]:
        """What a pod is given instead of files (``SubmitRequest.status_secret``): its
        endpoint, its token and the CA certificate's text."""
        url = status_env(self.base_url, namespace, name, Path(), "")
        return {"url": url["KUBEFLOW_TRAINER_STATUS_URL"], "token": job_token(self.secret, uid),
                "ca.crt": certificates_of(Path(self.ca_cert))}


def certificates_of(path: Path) -> str:
    """The CERTIFICATE blocks of a PEM file, and nothing else (a combined certificate
    and key must never reach a pod); :class:`ValueError` without one."""
    blocks = re.findall(r"-----BEGIN CERTIFICATE-----\r?\n.*?-----END CERTIFICATE-----",
                        path.read_text(encoding="ascii"), re.S)
    if not blocks:
        raise ValueError(f"{path}: no certificate in it")
    return "\n".join(blocks) + "\n"
