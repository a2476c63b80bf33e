"""The pods' required node affinity from ``--exclude``, ``--constraint`` and the engine's
pinned hosts (pure).

``--exclude`` is ``kubernetes.io/hostname NotIn`` its hosts; each ``--constraint``
feature (``A&B`` or ``A,B``: all of them) a node label, ``key=value`` → ``In``, ``key``
→ ``Exists``; pinned hosts ``kubernetes.io/hostname In``. All go in ONE node selector
term, so every expression holds. The labels the apiserver would reject, an empty host
list, a key given twice, and keys that name hosts or node roles (``--nodelist`` is
refused; a job must not pick control-plane nodes) are refused with the reason: at
admission (k8s_adapter/options.py) and again when rendering (a row an older daemon
admitted), never sent to fail in the JobSet controller where no one would see it.

Contract: :func:`exclude_values` and :func:`constraint_expressions` raise
``ValueError`` naming what is wrong; :func:`node_affinity` raises
:class:`bridge.backend.BackendRejected`; :func:`keep_affinity` puts the bridge's
expressions back into every term of a pod spec that ``spec.runtimePatches`` changed.
"""

from __future__ import annotations

import re
from typing import Any

from bridge.backend import BackendRejected, SubmitRequest
from bridge.hostlist import HostlistError, count, expand
from bridge.placement_request import features_of
from bridge.topology import HOSTNAME_LABEL

__all__ = ["MAX_EXCLUDED", "constraint_expressions", "exclude_values", "keep_affinity",
           "node_affinity"]

#: The most hosts ``--exclude`` may name here (each is copied into every pod).
MAX_EXCLUDED = 1024
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_PREFIX = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
#: Label keys (or prefixes) a job may not select on.
_RESERVED = (HOSTNAME_LABEL, "node-role.kubernetes.io/", "node-restriction.kubernetes.io/")


def _label_key_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not _PREFIX.fullmatch(prefix)):
        return "its prefix is not a DNS subdomain"
    if len(name) > 63 or not _NAME.fullmatch(name):
        return "its name is not 1-63 letters, digits, '-', '_', '.'"
    if key == HOSTNAME_LABEL or any(key.startswith(r) for r in _RESERVED[1:]):
        return "it names hosts or node roles, which a job may not select"
    return None


def constraint_expressions(constraint: str | None) -> list[dict[str, Any]]:
    """The match expressions of ``--constraint`` (see the module docstring)."""
    features = features_of(constraint)
    if features is None:
        raise ValueError("only FEATURE or FEATURE&FEATURE... (node labels: key=value or "
                         "key) translate to Kubernetes; '|', counts and brackets do not")
    expressions: list[dict[str, Any]] = []
    values: dict[str, str] = {}
    for feature in sorted(features):
        key, eq, value = feature.partition("=")
        problem = _label_key_problem(key)
        if problem is None and value and (len(value) > 63 or not _NAME.fullmatch(value)):
            problem = "its value is not 1-63 letters, digits, '-', '_', '.'"
        if problem is None and eq and values.setdefault(key, value) != value:
            problem = f"{key} cannot be both {values[key]!r} and {value!r}: no node is"
        if problem is not None:
            raise ValueError(f"{feature!r} is not a node label a job may ask for: {problem}")
        expressions.append({"key": key, "operator": "In", "values": [value]} if eq
                           else {"key": key, "operator": "Exists"})
    return expressions


def exclude_values(exclude: str | None) -> list[str]:
    """The host names of ``--exclude`` (sorted, unique; empty: none given)."""
    if exclude is None:
        return []
    if count(exclude) > MAX_EXCLUDED:
        raise ValueError(f"names more than {MAX_EXCLUDED} hosts")
    try:
        hosts = sorted(set(expand(exclude)))
    except HostlistError as exc:
        raise ValueError(exc.reason) from None
    if not hosts:
        raise ValueError("names no hosts")
    return hosts


def node_affinity(request: SubmitRequest) -> dict[str, Any] | None:
    """The pods' required node affinity, or ``None`` when nothing restricts them."""
    expressions: list[dict[str, Any]] = []
    placement = request.placement
    if placement is not None and placement.hosts:
        expressions.append({"key": HOSTNAME_LABEL, "operator": "In",
                            "values": sorted(set(placement.hosts))})
    o = request.options
    try:
        excluded = exclude_values(o.exclude)
    except ValueError as exc:
        raise BackendRejected(f"kubernetes back end: --exclude: {exc}") from None
    if excluded:
        expressions.append({"key": HOSTNAME_LABEL, "operator": "NotIn", "values": excluded})
    try:
        expressions += constraint_expressions(o.constraint) if o.constraint else []
    except ValueError as exc:
        raise BackendRejected(f"kubernetes back end: --constraint: {exc}") from None
    if not expressions:
        return None
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": expressions}]}}}


def keep_affinity(pod_spec: dict[str, Any], affinity: dict[str, Any] | None) -> None:
    """After ``spec.runtimePatches``: every required node selector term of ``pod_spec``
    also holds the bridge's expressions (a patch's own affinity replaces the list; the
    user's ``--exclude``/``--constraint`` and the pinned hosts must still hold)."""
    if affinity is None:
        return
    ours = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"]
    try:
        node = pod_spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        required = node.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
        terms = required.get("nodeSelectorTerms") or [{}]
        for term in terms:
            present = term.setdefault("matchExpressions", [])
            term["matchExpressions"] = [*present, *(e for e in ours if e not in present)]
        required["nodeSelectorTerms"] = terms
    except (AttributeError, TypeError):
        raise BackendRejected("spec.runtimePatches: the pod's affinity must be a mapping "
                              "of node selector terms") from None
