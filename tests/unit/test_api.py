"""The HTTP API (bridge/api.py), route by route, as it answers today: aiohttp's test
client against :func:`bridge.api.make_app` (fixture ``api_client``, tests/unit/conftest.py)
with a real store and engine and a fake back end; callers named by bearer token.
Hostile input against every route: tests/unit/test_api_fuzz.py."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.api import DEFAULT_PAGE, MAX_PAGE
from bridge.limits import LimitSettings
from bridge.states import JobState
from tests.unit.builders import trainjob_doc
from tests.unit.conftest import Answer, ApiClient
from tests.unit.fakes import settle


def doc(name: str = "train", runtime: str = "plain", **fields: Any) -> dict[str, Any]:
    """A TrainJob as a client sends it: no namespace, no uid (admission gives them)."""
    fields.setdefault("command", ["true"])
    return trainjob_doc(runtime, name=name, namespace=None, uid=None, **fields)


async def submit(api: ApiClient, name: str = "train", user: str = "alice",
                 **fields: Any) -> Answer:
    answer = await api.call("POST", "/v1/jobs", user=user, doc=doc(name, **fields))
    assert answer.status == 201, answer
    return answer


async def finish(api: ApiClient, job_id: int) -> None:
    """Take a job through its back end to Succeeded, as the engine would."""
    await settle(api.engine)
    for state in (JobState.RUNNING, JobState.SUCCEEDED):
        api.store.transition(job_id, state, state.value)


# --------------------------------------------------------------------------- identity


async def test_a_tcp_caller_without_a_known_token_is_refused(api_client: ApiClient) -> None:
    for user in (None, "mallory"):
        answer = await api_client.call("GET", "/v1/jobs", user=user)
        assert (answer.status, answer.error) == (401, "missing or invalid bearer token")


# --------------------------------------------------------------------------- submit


async def test_submit_answers_201_with_the_new_job(api_client: ApiClient) -> None:
    answer = await submit(api_client, "first")
    assert set(answer.body) == {"id", "uid", "name", "state"}
    assert (answer.body["name"], answer.body["state"]) == ("first", "Pending")
    assert isinstance(answer.body["id"], int) and answer.body["uid"]
    rec = api_client.store.get(answer.body["id"])
    assert rec.owner.user == "alice" and rec.uid == answer.body["uid"]
    assert rec.backend == "slurm" and rec.state is JobState.PENDING


async def test_a_job_submitted_suspended_is_stored_suspended(api_client: ApiClient) -> None:
    answer = await submit(api_client, suspend=True)
    assert answer.body["state"] == "Suspended"


async def test_an_idempotency_key_makes_a_retry_answer_the_first_job(
        api_client: ApiClient) -> None:
    key = {"Idempotency-Key": "retry-1"}
    first = await api_client.call("POST", "/v1/jobs", doc=doc(), headers=key)
    again = await api_client.call("POST", "/v1/jobs", doc=doc(), headers=key)
    assert (first.status, again.status) == (201, 200)
    assert again.body == first.body
    assert len(api_client.store.list_jobs(states=list(JobState))) == 1
    # The key is the caller's own: another user's same key is another job.
    bobs = await api_client.call("POST", "/v1/jobs", user="bob", doc=doc(), headers=key)
    assert bobs.status == 201 and bobs.body["id"] != first.body["id"]


async def test_an_idempotency_key_reused_for_another_body_is_a_conflict(
        api_client: ApiClient) -> None:
    key = {"Idempotency-Key": "k"}
    first = await api_client.call("POST", "/v1/jobs", doc=doc("a"), headers=key)
    other = await api_client.call("POST", "/v1/jobs", doc=doc("b"), headers=key)
    assert (first.status, other.status) == (201, 409)
    assert other.error == (f"Idempotency-Key 'k' was used for another request "
                           f"(job {first.body['id']}); use a new key for a new job")


@pytest.mark.parametrize("key", ["", "has space", "x" * 201, "ünï"])
async def test_a_bad_idempotency_key_is_a_400_naming_the_header(
        api_client: ApiClient, key: str) -> None:
    answer = await api_client.call("POST", "/v1/jobs", doc=doc(),
                                   headers={"Idempotency-Key": key})
    assert answer.status == 400
    assert answer.error.startswith("Idempotency-Key header: must be 1-200 printable ASCII")


@pytest.mark.parametrize(("body", "message"), [
    (doc(nodes="x"), "spec.trainer.numNodes: Input should be a valid integer"),
    (doc(runtime="nope"), "spec.runtimeRef.name"),
    ([1], "request body must be a JSON object (a TrainJob), got an array"),
    (b"{", "request body is not JSON"),
])
async def test_a_bad_body_is_a_400_naming_what_is_wrong(
        api_client: ApiClient, body: Any, message: str) -> None:
    if isinstance(body, bytes):
        answer = await api_client.call("POST", "/v1/jobs", body=body)
    else:
        answer = await api_client.call("POST", "/v1/jobs", doc=body)
    assert answer.status == 400 and message in answer.error, answer
    assert api_client.store.list_jobs(states=list(JobState)) == []


@pytest.mark.parametrize("api_limits", [LimitSettings(max_request_bytes=2000,
                                                      max_script_bytes=100)])
async def test_a_body_or_script_too_large_is_a_413_naming_the_setting(
        api_client: ApiClient) -> None:
    big = await api_client.call("POST", "/v1/jobs", doc=doc(args=["x" * 3000]))
    assert big.status == 413
    assert big.error.startswith("request body too large (")
    assert big.error.endswith("at most 2000 bytes (limits.max_request_bytes)")
    script = await api_client.call("POST", "/v1/jobs", doc=doc(script="#!/bin/sh\n" + "e" * 200))
    assert script.status == 413
    assert "batch script too large (210 bytes;" in script.error
    assert script.error.endswith("at most 100 bytes (limits.max_script_bytes)")
    assert api_client.store.list_jobs(states=list(JobState)) == []


@pytest.mark.parametrize("api_limits", [LimitSettings(max_active_jobs=1)])
async def test_too_many_unfinished_jobs_is_a_429_for_that_user_only(
        api_client: ApiClient) -> None:
    first = await submit(api_client)
    refused = await api_client.call("POST", "/v1/jobs", doc=doc())
    assert refused.status == 429
    assert refused.body["limit"] == "max_active_jobs"
    assert refused.headers["Retry-After"] == "30"
    assert "limits.max_active_jobs = 1" in refused.error
    await submit(api_client, user="bob")  # another user's count is their own
    await submit(api_client, user="root")  # root is exempt
    # A finished job no longer counts.
    await api_client.call("POST", f"/v1/jobs/{first.body['id']}/cancel")
    await submit(api_client)


@pytest.mark.parametrize("api_limits", [LimitSettings(submit_rate=0.001, submit_burst=1)])
async def test_submitting_faster_than_the_rate_is_a_429(api_client: ApiClient) -> None:
    await submit(api_client)
    refused = await api_client.call("POST", "/v1/jobs", doc=doc())
    assert refused.status == 429 and refused.body["limit"] == "submit_rate"
    assert int(refused.headers["Retry-After"]) >= 1
    assert "limits.submit_rate" in refused.error


@pytest.mark.parametrize("api_limits", [LimitSettings(request_rate=0.001, request_burst=2)])
async def test_requesting_faster_than_the_rate_is_a_429(api_client: ApiClient) -> None:
    for _ in range(2):
        assert (await api_client.call("GET", "/v1/jobs")).status == 200
    refused = await api_client.call("GET", "/v1/jobs")
    assert refused.status == 429 and refused.body["limit"] == "request_rate"
    assert (await api_client.call("GET", "/v1/jobs", user="bob")).status == 200


# --------------------------------------------------------------------------- list


async def test_list_pages_with_a_continue_token(api_client: ApiClient) -> None:
    ids = [(await submit(api_client, f"j{i}")).body["id"] for i in range(5)]
    first = await api_client.call("GET", "/v1/jobs?limit=2")
    assert first.status == 200
    assert [i["id"] for i in first.body["items"]] == ids[:2]
    token = first.body["metadata"]["continue"]
    second = await api_client.call("GET", f"/v1/jobs?limit=2&continue={token}")
    assert [i["id"] for i in second.body["items"]] == ids[2:4]
    token = second.body["metadata"]["continue"]
    last = await api_client.call("GET", f"/v1/jobs?limit=2&continue={token}")
    assert [i["id"] for i in last.body["items"]] == ids[4:]
    assert last.body["metadata"] == {}
    whole = await api_client.call("GET", "/v1/jobs")
    assert [i["id"] for i in whole.body["items"]] == ids and whole.body["metadata"] == {}


async def test_list_items_are_light_views(api_client: ApiClient) -> None:
    await submit(api_client, nodes=2)
    item = (await api_client.call("GET", "/v1/jobs")).body["items"][0]
    assert "trainJob" not in item and "transitions" not in item
    assert (item["user"], item["unixUid"], item["state"], item["numNodes"]) == (
        "alice", 1001, "Pending", 2)


async def test_list_filters_by_state_user_and_backend(api_client: ApiClient) -> None:
    mine = await submit(api_client, "mine")
    theirs = await submit(api_client, "theirs", user="bob")
    await api_client.call("POST", f"/v1/jobs/{mine.body['id']}/cancel")

    async def ids(query: str) -> list[int]:
        answer = await api_client.call("GET", f"/v1/jobs?{query}")
        assert answer.status == 200, answer
        return [i["id"] for i in answer.body["items"]]

    # Every user's jobs are listed (as squeue); without states, only unfinished ones.
    assert await ids("") == [theirs.body["id"]]
    assert await ids("states=all") == [mine.body["id"], theirs.body["id"]]
    assert await ids("states=cancelled") == [mine.body["id"]]
    assert await ids("states=Pending,Running") == [theirs.body["id"]]
    assert await ids("states=all&user=alice") == [mine.body["id"]]
    assert await ids("states=all&backend=other") == []


@pytest.mark.parametrize(("query", "message"), [
    ("limit=0", f"limit must be an integer from 1 to {MAX_PAGE}"),
    (f"limit={MAX_PAGE + 1}", f"limit must be an integer from 1 to {MAX_PAGE}"),
    ("limit=x", f"limit must be an integer from 1 to {MAX_PAGE}"),
    ("continue=bm9wZQ==", "continue: not a token from this daemon's job list"),
    ("states=Sleeping", "unknown state in 'Sleeping'; known: Pending"),
    ("colour=red", "unknown query parameter 'colour'; known: backend, continue, limit, "
                   "states, user"),
    ("user=a&user=b", "query parameter 'user' given more than once"),
])
async def test_a_bad_list_query_is_a_400(api_client: ApiClient, query: str,
                                         message: str) -> None:
    answer = await api_client.call("GET", f"/v1/jobs?{query}")
    assert answer.status == 400 and answer.error.startswith(message), answer


def test_the_default_page_is_smaller_than_the_largest() -> None:
    assert 1 <= DEFAULT_PAGE <= MAX_PAGE


# --------------------------------------------------------------------------- show


async def test_show_answers_the_whole_view_by_id_uid_or_name(api_client: ApiClient) -> None:
    sent = (await submit(api_client, "shown", env={"TOKEN": "s3cret"})).body
    for ref in (sent["id"], sent["uid"], "shown"):
        answer = await api_client.call("GET", f"/v1/jobs/{ref}")
        assert answer.status == 200 and answer.body["id"] == sent["id"]
    view = answer.body
    assert view["trainJob"]["spec"]["trainer"]["env"] == [{"name": "TOKEN",
                                                           "value": "s3cret"}]
    assert [(t["from"], t["to"]) for t in view["transitions"]] == [(None, "Pending")]


async def test_another_users_job_is_shown_without_its_environment(
        api_client: ApiClient) -> None:
    """As Slurm shows another user's job but not its environment or script (bridge/views.py)."""
    sent = (await submit(api_client, env={"TOKEN": "s3cret"})).body
    answer = await api_client.call("GET", f"/v1/jobs/{sent['id']}", user="bob")
    assert answer.status == 200 and answer.body["user"] == "alice"
    assert answer.body["trainJob"]["spec"]["trainer"]["env"] == [{"name": "TOKEN",
                                                                  "value": "(hidden)"}]
    root = await api_client.call("GET", f"/v1/jobs/{sent['id']}", user="root")
    assert root.body["trainJob"]["spec"]["trainer"]["env"][0]["value"] == "s3cret"


