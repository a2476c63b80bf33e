"""Progress reports from inside jobs (issue 15 item 2): the report's checks, tokens,
the store and its event, the endpoint's answers (in process, over a real store), and
what the API, tqueue and tshow show. The endpoint over TLS on the real Slurm:
tests/integration/test_progress.py."""

from __future__ import annotations

import base64
import json
import os
import stat
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
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
    check_token_dir,
    job_token,
    load_secret,
    parse_report,
    token_matches,
    token_uid,
    write_token_file,
)
from bridge.views import list_view
from k8s_adapter import trainer_status as k8s_status
from k8s_adapter.podsecurity import PRIVILEGES, Forbidden, check_patches
from tests.unit.builders import ALICE, BOB
from tests.unit.builders import scheduled_trainjob as trainjob

NOW = 1_764_000_000.0
SECRET = b"s" * 32
UID_A = "0b3f6a52-1111-4c2e-9d4e-2f1a7d0c9e01"
UID_B = "0b3f6a52-2222-4c2e-9d4e-2f1a7d0c9e02"


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
    path = write_token_file(tokens, UID_A, owner, "secret-token")
    assert stat.S_IMODE(tokens.stat().st_mode) == 0o711  # nobody lists it
    assert stat.S_IMODE(path.stat().st_mode) == 0o400
    assert path.read_text() == "secret-token"
    assert write_token_file(tokens, UID_A, owner, "again").read_text() == "again"
    os.chmod(tokens, 0o777)
    with pytest.raises(PermissionError):
        write_token_file(tokens, UID_B, owner, "x")


def test_the_environment_names_the_jobs_own_endpoint(tmp_path: Path) -> None:
    settings = ReportSettings("https://head:8443/", tmp_path / "t", "/etc/ca.pem", SECRET)
    env = settings.env_for(UID_A, "team", "train", Owner(os.geteuid(), os.getegid(), "me"))
    assert env == {
        "KUBEFLOW_TRAINER_STATUS_URL": "https://head:8443/apis/trainer.kubeflow.org/v1alpha1/"
                                       "namespaces/team/trainjobs/train/status",
        "KUBEFLOW_TRAINER_STATUS_TOKEN": str(tmp_path / "t" / f"{UID_A}.token"),
        "KUBEFLOW_TRAINER_STATUS_CA_CERT": "/etc/ca.pem",
    }
    assert Path(env["KUBEFLOW_TRAINER_STATUS_TOKEN"]).read_text() == job_token(SECRET, UID_A)


# --- the store, its event, and the views ---------------------------------------------

@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(tmp_path / "s.sqlite")


def test_a_report_is_stored_with_its_event(store: Store) -> None:
    """The event is everyone's (MQTT): the metrics stay with the stored status."""
    rec = store.add(trainjob(nodes=1), ALICE, "slurm")
    status = {"progressPercentage": 5, "metrics": [{"name": "loss", "value": "0.5"}],
              "lastUpdatedTime": "2025-01-23T10:30:45Z"}
    store.set_trainer_status(rec.id, status, NOW)
    assert store.trainer_statuses([rec.id, 999]) == {rec.id: status}
    event = store.events_after(store.last_event_id() - 1)[0]
    published = event_payload(event)
    assert (published["type"], published["state"], published["trainerStatus"]) == (
        "progress", "Pending", {"progressPercentage": 5,
                                "lastUpdatedTime": "2025-01-23T10:30:45Z"})
    seen: list[int] = []
    store.update_listeners.append(seen.append)
    last = store.last_event_id()
    store.set_trainer_status(rec.id, {"progressPercentage": 6}, NOW, event=False)
    assert store.last_event_id() == last and seen == [rec.id]  # the CR door still hears
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
    now = datetime(2025, 1, 23, 10, 30, 45, tzinfo=UTC)
    assert NAMES["progress"].value(listed, now) == "45%"  # type: ignore[arg-type]
    assert NAMES["eta"].value(listed, now) == "1:02:05"  # type: ignore[arg-type]
    later = now + timedelta(seconds=65)  # counted down since the report
    assert NAMES["eta"].value(listed, later) == "1:01:00"  # type: ignore[arg-type]
    assert NAMES["eta"].value(listed, later + timedelta(days=1)) == "0:00"  # type: ignore[arg-type]
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
    assert (await post(endpoint, mine.namespace, "nosuch", "x", good))[0] == 403  # alike:
    assert (await post(endpoint, mine.namespace, mine.name, "x", good))[0] == 403  # no names
    assert (await post(endpoint, mine.namespace, mine.name, "tök", good))[0] == 403
    # bob's job's token does not report for alice's job
    code, answer = await post(endpoint, mine.namespace, mine.name,
                              job_token(SECRET, bobs.uid), good)
    assert code == 403 and "not that of an unfinished TrainJob" in answer["error"]
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
                       good))[0] == 403  # ended: no unfinished job of that name


