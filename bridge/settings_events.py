"""Configuration of the event stream and the metrics listener (``[events.mqtt]`` and
``[metrics]`` of the daemon's TOML file; see docs/events.md).

Contract: a value that cannot work (a topic prefix with MQTT wildcards, a port out of
range, a client key without its certificate) is refused when the file is loaded, with
the key named; the password file's mode is checked when the daemon starts
(:func:`bridge.filemodes.check_secret_file`).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pydantic
from pydantic import BaseModel, ConfigDict, Field


def default_prefix() -> str:
    """``hpc-bridge/<short host name>``: one cluster's daemon per prefix."""
    return f"hpc-bridge/{socket.gethostname().split('.')[0] or 'localhost'}"


def check_prefix(prefix: str) -> str:
    """``prefix`` if it is a usable MQTT topic prefix; ``ValueError`` otherwise
    (empty, wildcards ``+``/``#``, a NUL, an empty level, a leading ``$``)."""
    if not prefix or prefix.startswith("$") or any(c in prefix for c in "+#\0"):
        raise ValueError(f"{prefix!r} is not a topic prefix: no wildcards (+ #), NUL or "
                         f"leading $")
    if "" in prefix.split("/"):
        raise ValueError(f"{prefix!r} has an empty topic level (a leading, trailing or "
                         f"double /)")
    return prefix


class MqttSection(BaseModel):
    """The MQTT broker the daemon publishes job events to."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field(min_length=1)
    port: int = Field(default=1883, ge=1, le=65535)
    #: Topics are ``<prefix>/jobs/<id>/state`` (retained) and ``<prefix>/jobs/<id>/events``.
    prefix: str = Field(default_factory=default_prefix)
    client_id: str | None = None
    username: str | None = None
    #: A file holding the password (mode 0600, owned by root or the daemon's user).
    password_file: Path | None = None
    tls: bool = False
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    keepalive: int = Field(default=30, ge=5)
    #: Events published per round (each awaits its PUBACK).
    batch_size: int = Field(default=500, ge=1, le=10_000)
    #: QoS 1 messages sent and not yet acknowledged, at most (the client's window).
    max_inflight: int = Field(default=100, ge=1, le=65_535)
    #: A warning is logged when this many events wait to be published.
    backlog_warn: int = Field(default=1000, ge=1)
    #: Reconnect backoff (seconds, doubling up to the cap).
    retry_base: float = Field(default=1.0, gt=0)
    retry_cap: float = Field(default=30.0, gt=0)
    #: A publish not acknowledged within this many seconds counts as failed.
    publish_timeout: float = Field(default=10.0, gt=0)

    @pydantic.field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        return check_prefix(value)

    @pydantic.model_validator(mode="after")
    def _check(self) -> MqttSection:
        if self.password_file is not None and self.username is None:
            raise ValueError("password_file needs username")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (a client certificate)")
        if not self.tls and (self.ca_file or self.cert_file):
            raise ValueError("ca_file/cert_file/key_file need tls = true")
        return self


class EventsSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mqtt: MqttSection | None = None
    #: Events older than this (hours) are removed from the outbox, hourly, so that it
    #: does not grow for ever; 0 keeps them. With ``[events.mqtt]`` an event not yet
    #: published is kept whatever its age (the backlog drains first).
    retention_hours: float = Field(default=168.0, ge=0)


class MetricsSection(BaseModel):
    """``listen = "host:port"`` serves Prometheus metrics at ``/metrics`` (off if unset)."""

    model_config = ConfigDict(extra="forbid")

    listen: str | None = None

    @pydantic.field_validator("listen")
    @classmethod
    def _listen(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{value!r} is not host:port")
        return value
