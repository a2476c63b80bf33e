"""``[backends.NAME] route_partitions``: the routing rule's configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.config import ConfigError, load_config, partition_routes

TWO = """
[backends.slurm]
kind = "slurm"
rest_socket = "/run/a.sock"

[backends.slurm2411]
kind = "slurm"
rest_socket = "/run/b.sock"
route_partitions = ["gpu", "big"]
"""


def test_routes_are_read_and_kept_out_of_the_adapter_settings(tmp_path: Path) -> None:
    path = tmp_path / "bridge.toml"
    path.write_text(TWO)
    config = load_config(path)
    assert partition_routes(config) == {"gpu": "slurm2411", "big": "slurm2411"}
    assert config.backends["slurm2411"].settings() == {"rest_socket": "/run/b.sock"}
    assert config.engine.default_backend == "slurm"


def test_a_partition_routed_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bridge.toml"
    path.write_text(TWO.replace('rest_socket = "/run/a.sock"',
                                'rest_socket = "/run/a.sock"\nroute_partitions = ["big"]'))
    with pytest.raises(ConfigError, match=r"backends\.slurm2411\.route_partitions: partition "
                                          r"'big' is already routed to back end 'slurm'"):
        load_config(path)
