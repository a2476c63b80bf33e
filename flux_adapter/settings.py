"""The Flux back end's settings (``[backends.NAME] kind = "flux"``), validated by
:func:`flux_adapter.backend.create` (whose docstring describes each)."""

from __future__ import annotations

from typing import Literal

from bridge.plugin_settings import PluginSettings, PositiveFloat

__all__ = ["FluxSettings"]


class FluxSettings(PluginSettings):
    """All optional; empty strings mean "not set"."""

    uri: str | None = None
    queue: str | None = None
    mpi_launch: str | None = None
    request_timeout: PositiveFloat = 10.0
    submit_as: Literal["owner", "daemon"] = "owner"
    reconcile_interval: PositiveFloat = 60.0
    flux_command: str | None = None
