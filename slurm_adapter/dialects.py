"""slurmrestd OpenAPI versions as data.

Each supported ``/slurm/vX.Y.Z`` API is one frozen :class:`Dialect`: how it spells
the fields the bridge reads and writes. Code never branches on a version string;
it asks the dialect (``dialect.exit_status(raw)``, ``dialect.encode_env(env)`` …).

* ``v0.0.38`` (Slurm 22.05) — checked field by field against a live slurmrestd
  and ``squeue --json`` (see tests/unit/fixtures/slurm/).
* ``v0.0.40`` … ``v0.0.45`` — checked against live slurmrestd: Slurm 24.11 serves
  v0.0.40 to v0.0.42, Slurm 26.05 serves v0.0.42 to v0.0.45 (testbed/slurm-versions.sh);
  the fields the bridge reads and writes are spelled alike in all of them.

Which version to speak: :func:`negotiate` picks the newest one both the server
(its ``GET /openapi/v3`` paths) and the bridge know.

Differences the dialects capture:

============================  ===========================  ==================================
thing                         v0.0.38                      v0.0.40 … v0.0.45
============================  ===========================  ==================================
submit body                   ``{"script", "job"}``        ``{"job": {"script", ...}}``
``environment``               object ``{"K": "V"}``        list ``["K=V"]``
``job_state``                 string (flags win:           list (base state + flags)
                              ``COMPLETING``)
``exit_code``                 raw wait status (int:        ``{status, return_code{set,
                              ``exit 3`` -> 768, SIGKILL   infinite, number}, signal{id,
                              -> 9)                        name}}``
times, ``time_limit``,        plain int (0 = unset)        ``{set, infinite, number}``
``memory_per_node``
node count                    ``nodes``: int               ``minimum_nodes``/``maximum_nodes``
required / excluded nodes     ``nodelist`` /               ``required_nodes`` /
                              ``exclude_nodes``: string    ``excluded_nodes``: list of names
``exclusive``                 ``"exclusive"``              ``["true"]``
GPUs per node                 ``gpus_per_node``: ``"N"``   ``tres_per_node``: ``"gres/gpu:N"``
``required_switches``,        refused ("Disabled key")     accepted
``wait_for_switch``
node ``state``                lower-case string            list of upper-case names
============================  ===========================  ==================================
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from bridge.errors import BridgeError

__all__ = [
    "DIALECTS",
    "V0_0_38",
    "V0_0_40",
    "V0_0_41",
    "V0_0_42",
    "V0_0_43",
    "V0_0_44",
    "V0_0_45",
    "Dialect",
    "Shape",
    "UnsupportedOption",
    "dialect_for",
    "dialect_from_meta",
    "negotiate",
    "served_versions",
]


class Shape(StrEnum):
    """How a dialect writes one kind of value."""

    #: ``{"K": "V"}`` (environment)
    OBJECT = "object"
    #: ``["K=V"]`` (environment), ``["RUNNING", "COMPLETING"]`` (states)
    LIST = "list"
    #: ``"RUNNING"`` (states)
    STRING = "string"
    #: a plain integer (numbers), the raw wait status (exit codes)
    PLAIN = "plain"
    #: ``{"set": true, "infinite": false, "number": N}`` (numbers)
    NO_VAL = "no_val"
    #: ``{"status": [...], "return_code": NO_VAL, "signal": {"id": NO_VAL}}`` (exit codes)
    VERBOSE = "verbose"


class UnsupportedOption(BridgeError, ValueError):
    """The dialect cannot express a requested option (e.g. switches in v0.0.38)."""


@dataclass(frozen=True)
class Dialect:
    """One slurmrestd OpenAPI version: field names and value shapes."""

    version: str
    verified_live: bool
    env: Shape
    job_state: Shape
    exit_code: Shape
    numbers: Shape
    #: The batch script goes inside ``job`` (True) or beside it (False).
    script_in_job: bool
    #: ``nodes`` (one int) or ``min_max`` (``minimum_nodes`` + ``maximum_nodes``).
    node_count: str
    nodelist_field: str
    exclude_field: str
    #: Node names for nodelist/exclude as a list (True) or a hostlist string (False).
    node_names_as_list: bool
    exclusive_value: Any
    #: ``gpus_per_node`` (value ``"N"``) or ``tres_per_node`` (value ``"gres/gpu:N"``).
    gpus_field: str
    #: Neutral option names (see :class:`slurm_adapter.script.JobSpec`) it cannot carry.
    unsupported: frozenset[str]
    node_state: Shape
    node_features: Shape
    #: Whether the options passed as they are have job fields here (slurm_adapter/
    #: passed_rest.py; v0.0.40 on); without, such a job is submitted with sbatch.
    passed_rest: bool = False

    @property
    def prefix(self) -> str:
        """``/slurm/v0.0.38``"""
        return f"/slurm/{self.version}"

    # --- reading ----------------------------------------------------------------

    def number(self, raw: Any) -> int | None:
        """An integer field: ``None`` when unset, infinite or absent."""
        if raw is None:
            return None
        if isinstance(raw, dict):
            if not raw.get("set", False) or raw.get("infinite", False):
                return None
            raw = raw.get("number")
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            return None
        return int(raw)

    def states(self, raw: Any) -> tuple[str, ...]:
        """The state names of a job or node, upper case (``("RUNNING", "COMPLETING")``)."""
        if raw is None:
            return ()
        if isinstance(raw, str):
            return tuple(s.upper() for s in raw.replace("+", " ").split() if s)
        if isinstance(raw, list):
            return tuple(str(s).upper() for s in raw)
        return ()

    def exit_status(self, raw: Any) -> tuple[int | None, int | None]:
        """``(exit code, signal)`` of a finished job.

        A job ended by a signal reports ``(128 + signal, signal)``, the shell's and
        Kubernetes' convention; ``(None, None)`` when Slurm has no status.
        """
        if raw is None:
            return None, None
        if isinstance(raw, dict):
            status = {str(s).upper() for s in raw.get("status") or ()}
            signal_raw = raw.get("signal") or {}
            sig = self.number(signal_raw.get("id")) if isinstance(signal_raw, dict) else None
            if "SIGNALED" in status and sig:
                return 128 + sig, sig
            code = self.number(raw.get("return_code"))
            return code, None
        if isinstance(raw, bool) or not isinstance(raw, int):
            return None, None
        sig = raw & 0x7F
        if sig not in (0, 0x7F):
            return 128 + sig, sig
        return (raw >> 8) & 0xFF, None

    def features(self, raw: Any) -> tuple[str, ...]:
        """Node features: ``"a,b"`` or ``["a", "b"]``."""
        if isinstance(raw, list):
            return tuple(str(f) for f in raw if f)
        if isinstance(raw, str):
            return tuple(f for f in raw.split(",") if f)
        return ()

    # --- writing ----------------------------------------------------------------

    def encode_number(self, value: int) -> Any:
        if self.numbers is Shape.NO_VAL:
            return {"set": True, "infinite": False, "number": value}
        return value

    def encode_env(self, env: Mapping[str, str]) -> Any:
        if self.env is Shape.LIST:
            return [f"{k}={v}" for k, v in env.items()]
        return dict(env)

    def submit_body(self, script: str, job: dict[str, Any]) -> dict[str, Any]:
        """The JSON body of ``POST {prefix}/job/submit``."""
        if self.script_in_job:
            return {"job": {**job, "script": script}}
        return {"script": script, "job": job}


V0_0_38 = Dialect(
    version="v0.0.38",
    verified_live=True,
    env=Shape.OBJECT,
    job_state=Shape.STRING,
    exit_code=Shape.PLAIN,
    numbers=Shape.PLAIN,
    script_in_job=False,
    node_count="nodes",
    # "required_nodes" and "excluded_nodes" are disabled keys in v0.0.38.
    nodelist_field="nodelist",
    exclude_field="exclude_nodes",
    node_names_as_list=False,
    exclusive_value="exclusive",
    gpus_field="gpus_per_node",
    # "required_switches" / "wait_for_switch" answer "Disabled key" (HTTP 400);
    # "argv" (script arguments) makes slurmrestd 22.05 segfault: never send it.
    unsupported=frozenset({"switches", "script_args", "max_nodes"}),
    node_state=Shape.STRING,
    node_features=Shape.STRING,
)

V0_0_40 = Dialect(
    version="v0.0.40",
    verified_live=True,
    env=Shape.LIST,
    job_state=Shape.LIST,
    exit_code=Shape.VERBOSE,
    numbers=Shape.NO_VAL,
    script_in_job=True,
    node_count="min_max",
    nodelist_field="required_nodes",
    exclude_field="excluded_nodes",
    node_names_as_list=True,
    exclusive_value=["true"],
    gpus_field="tres_per_node",
    # "argv" not tried live on this version: script arguments go through sbatch.
    unsupported=frozenset({"script_args"}),
    node_state=Shape.LIST,
    node_features=Shape.LIST,
    passed_rest=True,
)

V0_0_41 = replace(V0_0_40, version="v0.0.41")
V0_0_42 = replace(V0_0_40, version="v0.0.42")
V0_0_43 = replace(V0_0_40, version="v0.0.43")
V0_0_44 = replace(V0_0_40, version="v0.0.44")
V0_0_45 = replace(V0_0_40, version="v0.0.45")

DIALECTS: dict[str, Dialect] = {d.version: d for d in (
    V0_0_38, V0_0_40, V0_0_41, V0_0_42, V0_0_43, V0_0_44, V0_0_45)}

_SLURM_PATH = re.compile(r"^/slurm/(v\d+\.\d+\.\d+)/")


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.lstrip("v").split("."))


def served_versions(openapi: Any) -> list[str]:
    """The ``/slurm/vX.Y.Z`` API versions an OpenAPI document (slurmrestd's
    ``GET /openapi/v3``) has paths for, oldest first."""
    paths = openapi.get("paths") if isinstance(openapi, dict) else None
    found = {m.group(1) for p in (paths or {}) if isinstance(p, str)
             for m in [_SLURM_PATH.match(p)] if m}
    return sorted(found, key=_version_key)


def negotiate(served: Iterable[str]) -> Dialect:
    """The newest dialect among the ``served`` versions; ValueError naming both lists
    when the server and the bridge share none."""
    offered = sorted(set(served), key=_version_key)
    common = [v for v in offered if v in DIALECTS]
    if not common:
        raise ValueError(f"slurmrestd offers {', '.join(offered) or 'no /slurm API'}; "
                         f"this bridge speaks {', '.join(DIALECTS)}")
    return DIALECTS[common[-1]]


def dialect_for(version: str) -> Dialect:
    """The dialect named ``v0.0.38`` (a leading ``v`` is optional); ValueError if unknown."""
    key = version if version.startswith("v") else f"v{version}"
    try:
        return DIALECTS[key]
    except KeyError:
        raise ValueError(f"unknown slurmrestd API version {version!r}; known: "
                         f"{', '.join(DIALECTS)}") from None


def dialect_from_meta(meta: Any, default: Dialect = V0_0_38) -> Dialect:
    """The dialect a JSON document is written in, from its ``meta`` block.

    Slurm 22.05 writes ``meta.plugin.type = "openapi/v0.0.38"``; later releases
    write ``meta.plugin.data_parser = "data_parser/v0.0.40"``. Unknown: ``default``.
    """
    plugin = meta.get("plugin") if isinstance(meta, dict) else None
    if isinstance(plugin, dict):
        for key in ("data_parser", "type"):
            value = plugin.get(key)
            if isinstance(value, str) and "/" in value:
                version = value.rsplit("/", 1)[1]
                if version in DIALECTS:
                    return DIALECTS[version]
    return default
