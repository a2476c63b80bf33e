"""One :class:`Allocation` from whatever world the nodes came from.

Readers (all pure: they take the environment or document as arguments):

- :func:`from_slurm_env`: ``SLURM_JOB_NODELIST`` + ``SLURM_TASKS_PER_NODE`` (or
  ``SLURM_JOB_CPUS_PER_NODE``) in their ``N(xM)`` form, ``SLURM_NODEID`` …
- :func:`from_flux_r`: a Flux R document (RFC 20), ranks mapped onto ``nodelist``.
- :func:`from_jobset_env` / :func:`jobset_allocation`: a Kubernetes JobSet pod laid
  out as Kubeflow Trainer does (replicatedJob ``node``, pods
  ``<jobset>-node-0-<index>.<subdomain>``).
- :func:`from_host_list`: ``a:2,b:2`` for local runs.

Every malformed input raises :class:`AllocationError` naming the variable and value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mpi_launch.errors import MpiLaunchError
from mpi_launch.hostlist import MAX_HOSTS, HostlistError, expand

__all__ = [
    "WORLDS",
    "Allocation",
    "AllocationError",
    "Host",
    "detect_world",
    "flux_node_rank",
    "from_flux_r",
    "from_host_list",
    "from_jobset_env",
    "from_slurm_env",
    "jobset_allocation",
    "parse_idset",
    "parse_slurm_counts",
]

WORLDS = ("slurm", "flux", "jobset", "local")

_SHOW_MAX = 120
_COUNT = re.compile(r"(-?[0-9]{1,18})(?:\(x(-?[0-9]{1,18})\))?")
_IDSET_PIECE = re.compile(r"([0-9]{1,18})(?:-([0-9]{1,18}))?")
_INT = re.compile(r"[0-9]{1,18}")


class AllocationError(MpiLaunchError, ValueError):
    """An input that does not describe an allocation; names the variable and its value."""

    def __init__(self, variable: str, value: object, reason: str) -> None:
        self.variable = variable
        self.value = value
        self.reason = reason
        shown = "unset" if value is None else _show(value)
        super().__init__(f"{variable}={shown}: {reason}")


def _show(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if len(text) <= _SHOW_MAX:
        return repr(text)
    return repr(text[:_SHOW_MAX]) + f"... ({len(text)} characters)"


@dataclass(frozen=True)
class Host:
    """One node: its name, how many ranks it takes (slots) and its GPUs."""

    name: str
    slots: int
    gpus: int = 0


@dataclass(frozen=True)
class Allocation:
    """The nodes of a job, in rank order, seen from one process on one of them.

    ``node_rank`` is this process's index in ``hosts``. ``proc_rank``/``local_rank`` are
    set only when a launcher started this process as one rank of many (an ``srun`` step,
    ``flux run``); ``None`` means one process per node. ``step`` and ``resv_ports`` are
    Slurm's step id and ``SLURM_STEP_RESV_PORTS``.
    """

    world: str
    job_id: str
    hosts: tuple[Host, ...]
    node_rank: int = 0
    proc_rank: int | None = None
    local_rank: int | None = None
    step: str | None = None
    resv_ports: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.world not in WORLDS:
            raise ValueError(f"unknown world {self.world!r}")
        if not self.hosts:
            raise ValueError("an allocation needs at least one host")
        if not 0 <= self.node_rank < len(self.hosts):
            raise ValueError(f"node rank {self.node_rank} outside 0..{len(self.hosts) - 1}")
        for h in self.hosts:
            if h.slots < 1 or h.gpus < 0:
                raise ValueError(f"host {h.name}: slots must be >= 1 and gpus >= 0")

    @property
    def names(self) -> list[str]:
        """Host names in rank order."""
        return [h.name for h in self.hosts]

    @property
    def this_host(self) -> Host:
        """The host this process runs on."""
        return self.hosts[self.node_rank]

    @property
    def total_slots(self) -> int:
        """Sum of slots: the world size when every slot runs one rank."""
        return sum(h.slots for h in self.hosts)

    @property
    def uniform_slots(self) -> int | None:
        """The common slot count, or None when hosts differ."""
        first = self.hosts[0].slots
        return first if all(h.slots == first for h in self.hosts) else None

    def with_slots(self, slots: int) -> Allocation:
        """The same allocation with ``slots`` on every host (``--nproc-per-node``)."""
        if slots < 1:
            raise AllocationError("--nproc-per-node", str(slots), "must be a positive count")
        return replace(self, hosts=tuple(replace(h, slots=slots) for h in self.hosts))


def detect_world(env: Mapping[str, str]) -> str:
    """The world this process runs in, innermost first: jobset, flux, slurm, else local.

    JobSet needs ``JOB_COMPLETION_INDEX`` and ``JOBSET_NAME``; Flux ``FLUX_JOB_ID``;
    Slurm ``SLURM_JOB_ID`` (or ``SLURM_JOBID``). A Flux instance started inside a Slurm
    job is Flux.
    """
    if "JOB_COMPLETION_INDEX" in env and "JOBSET_NAME" in env:
        return "jobset"
    if "FLUX_JOB_ID" in env:
        return "flux"
    if "SLURM_JOB_ID" in env or "SLURM_JOBID" in env:
        return "slurm"
    return "local"


# --------------------------------------------------------------------------- counts


def parse_slurm_counts(value: str, *, variable: str, expected: int | None = None) -> list[int]:
    """Expand Slurm's ``N(xM)`` list (``72(x2),36`` → ``[72, 72, 36]``).

    Every count must be positive; with ``expected`` the list must have that length
    (checked before expanding, so ``1(x999999999)`` costs nothing).
    """
    pairs: list[tuple[int, int]] = []
    for piece in value.split(","):
        m = _COUNT.fullmatch(piece.strip())
        if m is None:
            raise AllocationError(variable, value, f"{piece!r} is not N or N(xM)")
        count, repeat = int(m.group(1)), int(m.group(2) or 1)
        if count < 1 or repeat < 1:
            raise AllocationError(variable, value, f"{piece!r}: counts must be positive")
        pairs.append((count, repeat))
    total = sum(r for _, r in pairs)
    if expected is not None and total != expected:
        raise AllocationError(variable, value,
                              f"gives {total} counts for {expected} hosts")
    if total > MAX_HOSTS:
        raise AllocationError(variable, value, f"more than {MAX_HOSTS} counts")
    return [c for c, r in pairs for _ in range(r)]


def parse_idset(value: object, *, variable: str) -> list[int]:
    """The ids of an RFC 22 idset string (``0-3,5``, optionally in brackets), sorted."""
    if not isinstance(value, str):
        raise AllocationError(variable, value, "must be an idset string like '0-3,5'")
    body = value.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    if not body:
        return []
    ids: set[int] = set()
    for piece in body.split(","):
        m = _IDSET_PIECE.fullmatch(piece)
        if m is None:
            raise AllocationError(variable, value, f"{piece!r} is not an id or range")
        lo = int(m.group(1))
        hi = lo if m.group(2) is None else int(m.group(2))
        if hi < lo:
            raise AllocationError(variable, value, f"range {piece!r} goes backwards")
        if hi - lo >= MAX_HOSTS or len(ids) + hi - lo >= MAX_HOSTS:
            raise AllocationError(variable, value, f"more than {MAX_HOSTS} ids")
        ids.update(range(lo, hi + 1))
    return sorted(ids)


def _int_var(env: Mapping[str, str], variable: str, *, minimum: int = 0) -> int | None:
    raw = env.get(variable)
    if raw is None:
        return None
    if not _INT.fullmatch(raw.strip()):
        raise AllocationError(variable, raw, "must be a non-negative integer")
    number = int(raw)
    if number < minimum:
        raise AllocationError(variable, raw, f"must be at least {minimum}")
    return number


def _expand(expr: str, variable: str) -> list[str]:
    try:
        hosts = expand(expr, source=variable)
    except HostlistError as e:
        raise AllocationError(variable, expr, e.reason) from None
    if not hosts:
        raise AllocationError(variable, expr, "names no hosts")
    return hosts


# --------------------------------------------------------------------------- Slurm


def _slurm_gpus(env: Mapping[str, str]) -> int:
    """GPUs per node: ``SLURM_GPUS_PER_NODE`` (``4``, ``a100:4``, ``a100:2,v100:1``),
    else ``SLURM_GPUS_ON_NODE``, else 0."""
    raw = env.get("SLURM_GPUS_PER_NODE")
    if raw is not None:
        total = 0
        for piece in raw.split(","):
            count = piece.rsplit(":", 1)[-1].strip()
            if not _INT.fullmatch(count):
                raise AllocationError("SLURM_GPUS_PER_NODE", raw,
                                      "must be COUNT or TYPE:COUNT[,TYPE:COUNT]")
            total += int(count)
        return total
    return _int_var(env, "SLURM_GPUS_ON_NODE") or 0


def _resv_ports(env: Mapping[str, str]) -> tuple[int, ...]:
    raw = env.get("SLURM_STEP_RESV_PORTS")
    if not raw:
        return ()
    ports = parse_idset(raw, variable="SLURM_STEP_RESV_PORTS")
    if not ports or ports[-1] > 65535:
        raise AllocationError("SLURM_STEP_RESV_PORTS", raw, "must be ports like 12000-12003")
    return tuple(ports)


def from_slurm_env(env: Mapping[str, str]) -> Allocation:
    """Read a Slurm job (batch script) or job step (task of ``srun``) from its environment.

    In a step (``SLURM_STEP_ID`` set) the step's view is used: ``SLURM_STEP_NODELIST``,
    ``SLURM_STEP_TASKS_PER_NODE``, and ``SLURM_PROCID``/``SLURM_LOCALID`` as this
    process's rank. In the batch script: ``SLURM_JOB_NODELIST`` (or ``SLURM_NODELIST``)
    and ``SLURM_TASKS_PER_NODE``, else ``SLURM_JOB_CPUS_PER_NODE``, as slots; no rank.
    ``SLURM_NODEID`` is the node rank (0 when unset).
    """
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not job_id:
        raise AllocationError("SLURM_JOB_ID", None, "not in a Slurm job")
    step = env.get("SLURM_STEP_ID")
    in_step = step is not None
    node_vars = (["SLURM_STEP_NODELIST"] if in_step else []) + ["SLURM_JOB_NODELIST",
                                                               "SLURM_NODELIST"]
    node_var = next((v for v in node_vars if env.get(v)), None)
    if node_var is None:
        raise AllocationError("SLURM_JOB_NODELIST", None, "no node list in the environment")
    names = _expand(env[node_var], node_var)
    count_vars = (["SLURM_STEP_TASKS_PER_NODE"] if in_step else []) + [
        "SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE"]
    count_var = next((v for v in count_vars if env.get(v)), None)
    if count_var is None:
        slots = [1] * len(names)
    else:
        slots = parse_slurm_counts(env[count_var], variable=count_var, expected=len(names))
    gpus = _slurm_gpus(env)
    node_rank = _int_var(env, "SLURM_NODEID") or 0
    if node_rank >= len(names):
        raise AllocationError("SLURM_NODEID", env["SLURM_NODEID"],
                              f"outside the {len(names)} nodes of {node_var}")
    proc_rank = _int_var(env, "SLURM_PROCID") if in_step else None
    local_rank = _int_var(env, "SLURM_LOCALID") if in_step else None
    return Allocation(world="slurm", job_id=job_id,
                      hosts=tuple(Host(n, s, gpus) for n, s in zip(names, slots, strict=True)),
                      node_rank=node_rank, proc_rank=proc_rank, local_rank=local_rank,
                      step=step, resv_ports=_resv_ports(env))


# --------------------------------------------------------------------------- Flux


def _field(obj: Any, key: str, path: str, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(obj, dict):
        raise AllocationError(path, obj, "must be an object")
    if key not in obj:
        raise AllocationError(f"{path}.{key}", None, "missing")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise AllocationError(f"{path}.{key}", value, f"must be a {names}")
    return value


def from_flux_r(r: str | Mapping[str, Any], *, job_id: str, hostname: str | None = None,
                node_rank: int | None = None, proc_rank: int | None = None,
                local_rank: int | None = None, source: str = "R") -> Allocation:
    """Read a Flux R document (RFC 20 version 1) into an allocation.

    Broker ranks of all ``execution.R_lite`` entries, sorted, map one to one onto the
    names of ``execution.nodelist`` (RFC 29 hostlists, concatenated); slots are the cores
    of ``children.core``, GPUs those of ``children.gpu``. This node is ``node_rank`` if
    given (from :func:`flux_node_rank`: host names need not be unique), else the position
    of ``hostname`` (or its short name) in the node list.
    """
    doc: Any = r
    if isinstance(r, str):
        try:
            doc = json.loads(r)
        except json.JSONDecodeError as e:
            raise AllocationError(source, r, f"not JSON ({e.msg} at {e.pos})") from None
    if not isinstance(doc, dict):
        raise AllocationError(source, doc, "must be a JSON object")
    version = _field(doc, "version", source, int)
    if version != 1:
        raise AllocationError(f"{source}.version", version, "only version 1 is supported")
    execution = _field(doc, "execution", source, dict)
    path = f"{source}.execution"
    r_lite = _field(execution, "R_lite", path, list)
    nodelist = _field(execution, "nodelist", path, list)
    if not r_lite:
        raise AllocationError(f"{path}.R_lite", r_lite, "lists no ranks")
    per_rank: dict[int, tuple[int, int]] = {}
    for i, entry in enumerate(r_lite):
        epath = f"{path}.R_lite[{i}]"
        ranks = parse_idset(_field(entry, "rank", epath, str), variable=f"{epath}.rank")
        children = _field(entry, "children", epath, dict)
        cores = parse_idset(_field(children, "core", f"{epath}.children", str),
                            variable=f"{epath}.children.core")
        if not cores:
            raise AllocationError(f"{epath}.children.core", children["core"], "has no cores")
        gpus = parse_idset(children.get("gpu", ""), variable=f"{epath}.children.gpu")
        for rank in ranks:
            if rank in per_rank:
                raise AllocationError(f"{epath}.rank", entry["rank"],
                                      f"rank {rank} appears twice in R_lite")
            per_rank[rank] = (len(cores), len(gpus))
    names: list[str] = []
    for j, expr in enumerate(nodelist):
        if not isinstance(expr, str):
            raise AllocationError(f"{path}.nodelist[{j}]", expr, "must be a hostlist string")
        names.extend(_expand(expr, f"{path}.nodelist[{j}]"))
    if len(names) != len(per_rank):
        raise AllocationError(f"{path}.nodelist", nodelist,
                              f"names {len(names)} hosts for {len(per_rank)} ranks in R_lite")
    hosts = tuple(Host(name, *per_rank[rank])
                  for name, rank in zip(names, sorted(per_rank), strict=True))
    if node_rank is None:
        node_rank = _find_host(names, hostname, source)
    elif not 0 <= node_rank < len(hosts):
        raise AllocationError("node rank", str(node_rank), f"outside the {len(hosts)} nodes")
    return Allocation(world="flux", job_id=job_id, hosts=hosts, node_rank=node_rank,
                      proc_rank=proc_rank, local_rank=local_rank)


def flux_node_rank(env: Mapping[str, str]) -> int | None:
    """This task's node: its position among the job's brokers, in R's rank order.

    The job shell of the job's ``i``-th broker (broker ranks sorted) starts tasks
    ``i*P … i*P+P-1`` when every node runs ``P`` tasks (Flux's default block task map,
    which every jobspec of the bridge gets: one task per node, or ``per-resource`` node
    count P), so the node is ``FLUX_TASK_RANK // (FLUX_JOB_SIZE / FLUX_JOB_NNODES)``.
    This holds where several brokers share one host name (``flux start --test-size``,
    several brokers per node), where the host name cannot tell nodes apart. None when a
    variable is missing or the tasks do not divide evenly over the nodes.
    """
    try:
        rank, size, nnodes = (int(env[k]) for k in ("FLUX_TASK_RANK", "FLUX_JOB_SIZE",
                                                     "FLUX_JOB_NNODES"))
    except (KeyError, ValueError):
        return None
    if nnodes < 1 or size < nnodes or size % nnodes or not 0 <= rank < size:
        return None
    return rank // (size // nnodes)


def _find_host(names: Sequence[str], hostname: str | None, source: str) -> int:
    if hostname is None:
        raise AllocationError("hostname", None, f"needed to find this node in {source}")
    for candidate in (hostname, hostname.split(".", 1)[0]):
        if candidate in names:
            return names.index(candidate)
    short = [n.split(".", 1)[0] for n in names]
    if hostname.split(".", 1)[0] in short:
        return short.index(hostname.split(".", 1)[0])
    raise AllocationError("hostname", hostname, f"is not one of the nodes of {source}")


# --------------------------------------------------------------------------- JobSet


def jobset_allocation(jobset: str, *, nodes: int, slots: int, pod_index: int,
                      replicated_job: str = "node", job_index: int = 0,
                      subdomain: str | None = None, gpus: int = 0) -> Allocation:
    """The stable DNS names of a JobSet's node pods, as Kubeflow Trainer lays them out.

    Pod ``i`` of job ``job_index`` of replicatedJob ``replicated_job`` is
    ``<jobset>-<replicated_job>-<job_index>-<i>.<subdomain>`` (subdomain defaults to the
    JobSet name, the headless Service JobSet creates). This pod is ``pod_index``.
    """
    if nodes < 1:
        raise AllocationError("JOBSET_NNODES", str(nodes), "must be a positive count")
    if slots < 1:
        raise AllocationError("JOBSET_NPROC_PER_NODE", str(slots), "must be a positive count")
    if not 0 <= pod_index < nodes:
        raise AllocationError("JOB_COMPLETION_INDEX", str(pod_index),
                              f"outside the {nodes} node pods")
    domain = subdomain or jobset
    hosts = tuple(Host(f"{jobset}-{replicated_job}-{job_index}-{i}.{domain}", slots, gpus)
                  for i in range(nodes))
    return Allocation(world="jobset", job_id=jobset, hosts=hosts, node_rank=pod_index)


_POD_HOSTNAME = re.compile(r"(?P<jobset>.+)-(?P<rjob>[^-]+)-(?P<job>[0-9]+)-(?P<pod>[0-9]+)")


def from_jobset_env(env: Mapping[str, str]) -> Allocation:
    """Read a JobSet node pod from its environment.

    ``JOB_COMPLETION_INDEX`` (set by Kubernetes for Indexed Jobs) is the pod index;
    ``JOBSET_NAME`` (downward API from the ``jobset.sigs.k8s.io/jobset-name`` label;
    when unset it is taken from a ``<jobset>-<rjob>-<job>-<pod>`` ``HOSTNAME``),
    ``JOBSET_REPLICATED_JOB`` (default ``node``), ``JOBSET_JOB_INDEX`` (default 0),
    ``JOBSET_SUBDOMAIN`` (default the JobSet name), ``JOBSET_NNODES`` (else Trainer's
    ``PET_NNODES``), ``JOBSET_NPROC_PER_NODE`` (else ``PET_NPROC_PER_NODE``, else 1),
    ``JOBSET_GPUS_PER_NODE`` (default 0).
    """
    pod_index = _int_var(env, "JOB_COMPLETION_INDEX")
    if pod_index is None:
        raise AllocationError("JOB_COMPLETION_INDEX", None, "not in an Indexed Job pod")
    jobset = env.get("JOBSET_NAME")
    replicated_job = env.get("JOBSET_REPLICATED_JOB")
    job_index = _int_var(env, "JOBSET_JOB_INDEX")
    if not jobset:
        m = _POD_HOSTNAME.fullmatch(env.get("HOSTNAME", ""))
        if m is None:
            raise AllocationError("JOBSET_NAME", None,
                                  "unset, and HOSTNAME is not <jobset>-<rjob>-<job>-<pod>")
        jobset = m["jobset"]
        replicated_job = replicated_job or m["rjob"]
        job_index = int(m["job"]) if job_index is None else job_index
    nodes_var = "JOBSET_NNODES" if "JOBSET_NNODES" in env else "PET_NNODES"
    nodes = _int_var(env, nodes_var, minimum=1)
    if nodes is None:
        raise AllocationError("JOBSET_NNODES", None, "the number of node pods is needed")
    slots_var = "JOBSET_NPROC_PER_NODE" if "JOBSET_NPROC_PER_NODE" in env else (
        "PET_NPROC_PER_NODE")
    raw_slots = env.get(slots_var)
    slots = 1
    if raw_slots is not None and raw_slots not in ("auto", "cpu", "gpu"):
        slots = _int_var(env, slots_var, minimum=1) or 1
    gpus = _int_var(env, "JOBSET_GPUS_PER_NODE") or 0
    return jobset_allocation(jobset, nodes=nodes, slots=slots, pod_index=pod_index,
                             replicated_job=replicated_job or "node",
                             job_index=job_index or 0,
                             subdomain=env.get("JOBSET_SUBDOMAIN") or None, gpus=gpus)


# --------------------------------------------------------------------------- local


def _split_top_level(spec: str) -> list[str]:
    """Split at commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(spec):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(spec[start:i])
            start = i + 1
    items.append(spec[start:])
    return [item.strip() for item in items if item.strip()]


def from_host_list(spec: str, *, node_rank: int = 0, job_id: str = "local",
                   variable: str = "--hosts") -> Allocation:
    """Hosts from ``a:2,b:2`` or ``node[1-4]:8,gpu1`` (slots default to 1)."""
    hosts: list[Host] = []
    for item in _split_top_level(spec):
        expr, sep, count = item.rpartition(":")
        if not sep or "]" in count:
            expr, count = item, "1"
        if not _INT.fullmatch(count) or int(count) < 1:
            raise AllocationError(variable, spec, f"{item!r}: slots must be a positive count")
        try:
            names = expand(expr, source=variable)
        except HostlistError as e:
            raise AllocationError(variable, spec, f"{item!r}: {e.reason}") from None
        hosts.extend(Host(n, int(count)) for n in names)
    if not hosts:
        raise AllocationError(variable, spec, "names no hosts")
    if not 0 <= node_rank < len(hosts):
        raise AllocationError("--node-rank", str(node_rank), f"outside the {len(hosts)} hosts")
    return Allocation(world="local", job_id=job_id, hosts=tuple(hosts), node_rank=node_rank)
