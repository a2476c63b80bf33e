"""A job's cache credentials: a random token and a self-signed TLS certificate and key
that every server and reader of the job shares (mutual TLS).

Why both: the token is checked per call; mutual TLS ends a connection without the job's
key at the handshake, before gRPC reads any request — a user without it cannot make a
server allocate memory for a huge request (pyarrow exposes no receive-size limit).

Contract:

* :func:`generate` makes them (``cryptography``: EC P-256, subject and DNS name
  :data:`SERVER_NAME`); :func:`make` writes them as ``token``, ``cert.pem`` and
  ``key.pem`` (mode 0600) into an open private directory (a Flux job's tasks share them
  so); the Kubernetes back end puts them in the job's Secret under the same names
  (:data:`FILES`); :func:`shell_exports` spells them for a Slurm batch script (which
  never writes them to a file).
* :func:`read` reads them back (another task of the job); :func:`from_env` from
  :data:`TOKEN_ENV`, :data:`CERT_ENV`, :data:`KEY_ENV` (no certificate: plain gRPC, the
  token alone).
* :func:`client` connects to an address as a member of the job, with a receive window
  of one block (:data:`RECEIVE_WINDOW`; :data:`WINDOW_ENV` changes it);
  :func:`location` is the listening URI for a server.
"""

from __future__ import annotations

import datetime
import os
import secrets
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from data_cache.privatedir import PrivateDir

__all__ = ["CERT_ENV", "FILES", "KEY_ENV", "RECEIVE_WINDOW", "SERVER_NAME", "TOKEN_ENV",
           "WINDOW_ENV", "Credentials", "channel_options", "client", "from_env", "generate",
           "location", "make", "read", "shell_exports"]

#: Environment variables of the job's processes (readable by the job's user and root).
TOKEN_ENV = "HPC_BRIDGE_DATA_CACHE_TOKEN"  # noqa: S105 - a variable name
CERT_ENV = "HPC_BRIDGE_DATA_CACHE_CERT"
KEY_ENV = "HPC_BRIDGE_DATA_CACHE_KEY"
#: The name in the job's certificate, which clients check instead of the host's.
SERVER_NAME = "hpc-bridge-cache"
#: Field -> file (and Secret key) name.
FILES = {"token": "token", "cert": "cert.pem", "key": "key.pem"}


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


def generate() -> Credentials:
    """Fresh credentials: a random token, an EC P-256 key and a self-signed certificate
    for :data:`SERVER_NAME` (valid from an hour ago, for ten years: it lives as long as
    the job), made with ``cryptography``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SERVER_NAME)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(SERVER_NAME)]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return Credentials(
        secrets.token_hex(32), cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                          serialization.NoEncryption()))


def make(directory: PrivateDir) -> Credentials:
    """Make the job's credentials (:func:`generate`) in ``directory``."""
    made = generate()
    directory.write(FILES["cert"], made.cert or b"")
    directory.write(FILES["key"], made.key or b"")
    directory.write(FILES["token"], made.token.encode())  # last: the others are there
    return made


def read(directory: PrivateDir) -> Credentials:
    """The credentials :func:`make` wrote in ``directory`` (files of this user only)."""
    out = {}
    for field, name in FILES.items():
        data = directory.read(name, 64 * 1024)
        if data is None:
            raise CredentialsError(f"{directory.path / name}: missing")
        out[field] = data
    return Credentials(out["token"].decode().strip(), out["cert"], out["key"])


def shell_exports(creds: Credentials) -> str:
    """``export`` lines that set ``creds`` in a POSIX shell (``eval`` them)."""
    return "".join(f"export {name}={shlex.quote(value)}\n"
                   for name, value in creds.env().items())


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


#: The most a reader lets a server send ahead of what it has read, per stream, unless
#: :data:`WINDOW_ENV` says otherwise: one default block (65,536 rows of 32 bytes).
#: gRPC's own window starts at 4 MiB and grows with its bandwidth-delay estimate: with a
#: slow reader 10-16 blocks were held received and unread (docs/data-cache.md,
#: "Benchmarks"). A block larger than this still arrives: gRPC opens the window to a
#: message it is reading.
RECEIVE_WINDOW = 2 * 1024 * 1024
#: Bytes (65,536 to 2**31 - 1), or 0 for gRPC's own window (more throughput, more
#: memory).
WINDOW_ENV = "HPC_BRIDGE_DATA_CACHE_WINDOW"


def channel_options(environ: Mapping[str, str] = os.environ) -> list[tuple[str, int]]:
    """The gRPC channel arguments of every client: a fixed receive window (no
    bandwidth-delay probe) of :data:`RECEIVE_WINDOW` or :data:`WINDOW_ENV` bytes; none
    for ``0``. ValueError naming the variable for anything else."""
    text = environ.get(WINDOW_ENV, "").strip()
    try:
        window = int(text) if text else RECEIVE_WINDOW
    except ValueError:
        window = -1
    if window == 0:
        return []
    if not 65536 <= window <= 2**31 - 1:  # gRPC's window is a signed 32-bit number
        raise ValueError(f"{WINDOW_ENV}={text!r}: give a number of bytes from 65536 to "
                         "2147483647, or 0 for gRPC's own window")
    return [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", window)]


def client(address: str, creds: Credentials) -> Any:
    """A Flight client of ``address`` that presents the job's certificate (when it has
    one) and trusts only the job's certificate under :data:`SERVER_NAME`, with
    :func:`channel_options`."""
    import pyarrow.flight as flight

    options = channel_options()
    if creds.tls is None:
        return flight.FlightClient(address, generic_options=options)
    cert, key = creds.tls
    return flight.FlightClient(address, tls_root_certs=cert, cert_chain=cert, private_key=key,
                               override_hostname=SERVER_NAME, generic_options=options)