async def test_show_of_an_unknown_job_is_a_404(api_client: ApiClient) -> None:
    for ref in ("999", "no-such-job"):
        answer = await api_client.call("GET", f"/v1/jobs/{ref}")
        assert (answer.status, answer.error) == (404, f"job {ref} not found")


async def test_a_name_several_users_use_is_a_409_for_a_third(api_client: ApiClient) -> None:
    await submit(api_client, "same")
    await submit(api_client, "same", user="bob")
    assert (await api_client.call("GET", "/v1/jobs/same")).status == 200  # her own first
    answer = await api_client.call("GET", "/v1/jobs/same", user="root")
    assert answer.status == 409 and "same" in answer.error


async def test_show_takes_only_a_namespace_parameter(api_client: ApiClient) -> None:
    sent = (await submit(api_client)).body
    answer = await api_client.call("GET", f"/v1/jobs/{sent['id']}?stream=stdout")
    assert answer.status == 400
    assert answer.error == "unknown query parameter 'stream'; known: namespace"


# --------------------------------------------------------------------------- cancel


async def test_cancel_is_a_202_then_a_409_once_finished(api_client: ApiClient) -> None:
    sent = (await submit(api_client)).body
    answer = await api_client.call("POST", f"/v1/jobs/{sent['id']}/cancel")
    assert answer.status == 202
    assert (answer.body["state"], answer.body["reason"]) == ("Cancelled", "Cancelled")
    again = await api_client.call("DELETE", f"/v1/jobs/{sent['id']}")
    assert again.status == 409
    assert again.error == "Job/step already completing or completed (Cancelled)"


