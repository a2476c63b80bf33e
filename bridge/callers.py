"""Who is calling: the peer credentials of a unix-socket client, and the static bearer
tokens of TCP clients (kube-apiserver's token-file format)."""

from __future__ import annotations

import csv
import pwd
import socket
import struct
from pathlib import Path

from aiohttp import web

from bridge.backend import Owner
from bridge.filemodes import check_secret_file


def peer_owner(sock: socket.socket) -> Owner:
    """The Unix identity of the process at the other end of a unix socket."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, gid = struct.unpack("3i", raw)
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError as exc:
        raise web.HTTPForbidden(reason=f"uid {uid} has no passwd entry") from exc
    return Owner(uid=uid, gid=gid, user=user)


def load_tokens(path: str | Path) -> dict[str, Owner]:
    """Read a static token file: CSV lines ``token,user,uid[,"group1,group2"]``.

    Refused (``ValueError`` naming the file and line) when group or others may access
    the file (:func:`bridge.filemodes.check_secret_file`, as ssh refuses a key), when a
    user has no passwd entry, or when the ``uid`` column is set and is not that user's
    Unix uid (an empty ``uid`` takes the passwd one).
    """
    check_secret_file(Path(path))
    tokens: dict[str, Owner] = {}
    with open(path, newline="") as fh:
        for lineno, row in enumerate(csv.reader(fh), 1):
            if not row or row[0].startswith("#"):
                continue
            if len(row) < 2 or not row[0].strip():
                raise ValueError(f"{path}:{lineno}: expected token,user,uid")
            user = row[1].strip()
            try:
                pw = pwd.getpwnam(user)
            except KeyError as exc:
                raise ValueError(f"{path}:{lineno}: unknown user {user!r}") from exc
            uid = row[2].strip() if len(row) > 2 else ""
            if uid and uid != str(pw.pw_uid):
                raise ValueError(f"{path}:{lineno}: uid {uid!r} is not the uid of user "
                                 f"{user!r} ({pw.pw_uid})")
            tokens[row[0].strip()] = Owner(uid=pw.pw_uid, gid=pw.pw_gid, user=user)
    return tokens


def bearer_token(header: str) -> str:
    """The credentials of an ``Authorization: Bearer <token>`` header ('' if none); the
    scheme name is case-insensitive (RFC 7235 section 2.1)."""
    scheme, _, credentials = header.strip().partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else ""
