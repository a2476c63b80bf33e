"""Who a job acts as in the cluster: Unix user → namespace and service account (pure).

The bridge holds broad credentials (charts/hpc-bridge/files/rbac.yaml); a local user
must never borrow them. So a job of a socket (or token) user runs only where an
admin mapped that user, and the bridge creates its objects *impersonating* the mapped
service account: the apiserver's RBAC and Pod Security Admission decide, not the
bridge's ClusterRole (docs/kubernetes.md, "Identity").

Settings of a ``kind = "kubernetes"`` back end (all optional; absent = default deny)::

    [backends.kubernetes.users]            # Unix user → namespace / service account
    alice = { namespace = "team-a", service_account = "alice" }
    [backends.kubernetes.groups]           # Unix group (primary or supplementary)
    research = { namespace = "research", service_account = "hpc-jobs" }
    [backends.kubernetes.namespace_accounts]   # TrainJob CRs: namespace → account
    team-a = "trainjobs"

Contracts:

* :func:`identity_settings` validates the tables (ValueError naming the key).
* :meth:`IdentityMap.for_user` gives a user's :class:`Identity` and the setting that
  grants it (their own entry first, then their groups in sorted order) or raises
  :class:`Denied` whose message names the setting. ``root`` (uid 0) without an entry
  keeps the bridge's own identity (``None``): root can read its credentials anyway.
* :meth:`IdentityMap.for_namespace` gives a CR-door job's identity: the namespace's
  account from ``namespace_accounts``, or ``None`` (the bridge's own, as before).
"""

from __future__ import annotations

import contextlib
import grp
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.errors import BridgeError

#: RFC 1123 label (namespace) and subdomain (service account) names.
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class Denied(BridgeError):
    """The user may not run this job on this back end (answered 403)."""


@dataclass(frozen=True)
class Identity:
    """A service account the bridge impersonates."""

    namespace: str
    service_account: str

    @property
    def username(self) -> str:
        """The ``Impersonate-User`` value; the apiserver adds the account's groups
        (``system:serviceaccounts``, ``system:serviceaccounts:NS``) itself."""
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.service_account}"

    @classmethod
    def parse(cls, text: str) -> Identity | None:
        """``NS/SA`` (as :meth:`__str__` writes it) or None."""
        ns, sep, sa = text.partition("/")
        if sep and _LABEL.fullmatch(ns) and _SUBDOMAIN.fullmatch(sa):
            return cls(ns, sa)
        return None


def _identity(where: str, value: Any) -> Identity:
    if not isinstance(value, Mapping) or set(value) - {"namespace", "service_account"}:
        raise ValueError(f"{where} must be a table {{ namespace = \"NS\", service_account = "
                         f"\"SA\" }}, got {value!r}")
    ns, sa = value.get("namespace"), value.get("service_account", "default")
    if not isinstance(ns, str) or not _LABEL.fullmatch(ns) or len(ns) > 63:
        raise ValueError(f"{where}.namespace must be a namespace name, got {ns!r}")
    if not isinstance(sa, str) or not _SUBDOMAIN.fullmatch(sa) or len(sa) > 253:
        raise ValueError(f"{where}.service_account must be a service account name, "
                         f"got {sa!r}")
    return Identity(ns, sa)


@dataclass(frozen=True)
class IdentityMap:
    """The back end's mapping tables (see the module docstring)."""

    #: Configuration section, for messages (``backends.kubernetes``).
    section: str
    users: Mapping[str, Identity] = field(default_factory=dict)
    groups: Mapping[str, Identity] = field(default_factory=dict)
    namespace_accounts: Mapping[str, Identity] = field(default_factory=dict)

    def for_user(self, user: str, uid: int, gid: int) -> tuple[Identity, str] | None:
        """The identity of a socket/token user's jobs and the setting that grants it
        (``backends.NAME.users.alice``); see the module docstring."""
        if user in self.users:
            return self.users[user], f"{self.section}.users.{user}"
        for group in sorted(_groups_of(user, gid) if self.groups else ()):
            if group in self.groups:
                return self.groups[group], f"{self.section}.groups.{group}"
        if uid == 0:
            return None
        raise Denied(f"user {user!r} may not run jobs on this Kubernetes back end: no entry "
                     f"for the user in {self.section}.users nor for any of their groups in "
                     f"{self.section}.groups (ask an admin to map the user to a namespace)")

    def for_namespace(self, namespace: str) -> Identity | None:
        """The identity of a TrainJob CR's job in ``namespace`` (None: the bridge's)."""
        return self.namespace_accounts.get(namespace)


def _groups_of(user: str, gid: int) -> set[str]:
    """Names of the user's primary and supplementary Unix groups (``getgrouplist``:
    one NSS query, not a walk of every group)."""
    gids = {gid}
    with contextlib.suppress(KeyError, OSError):
        gids.update(os.getgrouplist(user, gid))
    names: set[str] = set()
    for g in gids:
        with contextlib.suppress(KeyError):
            names.add(grp.getgrgid(g).gr_name)
    return names


def identity_settings(section: str, settings: Mapping[str, Any]) -> IdentityMap:
    """:class:`IdentityMap` from a back end's settings; ValueError names a bad key."""
    tables: dict[str, dict[str, Identity]] = {}
    for key in ("users", "groups"):
        value = settings.get(key) or {}
        if not isinstance(value, Mapping):
            raise ValueError(f"{section}.{key} must be a table of names, got {value!r}")
        tables[key] = {str(name): _identity(f"{section}.{key}.{name}", v)
                       for name, v in value.items()}
    accounts = settings.get("namespace_accounts") or {}
    if not isinstance(accounts, Mapping):
        raise ValueError(f"{section}.namespace_accounts must be a table namespace = "
                         f"\"service account\", got {accounts!r}")
    by_ns = {str(ns): _identity(f"{section}.namespace_accounts.{ns}",
                                {"namespace": ns, "service_account": sa})
             for ns, sa in accounts.items()}
    return IdentityMap(section, tables["users"], tables["groups"], by_ns)