async def test_cancel_of_a_running_job_asks_and_of_a_succeeded_one_is_a_409(
        api_client: ApiClient) -> None:
    sent = (await submit(api_client)).body
    await settle(api_client.engine)
    asked = await api_client.call("DELETE", f"/v1/jobs/{sent['id']}")
    assert asked.status == 202
    assert asked.body["state"] == "Submitted" and asked.body["cancelRequested"] is True
    done = (await submit(api_client, "done")).body
    await finish(api_client, done["id"])
    refused = await api_client.call("POST", f"/v1/jobs/{done['id']}/cancel")
    assert refused.status == 409
    assert refused.error == "Job/step already completing or completed (Succeeded)"


async def test_only_the_owner_or_root_may_cancel(api_client: ApiClient) -> None:
    sent = (await submit(api_client)).body
    refused = await api_client.call("POST", f"/v1/jobs/{sent['id']}/cancel", user="bob")
    assert (refused.status, refused.error) == (403, "Access/permission denied")
    assert api_client.store.get(sent["id"]).state is JobState.PENDING
    assert (await api_client.call("POST", f"/v1/jobs/{sent['id']}/cancel",
                                  user="root")).status == 202


async def test_cancel_of_an_unknown_job_is_a_404(api_client: ApiClient) -> None:
    answer = await api_client.call("POST", "/v1/jobs/424242/cancel")
    assert (answer.status, answer.error) == (404, "job 424242 not found")


