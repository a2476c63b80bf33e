"""Daemon configuration: a TOML file, validated.

Example (every key optional except one back end)::

    [daemon]
    state_dir = "/var/lib/hpc-bridge"        # SQLite store lives here
    socket = "/run/hpc-bridge/bridge.sock"   # unix socket of the API
    tcp = "127.0.0.1:8765"                   # optional; needs token_file
    health = "0.0.0.0:8081"                  # optional: /v1/healthz alone, for probes
    token_file = "/etc/hpc-bridge/tokens.csv"
    log_format = "json"                      # or "console"
    log_level = "info"
    event_loop = "uvloop"                    # or "asyncio" (bridge/eventloop.py)

    [engine]
    default_backend = "slurm"
    poll_interval = 2.0

    [limits]                                 # per user; 0 = off; root is exempt
    max_active_jobs = 5000
    submit_rate = 20.0                       # submissions per second ...
    submit_burst = 200                       # ... after a burst of this many
    max_concurrent_requests = 32
    request_rate = 50.0                      # requests of any kind per second ...
    request_burst = 200                      # ... after a burst of this many
    log_interval = 60.0                      # seconds between "per-user limits hit" lines
    max_request_bytes = 8388608
    max_script_bytes = 4194304

    [runtimes]
    paths = ["/etc/hpc-bridge/runtimes/*.yaml"]  # more ClusterTrainingRuntimes

    [backends.slurm]
    kind = "slurm"                           # entry point in hpc_bridge.backends
    placement = "constraints"                # or "nodelist" / "none" (docs/placement.md)
    rest_socket = "/run/slurmrestd/rest.sock"
    route_partitions = ["gpu"]               # jobs for these partitions come here

    [frontdoors.kubernetes]                  # optional: TrainJob CRs (docs/kubernetes.md)
    kind = "kubernetes"
    kubeconfig = "/etc/hpc-bridge/kubeconfig"

    [leader_election]                        # optional: replicas (docs/operations.md)
    kind = "kubernetes"                      # a coordination.k8s.io Lease
    lease = "hpc-bridge"

    [events.mqtt]                            # optional: the event stream (docs/events.md)
    host = "mqtt.example.org"

    [metrics]                                # optional: Prometheus (docs/events.md)
    listen = "127.0.0.1:9464"

Contract: :func:`load_config` returns a :class:`Config` or raises :class:`ConfigError`
whose message names the file and the key.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from bridge.errors import BridgeError
from bridge.settings_events import EventsSection, MetricsSection


class ConfigError(BridgeError, ValueError):
    """The configuration file is missing, malformed or invalid."""


class DaemonSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state_dir: Path = Path("/var/lib/hpc-bridge")
    socket: str = "/run/hpc-bridge/bridge.sock"
    tcp: str | None = None
    token_file: Path | None = None
    #: ``host:port`` serving ``/v1/healthz`` alone, without credentials (probes).
    health: str | None = None
    log_format: Literal["json", "console"] = "json"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    #: The loop the daemon runs on (:mod:`bridge.eventloop`).
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"
    durable: bool = Field(default=False, description="fsync every commit (power-loss safe)")


class EngineSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    default_backend: str | None = None
    poll_interval: float = Field(default=2.0, gt=0)
    submit_timeout: float = Field(default=15.0, gt=0)
    max_parallel_submits: int = Field(default=8, ge=1)
    retry_base: float = Field(default=1.0, gt=0)
    retry_cap: float = Field(default=60.0, gt=0)
    lost_after_seconds: float = Field(default=30.0, ge=0)
    default_namespace: str = "default"
    #: An inventory older than this is read again before a job is placed (seconds).
    placement_max_age: float = Field(default=5.0, ge=0)
    #: After a submission the inventory is read again once it is this old (seconds);
    #: until then the placements made since the last read are taken off it.
    placement_min_reread: float = Field(default=1.0, ge=0)


class LimitsSection(BaseModel):
    """Per-user limits of the API (docs/operations.md, "Fair share"): each user's share
    of one daemon. 0 turns a limit off. root (uid 0) is exempt from the per-user limits
    (it is the admin, and in-cluster tools run as it); the size limits apply to all."""

    model_config = ConfigDict(extra="forbid")

    #: Unfinished jobs (Pending, Suspended, Submitted, Running) one user may have.
    max_active_jobs: int = Field(default=5000, ge=0)
    #: Submissions per second one user may sustain (a token bucket) ...
    submit_rate: float = Field(default=20.0, ge=0)
    #: ... and how many may come at once before the rate applies.
    submit_burst: int = Field(default=200, ge=1)
    #: Requests of one user in progress at once (a followed log holds one).
    max_concurrent_requests: int = Field(default=32, ge=0)
    #: Requests per second one user may sustain, of any kind, after a burst of
    #: ``request_burst`` (``watch tqueue`` makes one every 2 s).
    request_rate: float = Field(default=50.0, ge=0)
    request_burst: int = Field(default=200, ge=1)
    #: How often the counts of refusals are logged ("per-user limits hit"), seconds.
    log_interval: float = Field(default=60.0, gt=0)
    #: Largest request body the daemon reads (413 above it).
    max_request_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    #: Largest batch script (``hpc-bridge.io/batch-script``); tbatch's and Slurm's default.
    max_script_bytes: int = Field(default=4 * 1024 * 1024, ge=1)


class TrainerStatusSection(BaseModel):
    """Progress reports from inside jobs (Kubeflow Trainer's KEP-2779 protocol;
    docs/events.md, "Training progress"): an HTTPS endpoint the compute nodes reach.
    Off while ``listen`` is empty."""

    model_config = ConfigDict(extra="forbid")

    #: ``HOST:PORT`` to serve on (e.g. ``0.0.0.0:8443``).
    listen: str = ""
    #: The base URL jobs use (default ``https://<this host's name>:<port>``).
    url: str = ""
    #: The server's certificate (chain) and key, PEM.
    tls_cert: str = ""
    tls_key: str = ""
    #: The CA certificate jobs verify the server with (default: ``tls_cert``, for a
    #: self-signed one); it must be readable by every user on the compute nodes.
    ca_cert: str = ""
    #: Where each job's token file goes (the daemon's, mode 0711; each file readable
    #: by its job's owner only): a directory the compute nodes see, outside
    #: ``daemon.state_dir``, whose parents only root may change. Without it only pods
    #: (the Kubernetes back end: a Secret each) can report; Slurm and Flux jobs cannot.
    token_dir: str = ""
    #: The tokens' secret (32 bytes or more, mode 0600): one file every replica of a
    #: leader election reads, so that a new leader takes the running jobs' tokens
    #: (default: ``trainer-status.key`` made in ``daemon.state_dir``).
    secret_file: str = ""
    #: Reports per second one job may sustain, after a burst of ``burst`` ...
    rate: float = Field(default=1.0, gt=0)
    burst: int = Field(default=10, ge=1)
    #: ... and all of one user's jobs together.
    user_rate: float = Field(default=20.0, gt=0)
    user_burst: int = Field(default=100, ge=1)
    #: A job's report becomes an event (MQTT, ``/v1/events``) at most this often
    #: (seconds); in between, only its stored status (tqueue, tshow, the CR) changes.
    event_interval: float = Field(default=10.0, ge=0)
    #: The largest report body (413 above it).
    max_body_bytes: int = Field(default=16384, ge=1024, le=1024 * 1024)
    #: How often the token files of ended jobs are removed (seconds).
    sweep_interval: float = Field(default=60.0, gt=0)

    @pydantic.model_validator(mode="after")
    def _check(self) -> TrainerStatusSection:
        if self.listen:
            if ":" not in self.listen:
                raise ValueError(f"listen: {self.listen!r} is not HOST:PORT")
            if not (self.tls_cert and self.tls_key):
                raise ValueError("tls_cert and tls_key are needed with listen (the endpoint "
                                 "is HTTPS only)")

        return self


class RuntimesSection(BaseModel):
    """Training runtimes the admin adds to the built-in catalog: YAML files (globs
    allowed) of ClusterTrainingRuntime / TrainingRuntime documents, as for Kubeflow."""

    model_config = ConfigDict(extra="forbid")

    paths: list[str] = Field(default_factory=list)


PlacementMode = Literal["constraints", "nodelist", "none"]


class BackendSection(BaseModel):
    """One back end: ``kind`` picks the adapter; ``placement`` is the engine's placement
    mode for it (docs/placement.md); other keys are the adapter's settings."""

    model_config = ConfigDict(extra="allow")

    kind: str
    placement: PlacementMode = "constraints"
    #: Routing rule: a job that names one of these partitions and no back end (no
    #: ``--backend``/``-M``) runs here rather than on ``engine.default_backend``.
    route_partitions: list[str] = Field(default_factory=list)

    def settings(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class FrontDoorSection(BaseModel):
    """One front door (``kind`` picks it, e.g. ``kubernetes`` for TrainJob CRs); other
    keys are its settings."""

    model_config = ConfigDict(extra="allow")

    kind: str

    def settings(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class LeaderElectionSection(BaseModel):
    """Replicas with one leader (bridge/leader.py): ``kind`` picks the elector (e.g.
    ``kubernetes``: a Lease); other keys are its settings."""

    model_config = ConfigDict(extra="allow")

    kind: str

    def settings(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    daemon: DaemonSection = Field(default_factory=DaemonSection)
    engine: EngineSection = Field(default_factory=EngineSection)
    runtimes: RuntimesSection = Field(default_factory=RuntimesSection)
    limits: LimitsSection = Field(default_factory=LimitsSection)
    backends: dict[str, BackendSection]
    frontdoors: dict[str, FrontDoorSection] = Field(default_factory=dict)
    leader_election: LeaderElectionSection | None = None
    events: EventsSection = Field(default_factory=EventsSection)
    metrics: MetricsSection = Field(default_factory=MetricsSection)
    trainer_status: TrainerStatusSection = Field(default_factory=TrainerStatusSection)

    @pydantic.model_validator(mode="after")
    def _check(self) -> Config:
        if not self.backends:
            raise ValueError("at least one [backends.NAME] section is needed")
        default = self.engine.default_backend
        if default is None:
            self.engine.default_backend = next(iter(self.backends))
        elif default not in self.backends:
            raise ValueError(f"engine.default_backend {default!r} is not a configured back end "
                             f"({', '.join(self.backends)})")
        # A partition routes to one back end.
        routed: dict[str, str] = {}
        for name, section in self.backends.items():
            for partition in section.route_partitions:
                if partition in routed:
                    raise ValueError(f"backends.{name}.route_partitions: partition "
                                     f"{partition!r} is already routed to back end "
                                     f"{routed[partition]!r}")
                routed[partition] = name
        # A front door's back ends (where its jobs go) must exist.
        for name, door in self.frontdoors.items():
            extra = door.settings()
            named = [("backend", extra.get("backend"))] + [
                ("allowed_backends", b) for b in extra.get("allowed_backends") or []]
            for key, backend in named:
                if backend is not None and backend not in self.backends:
                    raise ValueError(f"frontdoors.{name}.{key}: {backend!r} is not a configured "
                                     f"back end ({', '.join(self.backends)})")
        return self


def partition_routes(config: Config) -> dict[str, str]:
    """Partition -> back end, from every ``[backends.NAME] route_partitions``."""
    return {p: name for name, section in config.backends.items()
            for p in section.route_partitions}


def load_config(path: str | Path) -> Config:
    """Read and validate the TOML file at ``path``."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: malformed TOML: {exc}") from None
    try:
        return Config.model_validate(data)
    except pydantic.ValidationError as exc:
        lines = [f"{path}: {'.'.join(str(p) for p in e['loc']) or '(top)'}: "
                 f"{e['msg'].removeprefix('Value error, ')}" for e in exc.errors()]
        raise ConfigError("\n".join(lines)) from None
