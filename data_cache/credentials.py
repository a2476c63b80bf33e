"""A job's cache credentials: a random token and a self-signed TLS certificate and key
that every server and reader of the job shares (mutual TLS).

Why both: the token is checked per call; mutual TLS ends a connection without the job's
key at the handshake, before gRPC reads any request — a user without it cannot make a
server allocate memory for a huge request (pyarrow exposes no receive-size limit).

Contract:

* :func:`make` writes ``token``, ``cert.pem`` and ``key.pem`` (mode 0600, ``O_EXCL``,
  never through a link) into a private directory, the pair made by ``openssl``
  (EC P-256, subject and DNS name :data:`SERVER_NAME`, valid ten years: it lives as long
  as the job), and returns them as :class:`Credentials`.
* :func:`read` reads them back (another task of the job); :func:`from_env` from
  :data:`TOKEN_ENV`, :data:`CERT_ENV`, :data:`KEY_ENV` (no certificate: plain gRPC, the
  token alone).
* :func:`client` connects to an address as a member of the job; :func:`location` is the
  listening URI for a server.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow.flight as flight

__all__ = ["CERT_ENV", "KEY_ENV", "SERVER_NAME", "TOKEN_ENV", "Credentials", "client",
           "from_env", "location", "make", "read"]

#: Environment variables of the job's processes (readable by the job's user and root).
TOKEN_ENV = "HPC_BRIDGE_DATA_CACHE_TOKEN"  # noqa: S105 - a variable name
CERT_ENV = "HPC_BRIDGE_DATA_CACHE_CERT"
KEY_ENV = "HPC_BRIDGE_DATA_CACHE_KEY"
#: The name in the job's certificate, which clients check instead of the host's.
SERVER_NAME = "hpc-bridge-cache"
_FILES = {"token": "token", "cert": "cert.pem", "key": "key.pem"}


class CredentialsError(Exception):
    """The credentials cannot be made or read."""


@dataclass(frozen=True)
class Credentials:
    token: str
    cert: bytes | None = None
    key: bytes | None = None

    @property
    def tls(self) -> tuple[bytes, bytes] | None:
        return (self.cert, self.key) if self.cert and self.key else None

    def env(self) -> dict[str, str]:
        out = {TOKEN_ENV: self.token}
        if self.cert and self.key:
            out.update({CERT_ENV: self.cert.decode(), KEY_ENV: self.key.decode()})
        return out


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def make(directory: Path) -> Credentials:
    """Make the job's credentials in ``directory`` (see the module docstring)."""
    token = secrets.token_hex(32)
    with tempfile.TemporaryDirectory(dir=directory) as work:
        cert, key = Path(work, "c"), Path(work, "k")
        try:
            subprocess.run(
                ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                 "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key), "-out", str(cert),
                 "-subj", f"/CN={SERVER_NAME}", "-days", "3650",
                 "-addext", f"subjectAltName=DNS:{SERVER_NAME}"],
                check=True, capture_output=True, timeout=60)
        except FileNotFoundError:
            raise CredentialsError("openssl is not installed on this node") from None
        except subprocess.CalledProcessError as exc:
            raise CredentialsError(f"openssl failed: {exc.stderr.decode(errors='replace')}"
                                   ) from None
        made = Credentials(token, cert.read_bytes(), key.read_bytes())
    _write(directory / _FILES["cert"], made.cert or b"")
    _write(directory / _FILES["key"], made.key or b"")
    # The token last: its presence says the others are complete.
    tmp = directory / ".token.tmp"
    _write(tmp, token.encode())
    os.replace(tmp, directory / _FILES["token"])
    return made


def read(directory: Path) -> Credentials:
    """The credentials :func:`make` wrote in ``directory``."""
    out = {}
    for name, file in _FILES.items():
        try:
            fd = os.open(directory / file, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:
            raise CredentialsError(f"{directory / file}: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as fh:
            out[name] = fh.read(64 * 1024)
    return Credentials(out["token"].decode().strip(), out["cert"], out["key"])


def from_env(env: dict[str, str] | None = None) -> Credentials | None:
    """The job's credentials from its environment (None without a token)."""
    env = dict(os.environ) if env is None else env
    token = env.get(TOKEN_ENV, "")
    if not token:
        return None
    cert, key = env.get(CERT_ENV, ""), env.get(KEY_ENV, "")
    return Credentials(token, cert.encode() or None, key.encode() or None)


def location(host: str, port: int, tls: bool) -> str:
    """A server's URI: ``grpc+tls://`` with a certificate, else ``grpc://``."""
    return f"grpc{'+tls' if tls else ''}://{host}:{port}"


def client(address: str, creds: Credentials) -> flight.FlightClient:
    """A Flight client of ``address`` that presents the job's certificate (when it has
    one) and trusts only the job's certificate under :data:`SERVER_NAME`."""
    if creds.tls is None:
        return flight.FlightClient(address)
    cert, key = creds.tls
    return flight.FlightClient(address, tls_root_certs=cert, cert_chain=cert, private_key=key,
                               override_hostname=SERVER_NAME)
