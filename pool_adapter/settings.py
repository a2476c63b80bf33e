"""Settings of a ``k8s-on-slurm`` back end (``[backends.NAME]``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from bridge.plugin_settings import PluginSettings


class PoolSettings(PluginSettings):
    """``slurm`` and ``kubernetes`` are the settings of a Slurm and of a Kubernetes
    back end (checked by their own models, errors naming ``backends.NAME.slurm.KEY``).

    ``taint_key``: the taint the pool's nodes carry (every pod of the pool tolerates
    it; nothing else should). ``pool_label``: a node label every pool node has
    (``"true"``), required of every pod as well; empty: none. ``node_map``: how Slurm
    node names become Kubernetes ones, ``same``, ``label:KEY`` or ``table`` (then
    ``node_table``, ``{slurm = kubernetes}``; :mod:`pool_adapter.nodemap`).
    ``partition``: the Slurm partition of the pool's nodes (every holder is
    submitted there; a job asking for another is refused); unset: the job's, else
    Slurm's default. ``node_state_interval``: seconds between copies of Slurm's node states onto the
    pool's Kubernetes nodes (:mod:`pool_adapter.nodestate`)."""

    slurm: dict[str, Any] = Field(default_factory=dict)
    kubernetes: dict[str, Any] = Field(default_factory=dict)
    taint_key: str = Field(default="hpc-bridge.io/slurm-pool", min_length=1)
    pool_label: str | None = "hpc-bridge.io/slurm-pool"
    node_map: str = "same"
    node_table: dict[str, str] = Field(default_factory=dict)
    node_state_interval: float = Field(default=30.0, gt=0)
    partition: str | None = None
