"""The JSON views of a job (bridge/views.py): the light listing view from a row and its
summary, the whole view with document and transitions, and what another user sees."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.backend import Owner
from bridge.engine import Engine, EngineSettings
from bridge.feed import EventFeed
from bridge.model import ANN_BATCH_SCRIPT, ANN_SCHEDULING, load_trainjob
from bridge.runtimes import RuntimeCatalog
from bridge.service import JobService
from bridge.states import JobState
from bridge.store import JobRecord, Store
from bridge.views import job_view, list_view
from tests.unit.builders import ALICE, BOB, inventory, trainjob_doc
from tests.unit.conftest import ROOT
from tests.unit.fakes import FakeBackend

PATCH_ENV = [{"name": "KEY", "value": "patched-secret"}, {"name": "FROM", "valueFrom": {
    "secretKeyRef": {"name": "s", "key": "k"}}}]


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    backend = FakeBackend(inventory())
    backend.runs_pods = True  # it takes the runtime patch (pod fields) the jobs carry
    e = Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": backend},
               RuntimeCatalog(), EngineSettings(default_backend="slurm"))
    yield e
    e.store.close()


def admitted(engine: Engine, **fields: Any) -> JobRecord:
    """A job with a secret in its environment, its script and a runtime patch."""
    doc = trainjob_doc("plain", name="train", namespace=None, uid=None, nodes=2,
                       env={"TOKEN": "s3cret"}, script="#!/bin/sh\necho s3cret\n",
                       patches=[{"manager": "me", "trainer": {"containers": [
                           {"name": "node", "env": PATCH_ENV}]}}], **fields)
    return engine.admit(load_trainjob(doc), ALICE)


def test_list_view_is_the_row_and_summary(engine: Engine) -> None:
    rec = admitted(engine, annotations={ANN_SCHEDULING: '{"job_name": "nice", '
                                                        '"partition": "gpu", '
                                                        '"time_limit_minutes": 5}'})
    view = list_view(engine.store.get(rec.id))
    assert view["id"] == rec.id and view["uid"] == rec.uid
    assert (view["name"], view["jobName"], view["partition"]) == ("train", "nice", "gpu")
    assert (view["user"], view["unixUid"], view["backend"]) == ("alice", 1001, "slurm")
    assert (view["state"], view["runtime"], view["numNodes"]) == ("Pending", "plain", 2)
    assert view["timeLimitMinutes"] == 5 and view["attempts"] == 0
    assert view["submitTime"] is not None and view["submitTime"].endswith("Z")
    assert view["startTime"] is None and view["endTime"] is None
    assert "trainJob" not in view and "transitions" not in view


def test_list_view_falls_back_to_the_name_and_the_queue(engine: Engine) -> None:
    rec = admitted(engine)
    engine.store.update(rec.id, queue="debug")
    view = list_view(engine.store.get(rec.id))
    assert (view["jobName"], view["partition"]) == ("train", "debug")


def test_job_view_adds_the_document_and_on_request_the_transitions(engine: Engine) -> None:
    rec = admitted(engine)
    engine.store.transition(rec.id, JobState.SUBMITTED, "Submitted", backend_id="7")
    rec = engine.store.get(rec.id)
    plain = job_view(rec, JobService(engine, EventFeed(engine.store)))
    assert plain["trainJob"] == rec.job.to_dict() and "transitions" not in plain
    whole = job_view(rec, JobService(engine, EventFeed(engine.store)), True)
    assert [(t["from"], t["to"], t["reason"]) for t in whole["transitions"]] == [
        (None, "Pending", "Created"),
        ("Pending", "Submitted", "Submitted")]
    assert all(t["at"].endswith("Z") for t in whole["transitions"])


@pytest.mark.parametrize("viewer", [None, ALICE, ROOT])
def test_the_owner_and_root_see_everything(engine: Engine, viewer: Owner | None) -> None:
    rec = admitted(engine)
    view = job_view(rec, JobService(engine, EventFeed(engine.store)), viewer=viewer)
    assert view["trainJob"] == rec.job.to_dict()
    assert view["trainJob"]["spec"]["trainer"]["env"][0]["value"] == "s3cret"


def test_another_user_sees_no_environment_value_and_no_script(engine: Engine) -> None:
    rec = admitted(engine)
    doc = job_view(rec, JobService(engine, EventFeed(engine.store)), viewer=BOB)["trainJob"]
    assert doc["spec"]["trainer"]["env"] == [{"name": "TOKEN", "value": "(hidden)"}]
    assert doc["metadata"]["annotations"][ANN_BATCH_SCRIPT] == "(hidden)"
    container = doc["spec"]["runtimePatches"][0]["trainer"]["containers"][0]
    assert container["env"][0] == {"name": "KEY", "value": "(hidden)"}
    assert container["env"][1] == PATCH_ENV[1]  # a reference, no value: shown as it is
    assert "s3cret" not in str(doc) and "patched-secret" not in str(doc)
    # The stored job is untouched.
    assert engine.store.get(rec.id).job.to_dict()["spec"]["trainer"]["env"][0][
        "value"] == "s3cret"