def test_the_sweep_removes_ended_jobs_tokens_only(store: Store, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    owner = Owner(os.geteuid(), os.getegid(), "me")
    live = store.add(trainjob(nodes=1), ALICE, "slurm")
    ended = store.add(trainjob(nodes=1), ALICE, "slurm")
    store.transition(ended.id, JobState.CANCELLED, "Cancelled")
    for uid in (live.uid, ended.uid, UID_B):  # UID_B: another daemon's job
        write_token_file(tokens, uid, owner, "t")
    assert sweep_tokens(store, tokens) == 1
    assert sorted(p.name for p in tokens.iterdir()) == sorted(
        [f"{live.uid}.token", f"{UID_B}.token"])


# --- pods: a Secret mounted as Trainer mounts it -------------------------------------

def test_pods_get_a_secret_and_the_variables_as_trainer_mounts_them(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
    settings = ReportSettings("https://bridge.svc:8443", tmp_path / "t", str(ca), SECRET)
    given = settings.secret_for("uid-a", "team", "train")
    assert given == {"url": "https://bridge.svc:8443/apis/trainer.kubeflow.org/v1alpha1/"
                            "namespaces/team/trainjobs/train/status",
                     "token": job_token(SECRET, "uid-a"), "ca.crt": ca.read_text()}
    assert not (tmp_path / "t").exists()  # no file on the daemon's host for a pod
    body = {"spec": {"replicatedJobs": [{"template": {"spec": {"template": {"spec": {
        "containers": [{"name": "node", "env": [
            {"name": "KUBEFLOW_TRAINER_STATUS_URL", "value": "mine"}]},
            {"name": "sidecar"}]}}}}}]}}
    k8s_status.mount(body, "train-abc", given["url"])
    k8s_status.mount(body, "train-abc", given["url"])  # twice: once
    pod = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "kubeflow-trainer", "secret": {
        "secretName": "train-abc-trainer-status", "defaultMode": 0o444}}]
    node, sidecar = pod["containers"]
    assert {e["name"]: e["value"] for e in node["env"]} == {
        "KUBEFLOW_TRAINER_STATUS_URL": "mine",  # the job's own value kept
        "KUBEFLOW_TRAINER_STATUS_TOKEN": "/var/run/secrets/kubeflow/trainer/token",
        "KUBEFLOW_TRAINER_STATUS_CA_CERT": "/var/run/secrets/kubeflow/trainer/ca.crt"}
    assert sidecar["volumeMounts"] == [{"name": "kubeflow-trainer", "readOnly": True,
                                        "mountPath": "/var/run/secrets/kubeflow/trainer"}]
    secret = k8s_status.secret("train-abc", "team", {"l": "v"}, "tok", "pem")
    assert secret["metadata"]["name"] == "train-abc-trainer-status"
    assert base64.b64decode(secret["data"]["token"]) == b"tok"


def test_a_token_file_is_never_made_of_a_uid_that_is_not_one(tmp_path: Path) -> None:
    owner = Owner(os.geteuid(), os.getegid(), "me")
    with pytest.raises(ValueError, match="not a job uid"):
        write_token_file(tmp_path / "t", "../../etc/x", owner, "t")


async def test_a_body_in_pieces_is_read_whole_and_a_long_one_refused(
        endpoint: TestClient[Any, Any], store: Store) -> None:
    """Over TLS a body spans records: the endpoint reads it whole (no Content-Length
    either), and one over the limit is a 413 however it comes."""
    mine = store.add(trainjob(nodes=1), ALICE, "slurm")
    body = report(progressPercentage=9, metrics=[{"name": "m", "value": "v" * 100}] * 5)
    path = STATUS_PATH.format(namespace=mine.namespace, name=mine.name)
    headers = {"Authorization": f"Bearer {job_token(SECRET, mine.uid)}"}

    async def pieces(data: bytes) -> AsyncIterator[bytes]:
        for i in range(0, len(data), 7):
            yield data[i:i + 7]

    async with endpoint.post(path, data=pieces(body), headers=headers) as resp:
        assert resp.status == 200, await resp.text()
    async with endpoint.post(path, data=pieces(body * 10), headers=headers) as resp:
        assert resp.status == 413


async def test_one_users_jobs_share_a_bucket_and_events_are_spaced(store: Store) -> None:
    client: TestClient[Any, Any] = TestClient(TestServer(make_status_app(
        store, SECRET, rate=100, burst=100, user_rate=1, user_burst=2, event_interval=3600)))
    await client.start_server()
    try:
        jobs = [store.add(trainjob(nodes=1), ALICE, "slurm") for _ in range(3)]
        before = store.last_event_id()
        codes = [(await post(client, j.namespace, j.name, job_token(SECRET, j.uid),
                             report(progressPercentage=1)))[0] for j in jobs]
        assert codes == [200, 200, 429]  # alice's burst of 2, whichever job
        again = jobs[0]
        assert (await post(client, again.namespace, again.name, job_token(SECRET, again.uid),
                           report(progressPercentage=2)))[0] == 429
        assert store.last_event_id() == before + 2  # one event per job per interval
    finally:
        await client.close()


