"""Shared helpers for the flux_adapter.jobspec unit tests: :func:`check_v1`, the canonical
jobspec V1 rules of RFC 14 as RFC 25 restricts them (written from the RFCs here so the
tests need no Flux), and :func:`build`, which renders a request and checks the result."""

from __future__ import annotations

import json
import numbers
from collections.abc import Mapping
from typing import Any

from bridge.backend import SubmitRequest
from bridge.model import TrainJob
from bridge.scheduling import SchedulingOptions
from flux_adapter.jobspec import build_jobspec
from tests.unit.builders import submit_request

MPI_LAUNCH = "/opt/hpc-bridge/bin/mpi-launch"
SCRIPT = "#!/bin/bash\n#SBATCH -N 2\nset -e\nsrun hostname\necho \"$@\"\n"


# --------------------------------------------------------------------------- the rules


def check_v1(js: Mapping[str, Any]) -> None:
    """Assert that ``js`` is a canonical jobspec version 1 (RFC 14, RFC 25)."""
    assert set(js) == {"version", "resources", "tasks", "attributes"}, set(js)
    assert js["version"] == 1
    assert json.loads(json.dumps(js)) == js, "jobspec must be plain JSON data"

    def vertex(v: Any, types: set[str]) -> None:
        assert isinstance(v, dict)
        allowed = {"type", "count", "unit", "with", "label"}
        if v.get("type") == "node":
            allowed.add("exclusive")
        assert set(v) <= allowed, f"vertex keys {set(v) - allowed} not allowed in V1"
        assert v["type"] in types, f"{v['type']} where {types} expected"
        count = v["count"]
        assert isinstance(count, int) and not isinstance(count, bool) and count >= 1, v
        if "exclusive" in v:
            assert v["exclusive"] in (True, False)

    resources = js["resources"]
    assert isinstance(resources, list) and len(resources) == 1, "exactly one top resource"
    top = resources[0]
    vertex(top, {"node", "slot"})
    nodes: int | None = None
    if top["type"] == "node":
        nodes = top["count"]
        assert isinstance(top.get("with"), list) and len(top["with"]) == 1
        slot = top["with"][0]
    else:
        slot = top
    vertex(slot, {"slot"})
    assert isinstance(slot.get("label"), str) and slot["label"], "a slot needs a label"
    children = slot.get("with")
    assert isinstance(children, list)
    for child in children:
        vertex(child, {"core", "gpu"})
        assert "with" not in child, "core and gpu are leaves in V1"
    assert sorted(c["type"] for c in children) in (["core"], ["core", "gpu"]), (
        "V1 allows slot>core or slot>(core,gpu)")
    slots_total = slot["count"] * (nodes or 1)

    tasks = js["tasks"]
    assert isinstance(tasks, list) and len(tasks) == 1, "V1 jobspec runs exactly one task"
    task = tasks[0]
    assert {"command", "slot", "count"} <= set(task)
    command = task["command"]
    assert isinstance(command, list) and command
    assert all(isinstance(w, str) for w in command)
    assert task["slot"] == slot["label"]
    count = task["count"]
    assert isinstance(count, dict) and len(count) == 1
    if "per_slot" in count:
        assert count["per_slot"] == 1, "V1: per_slot must be 1"
    else:
        total = count["total"]
        assert isinstance(total, int) and (nodes or 1) <= total <= slots_total

    attributes = js["attributes"]
    assert set(attributes) <= {"system", "user"} and "system" in attributes
    system = attributes["system"]
    duration = system["duration"]
    assert isinstance(duration, numbers.Real) and not isinstance(duration, bool)
    assert float(duration) >= 0
    env = system.get("environment", {})
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
    if "cwd" in system:
        assert isinstance(system["cwd"], str)


# --------------------------------------------------------------------------- helpers


def request(job: TrainJob, options: SchedulingOptions | None = None,
            placement: Any = None) -> SubmitRequest:
    """``placement``: anything with ``hosts`` will do."""
    return submit_request(job, options, placement=placement)


def build(req: SubmitRequest, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("default_cwd", "/home/alice")
    kwargs.setdefault("mpi_launch", MPI_LAUNCH)
    js = build_jobspec(req, **kwargs)
    check_v1(js)
    return js


def command_of(js: Mapping[str, Any]) -> list[str]:
    cmd: list[str] = js["tasks"][0]["command"]
    return cmd


def shell(js: Mapping[str, Any]) -> dict[str, Any]:
    opts: dict[str, Any] = js["attributes"]["system"]["shell"]["options"]
    return opts
