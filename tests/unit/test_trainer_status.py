"""Progress reports from inside jobs (issue 15 item 2): the report's checks, tokens,
the store and its event, the endpoint's answers (in process, over a real store), and
what the API, tqueue and tshow show. The endpoint over TLS on the real Slurm:
tests/integration/test_progress.py."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from bridge.backend import Owner
from bridge.cli.queue_format import NAMES
from bridge.cli.tshow import format_show
from bridge.events import event_payload
from bridge.model import ValidationError
from bridge.states import JobState
from bridge.status_server import make_status_app, sweep_tokens
from bridge.store import Store
from bridge.store_progress import JobEnded
from bridge.trainer_status import (
    STATUS_PATH,
    ReportSettings,
    job_token,
    load_secret,
    parse_report,
    token_matches,
    write_token_file,
)
from bridge.views import list_view
from tests.unit.builders import ALICE, BOB
from tests.unit.builders import scheduled_trainjob as trainjob

NOW = 1_764_000_000.0
SECRET = b"s" * 32


def report(**status: Any) -> bytes:
    return json.dumps({"trainerStatus": status}).encode()


# --- the report --------------------------------------------------------------------

def test_a_report_is_kept_in_trainers_form() -> None:
    got = parse_report(report(progressPercentage=45, estimatedRemainingSeconds=795,
                              metrics=[{"name": "loss", "value": "0.2347"}],
                              lastUpdatedTime="2025-01-23T11:30:45+01:00"), NOW)
    assert got == {"progressPercentage": 45, "estimatedRemainingSeconds": 795,
                   "metrics": [{"name": "loss", "value": "0.2347"}],
                   "lastUpdatedTime": "2025-01-23T10:30:45Z"}
    assert parse_report(report(), NOW) == {"lastUpdatedTime": "2025-11-24T16:00:00Z"}


@pytest.mark.parametrize(("body", "field"), [
    (report(progressPercentage=101), "trainerStatus.progressPercentage"),
    (report(progressPercentage="50"), "trainerStatus.progressPercentage"),  # strict
    (report(estimatedRemainingSeconds=-1), "trainerStatus.estimatedRemainingSeconds"),
    (report(metrics=[{"name": "", "value": "1"}]), "trainerStatus.metrics.0.name"),
    (report(metrics=[{"name": "x", "value": 1}]), "trainerStatus.metrics.0.value"),
    (report(metrics=[{"name": "m", "value": "1"}] * 65), "trainerStatus.metrics"),
    (report(lastUpdatedTime="yesterday"), "trainerStatus.lastUpdatedTime"),
    (report(lastUpdatedTime="2025-01-23T10:30:45"), "trainerStatus.lastUpdatedTime"),
    (report(stepsDone=3), "trainerStatus.stepsDone"),
    (b'{"progressPercentage": 5}', "trainerStatus"),
    (b"not json", ""),
])
def test_a_bad_report_names_its_field(body: bytes, field: str) -> None:
    with pytest.raises(ValidationError) as err:
        parse_report(body, NOW)
    assert any(loc == field for loc, _ in err.value.errors), err.value.errors


# --- tokens -------------------------------------------------------------------------

def test_each_job_has_its_own_token(tmp_path: Path) -> None:
    secret = load_secret(tmp_path)
    assert stat.S_IMODE((tmp_path / "trainer-status.key").stat().st_mode) == 0o600
    assert load_secret(tmp_path) == secret  # made once
    token = job_token(secret, "uid-a")
    assert token_matches(secret, "uid-a", token)
    assert not token_matches(secret, "uid-b", token)
    assert not token_matches(b"t" * 32, "uid-a", token)


def test_the_token_file_is_the_owners_alone(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    owner = Owner(os.geteuid(), os.getegid(), "me")
    path = write_token_file(tokens, "uid-a", owner, "secret-token")
    assert stat.S_IMODE(tokens.stat().st_mode) == 0o711  # nobody lists it
    assert stat.S_IMODE(path.stat().st_mode) == 0o400
    assert path.read_text() == "secret-token"
    assert write_token_file(tokens, "uid-a", owner, "again").read_text() == "again"
    os.chmod(tokens, 0o777)
    with pytest.raises(PermissionError):
        write_token_file(tokens, "uid-b", owner, "x")


def test_the_environment_names_the_jobs_own_endpoint(tmp_path: Path) -> None:
    settings = ReportSettings("https://head:8443/", tmp_path / "t", "/etc/ca.pem", SECRET)
    env = settings.env_for("uid-a", "team", "train", Owner(os.geteuid(), os.getegid(), "me"))
    assert env == {
        "KUBEFLOW_TRAINER_STATUS_URL": "https://head:8443/apis/trainer.kubeflow.org/v1alpha1/"
                                       "namespaces/team/trainjobs/train/status",
        "KUBEFLOW_TRAINER_STATUS_TOKEN": str(tmp_path / "t" / "uid-a.token"),
        "KUBEFLOW_TRAINER_STATUS_CA_CERT": "/etc/ca.pem",
    }
    assert Path(env["KUBEFLOW_TRAINER_STATUS_TOKEN"]).read_text() == job_token(SECRET, "uid-a")


# --- the store, its event, and the views ---------------------------------------------

@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(tmp_path / "s.sqlite")


def test_a_report_is_stored_with_its_event(store: Store) -> None:
    rec = store.add(trainjob(nodes=1), ALICE, "slurm")
    status = {"progressPercentage": 5, "lastUpdatedTime": "2025-01-23T10:30:45Z"}
    store.set_trainer_status(rec.id, status, NOW)
    assert store.trainer_statuses([rec.id, 999]) == {rec.id: status}
    event = store.events_after(store.last_event_id() - 1)[0]
    published = event_payload(event)
    assert (published["type"], published["state"], published["trainerStatus"]) == (
        "progress", "Pending", status)
    store.transition(rec.id, JobState.CANCELLED, "Cancelled")
    with pytest.raises(JobEnded):
        store.set_trainer_status(rec.id, status, NOW)


def test_views_show_progress_and_only_the_owner_sees_metrics(store: Store) -> None:
    rec = store.add(trainjob(nodes=1), ALICE, "slurm")
    status = {"progressPercentage": 45, "estimatedRemainingSeconds": 3725,
              "metrics": [{"name": "loss", "value": "0.25"}],
              "lastUpdatedTime": "2025-01-23T10:30:45Z"}
    listed = list_view(rec, status)
    assert listed["trainerStatus"] == {"progressPercentage": 45,
                                       "estimatedRemainingSeconds": 3725,
                                       "lastUpdatedTime": "2025-01-23T10:30:45Z"}
    now = None
    assert NAMES["progress"].value(listed, now) == "45%"  # type: ignore[arg-type]
    assert NAMES["eta"].value(listed, now) == "1:02:05"  # type: ignore[arg-type]
    assert NAMES["progress"].value(list_view(rec), now) == "N/A"  # type: ignore[arg-type]
    shown = format_show({**listed, "trainerStatus": status})  # type: ignore[typeddict-item]
    assert "Progress=45% EstimatedRemaining=1:02:05" in shown
    assert "Metrics=loss=0.25" in shown


# --- the endpoint ---------------------------------------------------------------------

@pytest.fixture
async def endpoint(store: Store) -> AsyncIterator[TestClient[Any, Any]]:
    client: TestClient[Any, Any] = TestClient(TestServer(make_status_app(
        store, SECRET, rate=1.0, burst=3, max_body_bytes=2048)))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


async def post(client: TestClient[Any, Any], namespace: str, name: str,
               token: str | None, body: bytes) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    path = STATUS_PATH.format(namespace=namespace, name=name)
    async with client.post(path, data=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def test_the_endpoint_takes_a_jobs_own_report(endpoint: TestClient[Any, Any],
                                                    store: Store) -> None:
    mine = store.add(trainjob(nodes=1), ALICE, "slurm")
    status, answer = await post(endpoint, mine.namespace, mine.name,
                                job_token(SECRET, mine.uid), report(progressPercentage=7))
    assert status == 200 and answer["trainerStatus"]["progressPercentage"] == 7
    assert store.trainer_statuses([mine.id])[mine.id]["progressPercentage"] == 7


async def test_the_endpoint_refuses_what_is_not_the_jobs(endpoint: TestClient[Any, Any],
                                                         store: Store) -> None:
    mine = store.add(trainjob(nodes=1), ALICE, "slurm")
    bobs = store.add(trainjob(nodes=1), BOB, "slurm")
    good = report(progressPercentage=1)
    assert (await post(endpoint, mine.namespace, mine.name, None, good))[0] == 401
    assert (await post(endpoint, mine.namespace, "nosuch", "x", good))[0] == 404
    # bob's job's token does not report for alice's job
    code, answer = await post(endpoint, mine.namespace, mine.name,
                              job_token(SECRET, bobs.uid), good)
    assert code == 403 and "not TrainJob" in answer["error"]
    token = job_token(SECRET, mine.uid)
    code, answer = await post(endpoint, mine.namespace, mine.name, token,
                              report(progressPercentage=300))
    assert code == 400 and "trainerStatus.progressPercentage" in answer["error"]
    code, _ = await post(endpoint, mine.namespace, mine.name, token,
                         report(metrics=[{"name": "m", "value": "v" * 200}] * 12))
    assert code == 413
    assert store.trainer_statuses([mine.id, bobs.id]) == {}  # nothing was stored
    assert (await post(endpoint, mine.namespace, mine.name, token, good))[0] == 200
    code, answer = await post(endpoint, mine.namespace, mine.name, token, good)
    assert code == 429 and "at most 1 a second" in answer["error"]  # a burst of 3 spent
    assert (await post(endpoint, bobs.namespace, bobs.name, job_token(SECRET, bobs.uid),
                       good))[0] == 200  # another job's bucket is its own
    store.transition(bobs.id, JobState.CANCELLED, "Cancelled")
    assert (await post(endpoint, bobs.namespace, bobs.name, job_token(SECRET, bobs.uid),
                       good))[0] == 404  # ended: no unfinished job of that name


def test_the_sweep_removes_ended_jobs_tokens_only(store: Store, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    owner = Owner(os.geteuid(), os.getegid(), "me")
    live = store.add(trainjob(nodes=1), ALICE, "slurm")
    ended = store.add(trainjob(nodes=1), ALICE, "slurm")
    store.transition(ended.id, JobState.CANCELLED, "Cancelled")
    for uid in (live.uid, ended.uid, "another-daemons-job"):
        write_token_file(tokens, uid, owner, "t")
    assert sweep_tokens(store, tokens) == 1
    assert sorted(p.name for p in tokens.iterdir()) == sorted(
        [f"{live.uid}.token", "another-daemons-job.token"])