# --------------------------------------------------------------------------- suspend


async def test_suspend_and_resume_a_pending_job(api_client: ApiClient) -> None:
    sent = (await submit(api_client)).body
    suspended = await api_client.call("POST", f"/v1/jobs/{sent['id']}/suspend")
    assert suspended.status == 202 and suspended.body["state"] == "Suspended"
    assert suspended.body["trainJob"]["spec"]["suspend"] is True
    again = await api_client.call("POST", f"/v1/jobs/{sent['id']}/suspend")
    assert again.status == 202 and again.body["state"] == "Suspended"  # idempotent
    resumed = await api_client.call("POST", f"/v1/jobs/{sent['id']}/resume")
    assert resumed.status == 202 and resumed.body["state"] == "Pending"
    assert resumed.body["reason"] == "Resumed"


async def test_suspend_of_a_job_a_back_end_runs_needs_a_suspendable_back_end(
        api_client: ApiClient) -> None:
    sent = (await submit(api_client)).body
    await settle(api_client.engine)
    answer = await api_client.call("POST", f"/v1/jobs/{sent['id']}/suspend")
    assert answer.status == 409
    assert answer.error == "cannot suspend a job in state Submitted on back end slurm"


async def test_only_the_owner_may_suspend(api_client: ApiClient) -> None:
    sent = (await submit(api_client)).body
    for action in ("suspend", "resume"):
        answer = await api_client.call("POST", f"/v1/jobs/{sent['id']}/{action}",
                                       user="bob")
        assert (answer.status, answer.error) == (403, "Access/permission denied")


