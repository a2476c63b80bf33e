"""A batch script as bytes (issue 12): lossless through the annotation, the shape, the
Slurm script; refused at admission by back ends that carry only text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.batchscript import (
    ANN_BATCH_SCRIPT_ENCODING,
    is_utf8,
    script_annotations,
    script_bytes,
    script_of,
)
from bridge.engine import Engine, EngineSettings
from bridge.model import ANN_BATCH_SCRIPT, ValidationError
from bridge.runtimes import RuntimeCatalog
from bridge.scheduling import SchedulingOptions
from bridge.shape import JobShape, resolve_shape
from bridge.store import Store
from k8s_adapter.backend import create
from slurm_adapter.script import render_script
from tests.unit.builders import ALICE, trainjob
from tests.unit.builders import submit_request as request

RAW = b"#!/bin/bash\n#SBATCH -J x\n# caf\xe9 \xff\xfe\necho caf\xe9\n"
TEXT = RAW.decode("utf-8", "surrogateescape")


def test_round_trip_through_annotations_and_the_stored_shape() -> None:
    job = trainjob(annotations=script_annotations(TEXT))
    assert not is_utf8(TEXT) and script_bytes(script_of(job) or "") == RAW
    plan = RuntimeCatalog().resolve(job)
    shape = resolve_shape(job, plan, SchedulingOptions())
    stored = JobShape.from_json(json.loads(json.dumps(shape.to_json())))
    assert script_bytes(stored.plan.batch_script or "") == RAW


def test_the_slurm_script_keeps_the_bytes() -> None:
    job = trainjob(annotations=script_annotations(TEXT))
    rendered = render_script(request(job))
    assert script_bytes(rendered) == RAW.replace(b"\n#SBATCH", b"\n##SBATCH")
    wrapped = render_script(request(trainjob("mpi-distributed",
                                             annotations=script_annotations(TEXT))))
    assert b"# caf\xe9 \xff\xfe\necho caf\xe9\n" in script_bytes(wrapped)


@pytest.mark.parametrize(("annotations", "says"), [
    ({ANN_BATCH_SCRIPT: "#!", ANN_BATCH_SCRIPT_ENCODING: "rot13"}, "unknown encoding"),
    ({ANN_BATCH_SCRIPT: "not base64!", ANN_BATCH_SCRIPT_ENCODING: "base64"}, "not base64"),
])
def test_bad_encodings_are_refused(annotations: dict[str, str], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        script_of(trainjob(annotations=annotations))


def test_a_text_only_back_end_refuses_it_at_admission(tmp_path: Path) -> None:
    backend = create("kubernetes", {"kubeconfig": "/nonexistent", "users": {
        "alice": {"namespace": "team-a", "service_account": "alice"}}})
    engine = Engine(Store.open(tmp_path / "s.sqlite"), {"kubernetes": backend},
                    RuntimeCatalog(), EngineSettings(default_backend="kubernetes"))
    job = trainjob(annotations=script_annotations(TEXT), image="busybox")
    with pytest.raises(ValidationError, match="not UTF-8 text is not supported by back end "
                                              "'kubernetes'"):
        engine.admit(job, ALICE)
