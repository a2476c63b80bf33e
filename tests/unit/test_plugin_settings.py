"""Back ends' and front doors' settings models (bridge.plugin_settings): unknown keys
refused, results frozen, every error a ValueError naming ``SECTION.KEY``."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from bridge.plugin_settings import PluginSettings, parse_settings
from flux_adapter import FluxSettings
from k8s_adapter import KubernetesSettings, TrainJobDoorSettings
from slurm_adapter import SlurmSettings

MODELS: list[type[PluginSettings]] = [SlurmSettings, FluxSettings, KubernetesSettings,
                                      TrainJobDoorSettings]


@pytest.mark.parametrize("model", MODELS)
def test_every_model_forbids_unknown_keys_and_is_frozen(model: type[PluginSettings]) -> None:
    assert model.model_config.get("extra") == "forbid" and model.model_config.get("frozen")
    settings = parse_settings(model, "backends.x", {})
    with pytest.raises(pydantic.ValidationError):
        settings.request_timeout = 1.0  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"^backends\.x: unknown settings bogus; known: "):
        parse_settings(model, "backends.x", {"bogus": 1})


@pytest.mark.parametrize(("model", "settings", "says"), [
    (SlurmSettings, {"request_timeout": "soon"},
     "backends.x.request_timeout: must be a positive number, got 'soon'"),
    (SlurmSettings, {"request_timeout": True}, "backends.x.request_timeout: must be a positive"),
    (SlurmSettings, {"rest_socket": "/s", "rest_url": "http://h"},
     "backends.x: give rest_socket or rest_url, not both"),
    (SlurmSettings, {"rest_socket": "/s", "rest_version": "v9"},
     "backends.x.rest_version: unknown slurmrestd API version 'v9'"),
    (FluxSettings, {"reconcile_interval": 0}, "backends.x.reconcile_interval: must be a positive"),
    (FluxSettings, {"submit_as": "root"}, "backends.x.submit_as: "),
    (KubernetesSettings, {"topology_labels": [1]}, "backends.x.topology_labels: must be a list"),
    (TrainJobDoorSettings, {"namespace_users": {"team-a": 7}},
     "backends.x.namespace_users.team-a: "),
    (TrainJobDoorSettings, {"namespaces": ["a", 1]}, "backends.x.namespaces: must be a list"),
])
def test_errors_name_the_setting(model: type[PluginSettings], settings: dict[str, Any],
                                 says: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_settings(model, "backends.x", settings)
    assert says in str(err.value)


def test_all_problems_are_reported_at_once() -> None:
    with pytest.raises(ValueError) as err:
        parse_settings(SlurmSettings, "backends.hpc", {"rest_sock": "/x", "typo": 1,
                                                       "token_lifespan": 0})
    lines = str(err.value).splitlines()
    assert lines[0].startswith("backends.hpc: unknown settings rest_sock, typo; known: ")
    assert lines[1].startswith("backends.hpc.token_lifespan: ")


def test_one_string_is_a_list_of_one_and_numeric_strings_are_numbers() -> None:
    door = parse_settings(TrainJobDoorSettings, "frontdoors.t",
                          {"allowed_backends": "slurm", "status_interval": "2"})
    assert door.allowed_backends == ("slurm",) and door.status_interval == 2.0
