"""Flux resource sets (RFC 20 "R", version 1) as hosts, cores and GPUs — pure functions.

* :func:`parse_r` — one :class:`RankResources` per broker rank of an R document:
  ``execution.R_lite`` entries (``rank`` idset, ``children.core``/``children.gpu``
  idsets, RFC 22) mapped onto the host names of ``execution.nodelist`` (RFC 29
  hostlists, concatenated, in rank order: the i-th name belongs to the i-th smallest
  rank), or onto an entry's own ``node`` key when there is no nodelist.
  ``execution.properties`` (``{name: rank idset}``) become each rank's properties.
* :func:`nodes_of` — the host names of an R, in rank order (``BackendJob.nodes``).
* :func:`inventory_nodes` — :class:`bridge.backend.NodeInfo` per host from the three R
  sets of ``resource.sched-status`` (``all``, ``allocated``, ``down``): what
  ``flux resource list`` shows.

Malformed input raises :class:`RError` (a ``ValueError``) naming the key.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.backend import NodeInfo
from bridge.errors import BridgeError
from bridge.ranges import compress as compress_ids
from mpi_launch.allocation import AllocationError, parse_idset
from mpi_launch.hostlist import HostlistError, compress, expand

__all__ = ["RANK_MARK", "RError", "RankResources", "inventory_nodes", "nodes_of", "parse_r",
           "placement_constraint", "queues_of"]

#: In the inventory, a broker that shares its host name with another (``flux start
#: --test-size``, several brokers per node) is ``<host>@<rank>``: placement must see
#: each broker as its own node, and a host name cannot tell them apart for Flux.
RANK_MARK = "@"


class RError(BridgeError, ValueError):
    """An R document that does not follow RFC 20 version 1."""


@dataclass(frozen=True)
class RankResources:
    """The resources of one broker rank (one node) in an R document."""

    rank: int
    host: str
    cores: frozenset[int]
    gpus: frozenset[int] = frozenset()
    properties: frozenset[str] = frozenset()


def _load(r: object, source: str) -> Mapping[str, Any] | None:
    if r is None:
        return None
    doc: Any = r
    if isinstance(r, str | bytes):
        try:
            doc = json.loads(r)
        except json.JSONDecodeError as exc:
            raise RError(f"{source}: not JSON ({exc.msg})") from None
    if not isinstance(doc, Mapping):
        raise RError(f"{source}: must be a JSON object")
    return doc


def _ids(value: object, where: str) -> list[int]:
    try:
        return parse_idset(value, variable=where)
    except AllocationError as exc:
        raise RError(str(exc)) from None


def parse_r(r: object, *, source: str = "R") -> tuple[RankResources, ...]:
    """The ranks of ``r`` (a dict, or its JSON text) sorted by rank. ``None`` or an R
    without ranks gives ``()``."""
    doc = _load(r, source)
    if doc is None:
        return ()
    version = doc.get("version")
    if version != 1:
        raise RError(f"{source}.version: {version!r}; only version 1 is understood")
    execution = doc.get("execution")
    if not isinstance(execution, Mapping):
        raise RError(f"{source}.execution: missing or not an object")
    r_lite = execution.get("R_lite", [])
    if not isinstance(r_lite, list):
        raise RError(f"{source}.execution.R_lite: must be a list")
    per_rank: dict[int, tuple[frozenset[int], frozenset[int], str | None]] = {}
    for i, entry in enumerate(r_lite):
        where = f"{source}.execution.R_lite[{i}]"
        if not isinstance(entry, Mapping):
            raise RError(f"{where}: must be an object")
        ranks = _ids(entry.get("rank"), f"{where}.rank")
        children = entry.get("children")
        if not isinstance(children, Mapping):
            raise RError(f"{where}.children: missing or not an object")
        cores = frozenset(_ids(children.get("core", ""), f"{where}.children.core"))
        gpus = frozenset(_ids(children.get("gpu", ""), f"{where}.children.gpu"))
        node = entry.get("node")
        if node is not None and (not isinstance(node, str) or len(ranks) != 1):
            raise RError(f"{where}.node: must be one host name for one rank")
        for rank in ranks:
            if rank in per_rank:
                raise RError(f"{where}.rank: rank {rank} appears twice in R_lite")
            per_rank[rank] = (cores, gpus, node)
    ranks_sorted = sorted(per_rank)
    names = _nodelist(execution.get("nodelist"), f"{source}.execution.nodelist")
    if names is None:
        missing = [r for r in ranks_sorted if per_rank[r][2] is None]
        if missing:
            raise RError(f"{source}.execution: no nodelist, and rank {missing[0]} has no "
                         f"node name")
        names = [per_rank[r][2] or "" for r in ranks_sorted]
    elif len(names) != len(ranks_sorted):
        raise RError(f"{source}.execution.nodelist: names {len(names)} hosts for "
                     f"{len(ranks_sorted)} ranks in R_lite")
    props = _properties(execution.get("properties"), f"{source}.execution.properties")
    return tuple(
        RankResources(rank=rank, host=name, cores=per_rank[rank][0], gpus=per_rank[rank][1],
                      properties=frozenset(p for p, ranks in props.items() if rank in ranks))
        for rank, name in zip(ranks_sorted, names, strict=True))


def _nodelist(value: object, where: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise RError(f"{where}: must be a list of hostlists")
    names: list[str] = []
    for j, expr in enumerate(value):
        if not isinstance(expr, str):
            raise RError(f"{where}[{j}]: must be a hostlist string")
        try:
            names.extend(expand(expr, source=f"{where}[{j}]"))
        except HostlistError as exc:
            raise RError(str(exc)) from None
    return names


def _properties(value: object, where: str) -> dict[str, frozenset[int]]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RError(f"{where}: must be an object of property: rank idset")
    return {str(name): frozenset(_ids(ranks, f"{where}.{name}")) for name, ranks in value.items()}


def nodes_of(r: object) -> tuple[str, ...]:
    """Host names of ``r`` in rank order; ``()`` for a missing or malformed R."""
    try:
        return tuple(x.host for x in parse_r(r))
    except RError:
        return ()


def queues_of(properties: frozenset[str], queues: Mapping[str, Any]) -> tuple[str, ...]:
    """The queues a node with ``properties`` serves, from the ``[queues]`` table of the
    instance configuration (``requires = [props]``; a queue without it takes every
    node). ``()`` when the instance has no queues."""
    found = []
    for name, conf in sorted(queues.items()):
        requires = conf.get("requires", []) if isinstance(conf, Mapping) else []
        if isinstance(requires, list) and set(map(str, requires)) <= properties:
            found.append(name)
    return tuple(found)


def inventory_nodes(all_r: object, allocated_r: object = None, down_r: object = None,
                    *, queues: Mapping[str, Any] | None = None) -> tuple[NodeInfo, ...]:
    """One :class:`NodeInfo` per host of ``all_r``, in rank order.

    Free cores/GPUs are those of ``all_r`` not in ``allocated_r`` (matched by rank and
    id); a rank in ``down_r`` (down or drained) is ``DOWN`` with nothing free. State:
    ``IDLE`` (nothing allocated), ``MIXED``, ``ALLOCATED`` (nothing free), ``DOWN`` —
    Slurm's words, so placement reads both worlds alike. Properties become features;
    ``queues`` (instance config) gives each node's queues as partitions. Brokers that
    share a host name are named ``<host>@<rank>`` (:data:`RANK_MARK`).
    """
    allocated = {x.rank: x for x in parse_r(allocated_r, source="allocated")}
    down = {x.rank for x in parse_r(down_r, source="down")}
    ranks = parse_r(all_r, source="all")
    shared = {h for h, n in Counter(x.host for x in ranks).items() if n > 1}
    nodes = []
    for x in ranks:
        used = allocated.get(x.rank)
        used_cores = (x.cores & used.cores) if used else frozenset()
        used_gpus = (x.gpus & used.gpus) if used else frozenset()
        if x.rank in down:
            state, free_cores, free_gpus = "DOWN", 0, 0
        else:
            free_cores = len(x.cores - used_cores)
            free_gpus = len(x.gpus - used_gpus)
            if not used_cores and not used_gpus:
                state = "IDLE"
            elif free_cores == 0 and free_gpus == 0:
                state = "ALLOCATED"
            else:
                state = "MIXED"
        nodes.append(NodeInfo(
            name=f"{x.host}{RANK_MARK}{x.rank}" if x.host in shared else x.host,
            state=state, cpus=len(x.cores), free_cpus=free_cores,
            gpus=len(x.gpus), free_gpus=free_gpus,
            partitions=queues_of(x.properties, queues or {}),
            features=tuple(sorted(x.properties))))
    return tuple(nodes)



_RANKED = re.compile(r"(?P<host>[^@]+)@(?P<rank>[0-9]{1,9})")


def _idset(ranks: Sequence[int]) -> str:
    """RFC 22 idset of ``ranks`` (``0-2,5``)."""
    return compress_ids(ranks)


def placement_constraint(names: Sequence[str]) -> dict[str, object]:
    """The RFC 31 constraint for the inventory names the engine placed a job on: host
    names as a ``hostlist``, ``<host>@<rank>`` names as ``ranks`` (either matches).
    Raises :class:`HostlistError` for names no hostlist can hold."""
    hosts = [n for n in names if not _RANKED.fullmatch(n)]
    ranks = [int(m["rank"]) for n in names if (m := _RANKED.fullmatch(n))]
    terms: list[dict[str, object]] = []
    if hosts:
        terms.append({"hostlist": [compress(hosts, source="placement")]})
    if ranks:
        terms.append({"ranks": [_idset(ranks)]})
    return terms[0] if len(terms) == 1 else {"or": terms}
