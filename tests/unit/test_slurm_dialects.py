"""slurmrestd API versions as data: reading and writing each dialect.

v0.0.38 cases come from records of the 22.05 test bed; v0.0.42 and v0.0.45 from
``squeue --json --states=all`` of the 24.11 and 26.05 beds (testbed/slurm-versions.sh);
the remaining v0.0.40/41 cases are written from the published OpenAPI schemas.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bridge.backend import BackendRejected, BackendState, BackendUnavailable
from slurm_adapter.backend import job_from_slurm, node_from_slurm
from slurm_adapter.dialects import (
    DIALECTS,
    V0_0_38,
    V0_0_40,
    V0_0_41,
    V0_0_42,
    V0_0_45,
    Shape,
    dialect_for,
    dialect_from_meta,
    negotiate,
    served_versions,
)
from slurm_adapter.errors import classify

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"


def no_val(n: int | None, *, infinite: bool = False) -> dict[str, Any]:
    return {"set": n is not None, "infinite": infinite, "number": n or 0}


def test_registry() -> None:
    assert set(DIALECTS) == {f"v0.0.{n}" for n in (38, 40, 41, 42, 43, 44, 45)}
    assert dialect_for("v0.0.38") is V0_0_38
    assert dialect_for("0.0.41") is V0_0_41
    with pytest.raises(ValueError, match=r"known: v0\.0\.38"):
        dialect_for("v0.0.99")
    assert V0_0_38.prefix == "/slurm/v0.0.38"
    assert V0_0_38.verified_live and V0_0_40.verified_live


def test_served_versions_from_an_openapi_document() -> None:
    doc = {"paths": {"/openapi/v3": {}, "/slurm/v0.0.42/jobs": {}, "/slurm/v0.0.40/ping": {},
                     "/slurmdb/v0.0.42/jobs": {}, "/slurm/v0.0.41/job/{job_id}": {},
                     "/slurm/v0.0.100/x": {}}}
    assert served_versions(doc) == ["v0.0.40", "v0.0.41", "v0.0.42", "v0.0.100"]
    assert served_versions({}) == [] and served_versions("junk") == []


def test_negotiate_picks_the_newest_common_version() -> None:
    # What the beds serve: 22.05, 24.11, 26.05.
    assert negotiate(["v0.0.38"]) is V0_0_38
    assert negotiate(["v0.0.40", "v0.0.41", "v0.0.42"]) is V0_0_42
    assert negotiate(["v0.0.45", "v0.0.42", "v0.0.43", "v0.0.44"]) is V0_0_45
    assert negotiate(["v0.0.42", "v0.0.99"]) is V0_0_42  # unknown newer ones are passed over
    with pytest.raises(ValueError, match=r"offers v0\.0\.36, v0\.0\.37; this bridge speaks "
                                         r"v0\.0\.38, v0\.0\.40"):
        negotiate(["v0.0.37", "v0.0.36"])
    with pytest.raises(ValueError, match="offers no /slurm API"):
        negotiate([])


@pytest.mark.parametrize("release", ["24.11", "26.05"])
def test_squeue_json_of_newer_releases(release: str) -> None:
    """A 2-node job that exited 0 and a 1-node job that exited 3, as squeue printed them."""
    data = json.loads((FIXTURES / f"squeue_{release}.json").read_text())
    dialect = dialect_from_meta(data["meta"])
    assert dialect is {"24.11": V0_0_42, "26.05": V0_0_45}[release]
    done, failed = (job_from_slurm(raw, dialect) for raw in data["jobs"])
    assert done is not None and failed is not None
    assert (done.state, done.exit_code, done.signal) == (BackendState.COMPLETED, 0, None)
    assert len(done.nodes) == 2 and done.start_time and done.end_time
    assert (failed.state, failed.exit_code, failed.reason) == (
        BackendState.FAILED, 3, "NonZeroExitCode")
    assert done.stdout_path and done.stdout_path.endswith(f"out-{done.backend_id}.txt")


def test_dialect_from_meta() -> None:
    assert dialect_from_meta({"plugin": {"type": "openapi/v0.0.38"}}) is V0_0_38
    assert dialect_from_meta({"plugin": {"type": "", "data_parser": "data_parser/v0.0.41"}}) \
        is V0_0_41
    assert dialect_from_meta({"plugin": {"data_parser": "data_parser/v0.0.99"}},
                             default=V0_0_40) is V0_0_40
    assert dialect_from_meta(None) is V0_0_38


@pytest.mark.parametrize(("raw", "expected"), [
    (None, None), (0, 0), (42, 42), (no_val(42), 42), (no_val(None), None),
    (no_val(5, infinite=True), None), ("7", None), (True, None),
])
def test_numbers(raw: Any, expected: int | None) -> None:
    assert V0_0_40.number(raw) == expected


@pytest.mark.parametrize(("dialect", "raw", "expected"), [
    (V0_0_38, 0, (0, None)),
    (V0_0_38, 768, (3, None)),          # exit 3 (recorded)
    (V0_0_38, 9, (137, 9)),             # kill -9 $$ (recorded)
    (V0_0_38, 15, (143, 15)),           # scancel (recorded)
    (V0_0_38, 256, (1, None)),          # srun false (recorded)
    (V0_0_38, None, (None, None)),
    (V0_0_40, {"status": ["SUCCESS"], "return_code": no_val(0),
               "signal": {"id": no_val(None), "name": ""}}, (0, None)),
    (V0_0_40, {"status": ["ERROR"], "return_code": no_val(3),
               "signal": {"id": no_val(None), "name": ""}}, (3, None)),
    (V0_0_41, {"status": ["SIGNALED"], "return_code": no_val(0),
               "signal": {"id": no_val(9), "name": "KILL"}}, (137, 9)),
    (V0_0_41, {"status": ["PENDING"], "return_code": no_val(None)}, (None, None)),
])
def test_exit_status(dialect: Any, raw: Any, expected: tuple[int | None, int | None]) -> None:
    assert dialect.exit_status(raw) == expected


def test_states() -> None:
    assert V0_0_38.states("COMPLETING") == ("COMPLETING",)
    assert V0_0_41.states(["RUNNING", "COMPLETING"]) == ("RUNNING", "COMPLETING")
    assert V0_0_38.states("idle") == ("IDLE",)
    assert V0_0_38.states(None) == ()


def test_encoding() -> None:
    env = {"A": "1", "B": "x=y"}
    assert V0_0_38.encode_env(env) == {"A": "1", "B": "x=y"}
    assert V0_0_40.encode_env(env) == ["A=1", "B=x=y"]
    assert V0_0_38.encode_number(5) == 5
    assert V0_0_41.encode_number(5) == {"set": True, "infinite": False, "number": 5}
    assert V0_0_38.submit_body("S", {"name": "n"}) == {"script": "S", "job": {"name": "n"}}
    assert V0_0_41.submit_body("S", {"name": "n"}) == {"job": {"name": "n", "script": "S"}}
    assert V0_0_38.env is Shape.OBJECT and V0_0_41.env is Shape.LIST


def synthetic_v0_0_41_job(**overrides: Any) -> dict[str, Any]:
    """A job record in the v0.0.40/v0.0.41 ``job_info`` shape."""
    job: dict[str, Any] = {
        "job_id": 812, "name": "train", "comment": "hpc-bridge:u-41",
        "job_state": ["FAILED"], "state_reason": "NonZeroExitCode", "state_description": "",
        "exit_code": {"status": ["ERROR"], "return_code": no_val(3),
                      "signal": {"id": no_val(None), "name": ""}},
        "nodes": "gpu[01-02]", "batch_host": "gpu01",
        "start_time": no_val(1700000000), "end_time": no_val(1700000100),
        "standard_output": "logs/%x-%j.out", "standard_error": "",
        "current_working_directory": "/home/alice", "user_name": "alice", "user_id": 1001,
        "array_job_id": no_val(0), "array_task_id": no_val(None),
    }
    job.update(overrides)
    return job


@pytest.mark.parametrize("dialect", [V0_0_40, V0_0_41])
def test_newer_job_records(dialect: Any) -> None:
    job = job_from_slurm(synthetic_v0_0_41_job(), dialect)
    assert job is not None
    assert (job.backend_id, job.job_uid, job.state, job.exit_code) == (
        "812", "u-41", BackendState.FAILED, 3)
    assert job.nodes == ("gpu01", "gpu02")
    assert (job.start_time, job.end_time) == (1700000000.0, 1700000100.0)
    assert job.stdout_path == job.stderr_path == "/home/alice/logs/train-812.out"
    pending = job_from_slurm(synthetic_v0_0_41_job(
        job_state=["PENDING", "REQUEUED"], nodes="", start_time=no_val(1700000500),
        end_time=no_val(None), exit_code={"status": ["PENDING"], "return_code": no_val(None)}),
        dialect)
    assert pending is not None
    assert (pending.state, pending.native_state, pending.start_time, pending.exit_code) == (
        BackendState.PENDING, "PENDING+REQUEUED", None, None)


def test_newer_node_records() -> None:
    raw = {"name": "gpu01", "state": ["IDLE", "DRAIN"], "cpus": 8, "alloc_cpus": 0,
           "real_memory": 1000, "alloc_memory": 0, "gres": "gpu:2", "gres_used": "gpu:0",
           "partitions": ["gpu"], "features": ["a100", "ib"]}
    node = node_from_slurm(raw, V0_0_41)
    assert (node.state, node.free_cpus, node.gpus, node.features) == (
        "IDLE+DRAIN", 0, 2, ("a100", "ib"))


# --- errors recorded from slurmrestd v0.0.38 ---------------------------------------------

ANSWERS: dict[str, Any] = json.loads((FIXTURES / "v0.0.38_answers.json").read_text())


@pytest.mark.parametrize(("case", "kind", "text"), [
    ("submit_invalid_partition", BackendRejected, "Invalid partition name specified"),
    ("submit_invalid_feature", BackendRejected, "Invalid feature specification"),
    ("submit_disabled_key", BackendRejected, 'Disabled key: "required_switches"'),
    ("submit_no_environment", BackendRejected, "environment must be set"),
    ("submit_bad_exclusive", BackendRejected, "Invalid exclusive specification"),
    ("submit_controller_down", BackendUnavailable, "Unable to contact slurm controller"),
    ("cancel_not_owner", BackendRejected, "Access/permission denied"),
    ("cancel_controller_down", BackendUnavailable, "Unable to contact slurm controller"),
])
def test_recorded_errors_are_classified(case: str, kind: type, text: str) -> None:
    answer = ANSWERS[case]
    assert answer["status"] in (400, 500)  # refusals and outages alike
    error = classify(answer["body"]["errors"], context="x")
    assert type(error) is kind
    assert text in str(error)
    assert "Failure during parsing" not in str(error)


def test_every_failed_read_is_transient() -> None:
    for case in ("jobs_controller_down", "jobs_bad_token", "ping_controller_down"):
        error = classify(ANSWERS[case]["body"]["errors"], context="x", read=True)
        assert isinstance(error, BackendUnavailable)