def test_the_token_dir_must_be_reachable_and_safe(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    check_token_dir(tmp_path / "tokens", state)  # fine: a private tmp_path's child
    with pytest.raises(ValueError, match="inside the state directory"):
        check_token_dir(state / "tokens", state)
    with pytest.raises(ValueError, match="absolute"):
        check_token_dir(Path("tokens"), state)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(ValueError, match="shared"):
        check_token_dir(shared / "tokens", state)


def test_without_a_token_dir_only_pods_get_a_token(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
    settings = ReportSettings("https://b:8443", None, str(ca), SECRET)
    assert settings.env_for(UID_A, "team", "train", Owner(0, 0, "root")) == {}
    assert settings.secret_for(UID_A, "team", "train")["token"] == job_token(SECRET, UID_A)


def test_a_pod_gets_the_certificates_never_a_key(tmp_path: Path) -> None:
    both = tmp_path / "both.pem"
    both.write_text("-----BEGIN PRIVATE KEY-----\nsecret\n-----END PRIVATE KEY-----\n"
                    "-----BEGIN CERTIFICATE-----\nc1\n-----END CERTIFICATE-----\n"
                    "-----BEGIN CERTIFICATE-----\nc2\n-----END CERTIFICATE-----\n")
    got = ReportSettings("https://b:1", None, str(both), SECRET).secret_for(UID_A, "n", "j")
    assert "PRIVATE" not in got["ca.crt"] and got["ca.crt"].count("BEGIN CERTIFICATE") == 2
    (tmp_path / "key.pem").write_text("-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n")
    with pytest.raises(ValueError, match="no certificate"):
        ReportSettings("https://b:1", None, str(tmp_path / "key.pem"), SECRET).secret_for(
            UID_A, "n", "j")


def test_a_token_names_its_job_and_reads_whole(store: Store) -> None:
    """UID.MAC: the endpoint finds the job by uid (one row, whatever shares its name)."""
    token = job_token(SECRET, UID_A)
    assert token.startswith(UID_A + ".") and token_uid(token) == UID_A
    assert token_uid("nonsense") is None and token_uid("../x.y") is None


async def test_many_jobs_of_one_name_each_report(endpoint: TestClient[Any, Any],
                                                 store: Store) -> None:
    """Users' jobs share names (job.sh): each job's token finds its own."""
    jobs = []
    for i in range(70):
        doc = trainjob(nodes=1)
        doc.metadata.name = "job.sh"
        jobs.append(store.add(doc, Owner(2000 + i, 2000 + i, f"u{i}"), "slurm"))
    last = jobs[-1]
    code, _ = await post(endpoint, last.namespace, "job.sh", job_token(SECRET, last.uid),
                         report(progressPercentage=3))
    assert code == 200
    code, _ = await post(endpoint, last.namespace, "job.sh", job_token(SECRET, jobs[0].uid)
                         .replace(jobs[0].uid, last.uid), report(progressPercentage=3))
    assert code == 403  # another job's MAC under this job's uid


@pytest.mark.parametrize("pod", [{"containers": [{"name": "n", "env": ["x"]}]},
                                 {"containers": [{"name": "n"}], "volumes": "v"},
                                 {"containers": "c"}])
def test_a_pod_that_cannot_take_the_mount_is_a_clear_refusal(pod: dict[str, Any]) -> None:
    body = {"spec": {"replicatedJobs": [{"template": {"spec": {"template": {"spec": pod}}}}]}}
    with pytest.raises(ValueError, match="is not a list of objects"):
        k8s_status.mount(body, "j", "https://b")


@pytest.mark.parametrize("volume", [
    {"name": "x", "secret": {"secretName": "other-job-trainer-status"}},
    {"name": "x", "secret": {"secretName": "mpi-job-mpi-ssh-auth"}},
    {"name": "x", "projected": {"sources": [{"secret": {"name": "j-trainer-status"}}]}},
])
def test_no_patch_mounts_a_secret_the_bridge_makes(volume: dict[str, Any]) -> None:
    """A namespace may be shared: another job's token or SSH key is never a user's."""
    def patches(vol: dict[str, Any]) -> list[dict[str, Any]]:
        pod = {"spec": {"volumes": [vol]}}
        return [{"manager": "u", "trainingRuntimeSpec": {"template": {"spec": {
            "replicatedJobs": [{"name": "node", "template": {"spec": {"template": pod}}}]}}}}]

    with pytest.raises(Forbidden, match="a Secret the bridge makes"):
        check_patches(patches(volume), PRIVILEGES, "allow_privileges")
    check_patches(patches({"name": "x", "secret": {"secretName": "my-own-secret"}}),
                  PRIVILEGES, "allow_privileges")
