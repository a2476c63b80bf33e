"""Shared builders for the k8s_adapter.jobset unit tests: a TrainJob as the engine builds
it, rendered to a JobSet, and accessors into that JobSet's replicated jobs, pods and env."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from bridge.model import TrainJob
from k8s_adapter.jobset import COMPLETION_INDEX, JobSetOptions, render_jobset
from tests.unit import builders
from tests.unit.builders import IMAGE
from tests.unit.builders import submit_request as request

UID2 = "00000000-0000-4000-8000-000000000002"
HOSTILE = "it's \"quoted\" $(touch /tmp/pwned) `touch /tmp/pwned` ${HOME} ;\n rm -rf / # é✓"
SCRIPT = "#!/bin/bash\n#SBATCH -N 2\nset -e\necho \"$@\" '$(x)' `y`\n"
DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
MAX_NAME = 63 - len("-launcher-0-") - 5
OPTS = JobSetOptions()


def trainjob(runtime: str = "torch-distributed", *, nodes: int | None = 2,
             image: str | None = IMAGE, command: list[str] | None = None,
             script: str | None = None, **fields: Any) -> TrainJob:
    """:func:`tests.unit.builders.trainjob` with this module's defaults: a torchrun job
    on two nodes with an image (no command given and no script: ``torchrun train.py``)."""
    if command is None and script is None:
        command = ["torchrun", "train.py"]
    return builders.trainjob(runtime, nodes=nodes, image=image, command=command,
                             script=script, **fields)


def render(job: TrainJob, options: JobSetOptions = OPTS, **kwargs: Any) -> dict[str, Any]:
    body = render_jobset(request(job, **kwargs), options)
    assert json.loads(json.dumps(body)) == body, "a JobSet must be plain JSON data"
    return body


def rjobs(body: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {rj["name"]: rj for rj in body["spec"]["replicatedJobs"]}


def pod(body: Mapping[str, Any], rjob: str = "node") -> dict[str, Any]:
    template: dict[str, Any] = rjobs(body)[rjob]["template"]["spec"]["template"]
    return template


def container(body: Mapping[str, Any], rjob: str = "node") -> dict[str, Any]:
    containers = pod(body, rjob)["spec"]["containers"]
    assert [c["name"] for c in containers] == ["node"]
    c: dict[str, Any] = containers[0]
    return c


def env_of(body: Mapping[str, Any], rjob: str = "node") -> dict[str, Any]:
    """name -> value (or the valueFrom mapping); names must be unique."""
    items = container(body, rjob)["env"]
    names = [e["name"] for e in items]
    assert len(names) == len(set(names)), f"duplicate env names: {names}"
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in items}


INDEX_REF = {"fieldRef": {"fieldPath": COMPLETION_INDEX}}

