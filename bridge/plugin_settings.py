"""Settings of a back end or front door as a pydantic model: one place that turns
pydantic's errors into the messages an admin reads.

A plugin's ``create(name, settings)`` (entry points ``hpc_bridge.backends`` /
``hpc_bridge.frontdoors``) receives its configuration section, less ``kind``, as a
mapping. It validates it with :func:`parse_settings` against a subclass of
:class:`PluginSettings` (unknown keys refused, the result frozen); every error is a
``ValueError`` whose lines name the setting as the configuration file does:

* ``backends.hpc: unknown settings rest_sock; known: client_root, jwt_key, …``
* ``backends.hpc.request_timeout: must be a positive number, got 'soon'``
* ``backends.hpc: give rest_socket or rest_url, not both`` (a rule over several keys)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

import pydantic
from pydantic import BaseModel, BeforeValidator, ConfigDict

__all__ = ["PluginSettings", "PositiveFloat", "StringTuple", "parse_settings"]


class PluginSettings(BaseModel):
    """Base of every back end's and front door's settings model."""

    model_config = ConfigDict(extra="forbid", frozen=True)


Model = TypeVar("Model", bound=PluginSettings)


def parse_settings(model: type[Model], section: str, settings: Mapping[str, Any]) -> Model:
    """``settings`` validated as ``model``; ``section`` (``backends.NAME``) prefixes
    every error. Raises ``ValueError`` with one line per problem (unknown keys together,
    listing the known ones)."""
    try:
        return model.model_validate(dict(settings))
    except pydantic.ValidationError as exc:
        raise ValueError(_message(model, section, exc)) from None


def _message(model: type[PluginSettings], section: str, exc: pydantic.ValidationError) -> str:
    errors = exc.errors()
    unknown = sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden")
    lines = [f"{section}: unknown settings {', '.join(unknown)}; "
             f"known: {', '.join(sorted(model.model_fields))}"] if unknown else []
    for e in errors:
        if e["type"] == "extra_forbidden":
            continue
        where = ".".join(str(p) for p in (section, *e["loc"]))
        lines.append(f"{where}: {e['msg'].removeprefix('Value error, ')}")
    return "\n".join(lines)


def _positive_number(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not number > 0 or math.isinf(number):
        raise ValueError(f"must be a positive number, got {value!r}")
    return number


def _string_tuple(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(f"must be a list of strings, got {value!r}")


#: A number of seconds (or any quantity) above 0; a numeric string is accepted.
PositiveFloat = Annotated[float, BeforeValidator(_positive_number)]
#: A list of strings; one string is a list of one.
StringTuple = Annotated[tuple[str, ...], BeforeValidator(_string_tuple)]