# --------------------------------------------------------------------------- logs


async def test_logs_of_an_unknown_job_is_a_404(api_client: ApiClient) -> None:
    answer = await api_client.call("GET", "/v1/jobs/31337/log")
    assert (answer.status, answer.error) == (404, "job 31337 not found")


async def test_logs_of_a_job_without_output_yet_are_empty(api_client: ApiClient) -> None:
    sent = (await submit(api_client)).body
    answer = await api_client.call("GET", f"/v1/jobs/{sent['id']}/log")
    assert answer.status == 200 and answer.body == b""
    assert answer.headers["Content-Type"] == "application/octet-stream"


async def test_logs_are_the_owners_only(api_client: ApiClient) -> None:
    sent = (await submit(api_client)).body
    answer = await api_client.call("GET", f"/v1/jobs/{sent['id']}/log", user="bob")
    assert answer.status == 403
    assert answer.error == ("Access/permission denied: only the job's owner may read "
                            "its output")


@pytest.mark.parametrize(("query", "message"), [
    ("stream=stdin", "stream must be stdout or stderr"),
    ("offset=-1", "offset must be a byte count (0 to 18 digits), got '-1'"),
    ("follow=maybe", "follow must be one of 0, 1, false, true, no, yes, got 'maybe'"),
    ("tail=1", "unknown query parameter 'tail'; known: follow, namespace, offset, stream"),
])
async def test_a_bad_log_query_is_a_400(api_client: ApiClient, query: str,
                                        message: str) -> None:
    sent = (await submit(api_client)).body
    answer = await api_client.call("GET", f"/v1/jobs/{sent['id']}/log?{query}")
    assert (answer.status, answer.error) == (400, message)


# --------------------------------------------------------------------------- the rest


async def test_submit_takes_no_query_parameter(api_client: ApiClient) -> None:
    answer = await api_client.call("POST", "/v1/jobs?dry_run=1", doc=doc())
    assert answer.status == 400
    assert answer.error == "unknown query parameter 'dry_run'; known: none"


async def test_an_unknown_route_or_method_is_a_json_refusal(api_client: ApiClient) -> None:
    missing = await api_client.call("GET", "/v1/nothing")
    assert (missing.status, missing.error) == (404, "no such route: GET /v1/nothing")
    method = await api_client.call("PUT", "/v1/jobs")
    assert method.status == 405
    assert method.error == "method PUT not allowed on /v1/jobs; allowed: GET, HEAD, POST"


async def test_healthz_answers_the_role_and_readiness(api_client: ApiClient) -> None:
    live = await api_client.call("GET", "/v1/healthz")
    assert (live.status, live.body) == (200, {"ok": True, "ready": False, "role": "single"})
    ready = await api_client.call("GET", "/v1/healthz?ready=1")
    assert ready.status == 503
    bad = await api_client.call("GET", "/v1/healthz?ready=2")
    assert (bad.status, bad.error) == (400, "ready must be 0 or 1")
