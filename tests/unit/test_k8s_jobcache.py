"""k8s_adapter.jobcache: a foreign JobSet (or pod) that carries a victim's uid label in
another namespace never mixes into what the back end knows of the victim's job."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bridge.backend import BackendState
from k8s_adapter.jobcache import BOUND, FAILED, JobCache
from k8s_adapter.jobset import MANAGED_BY_LABEL, MANAGED_BY_VALUE, UID_LABEL

UID = "00000000-0000-4000-8000-000000000001"


def jobset(namespace: str, name: str, *, active: int = 1, failed: bool = False,
           uid: str = UID) -> dict[str, Any]:
    conditions = [{"type": "Failed", "status": "True", "reason": "FailedJobs"}] if failed else []
    return {"metadata": {"namespace": namespace, "name": name,
                         "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, UID_LABEL: uid}},
            "spec": {},
            "status": {"conditions": conditions,
                       "replicatedJobsStatus": [{"name": "node", "active": active, "ready": 0,
                                                 "succeeded": 0, "failed": 0,
                                                 "suspended": 0}]}}


def pod(namespace: str, name: str, node: str, *, failed: bool = False,
        uid: str = UID) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Failed" if failed else "Running"}
    if failed:
        status["containerStatuses"] = [{"name": "node", "state": {"terminated": {
            "exitCode": 66, "reason": "Error", "message": "planted by bob"}}}]
    return {"metadata": {"namespace": namespace, "name": name,
                         "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, UID_LABEL: uid},
                         "annotations": {"batch.kubernetes.io/job-completion-index": "0"}},
            "spec": {"nodeName": node}, "status": status}


def test_a_foreign_jobset_in_another_namespace_does_not_replace_the_victims() -> None:
    cache = JobCache()
    cache.sync_jobsets([jobset("alice", "train", active=1)])
    foreign = cache.jobset_event(jobset("bob", "fake", active=7, failed=True), deleted=False)
    assert foreign is not None and foreign.namespace == "bob"  # reported: the engine decides
    status = cache.jobs_status("alice", UID)
    assert status is not None and status[0]["active"] == 1
    assert cache.jobset("alice", "train") is not None


def test_foreign_pods_add_no_node_failure_or_log_pod_to_the_victims_job() -> None:
    cache = JobCache()
    cache.sync_jobsets([jobset("alice", "train")])
    cache.pod_events([pod("alice", "train-node-0-0-a", "node-1")], sync=True)
    touched = cache.pod_events([pod("bob", "fake-node-0-0-b", "node-secret", failed=True)])
    assert touched == []  # no watched JobSet of bob's: nothing to report
    [bj] = cache.pod_events([pod("alice", "train-node-0-0-a", "node-1")])
    assert bj.nodes == ("node-1",)
    assert bj.detail is None and bj.exit_code is None
    pods = cache.pods_of("alice", UID)
    assert pods is not None and pods.first == "train-node-0-0-a"
    assert pods.namespace == "alice"


def test_deleting_a_foreign_jobset_keeps_what_is_known_of_the_victims_pods() -> None:
    cache = JobCache()
    cache.sync_jobsets([jobset("alice", "train"), jobset("bob", "fake")])
    cache.pod_events([pod("alice", "train-node-0-0-a", "node-1")], sync=True)
    cache.jobset_event(jobset("bob", "fake"), deleted=True)
    assert cache.pods_of("alice", UID) is not None
    assert cache.jobs_status("alice", UID) is not None
    assert cache.jobs_status("bob", UID) is None


def test_a_failed_jobsets_detail_comes_from_its_own_pods() -> None:
    cache = JobCache()
    cache.pod_events([pod("alice", "train-node-0-0-a", "node-1", failed=True)], sync=True)
    bj = cache.jobset_event(jobset("alice", "train", failed=True), deleted=False)
    assert bj is not None and bj.state is BackendState.FAILED
    assert bj.exit_code == 66 and bj.detail is not None and "train-node-0-0-a" in bj.detail


@given(st.lists(st.sampled_from(["alice", "bob", "carol"]), min_size=1, max_size=6))
def test_each_namespace_keeps_its_own_pods(namespaces: list[str]) -> None:
    cache = JobCache()
    cache.sync_jobsets([jobset(ns, "j") for ns in set(namespaces)])
    cache.pod_events([pod(ns, f"p{i}", f"node-{ns}") for i, ns in enumerate(namespaces)],
                     sync=True)
    for ns in set(namespaces):
        pods = cache.pods_of(ns, UID)
        assert pods is not None
        assert set(pods.nodes.values()) == {f"node-{ns}"}


def restarted(name: str, code: int, *, phase: str = "Running",
              deleting: bool = False, state_code: int | None = None) -> dict[str, Any]:
    """A pod of alice's job whose container failed with ``code`` and was restarted in
    place (restartPolicy OnFailure); ``state_code``: its current termination."""
    obj = pod("alice", name, "node-1")
    cs: dict[str, Any] = {"name": "node", "state": {"running": {}},
                          "lastState": {"terminated": {"exitCode": code, "reason": "Error"}}}
    if state_code is not None:
        cs["state"] = {"terminated": {"exitCode": state_code, "reason": "Error"}}
    obj["status"] = {"phase": phase, "containerStatuses": [cs]}
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return obj


def test_a_pod_that_recovered_is_not_blamed_for_a_later_failure() -> None:
    cache = JobCache()
    cache.sync_jobsets([jobset("alice", "train")])
    cache.pod_events([restarted("train-node-0-0-a", 1)], sync=True)
    done = restarted("train-node-0-0-a", 1, phase="Succeeded")
    cache.pod_events([done])
    bj = cache.jobset_event(jobset("alice", "train", failed=True), deleted=False)
    assert bj is not None and bj.exit_code is None  # e.g. a deadline, not exit code 1


def test_the_kill_of_a_pod_out_of_retries_does_not_hide_why_it_failed() -> None:
    cache = JobCache()
    cache.sync_jobsets([jobset("alice", "train")])
    cache.pod_events([restarted("train-node-0-0-a", 3)], sync=True)
    killed = restarted("train-node-0-0-a", 3, phase="Failed", deleting=True, state_code=143)
    cache.pod_events([killed])
    bj = cache.jobset_event(jobset("alice", "train", failed=True), deleted=False)
    assert bj is not None and bj.exit_code == 3


def test_a_pod_that_recovered_and_was_killed_by_the_deadline_is_not_blamed() -> None:
    """Restarted once (exit 1), then well and ready, then killed at the deadline: the
    old exit code does not explain the end."""
    cache = JobCache()
    cache.sync_jobsets([jobset("alice", "train")])
    cache.pod_events([restarted("train-node-0-0-a", 1)], sync=True)
    well = restarted("train-node-0-0-a", 1)
    well["status"]["containerStatuses"][0]["ready"] = True
    cache.pod_events([well])
    killed = restarted("train-node-0-0-a", 1, phase="Failed", deleting=True, state_code=143)
    cache.pod_events([killed])
    bj = cache.jobset_event(jobset("alice", "train", failed=True), deleted=False)
    assert bj is not None and bj.exit_code == 143


def test_only_views_that_changed_are_news_and_a_foreign_namespace_is_its_own() -> None:
    """The engine is handed a view only when it changed since the last one: a pod
    event that changes no view (a second event of the same pod) is not news; another
    node is; the same uid in another namespace is a different JobSet's view."""
    cache = JobCache()
    [listed] = cache.sync_jobsets([jobset("alice", "train")])
    assert not cache.news(listed)  # the listing showed it
    [first] = cache.pod_events([pod("alice", "train-node-0-0-a", "node-1")])
    assert cache.news(first) and first.nodes == ("node-1",)
    [again] = cache.pod_events([pod("alice", "train-node-0-0-a", "node-1")])
    assert again == first and not cache.news(again)
    [moved] = cache.pod_events([pod("alice", "train-node-1-0-b", "node-2")])
    assert cache.news(moved) and moved.nodes == ("node-1", "node-2")
    foreign = cache.jobset_event(jobset("bob", "fake"), deleted=False)
    assert foreign is not None and cache.news(foreign) and not cache.news(foreign)
    assert not cache.news(moved)  # bob's view replaced nothing of alice's
    gone = cache.jobset_event(jobset("alice", "train"), deleted=True)
    assert gone is not None
    back = cache.jobset_event(jobset("alice", "train"), deleted=False)
    assert back is not None and cache.news(back)  # the deletion forgot the view


def test_a_finished_view_is_always_news() -> None:
    """Should the engine have failed to apply it, the job's next event hands it over
    again (a finished job left Running would hold its owner's place)."""
    cache = JobCache()
    cache.sync_jobsets([jobset("alice", "train")])
    done = cache.jobset_event(jobset("alice", "train", failed=True), deleted=False)
    assert done is not None and done.state.finished
    assert cache.news(done) and cache.news(done)


# -- the two pod watches: bound and unfinished pods; failed pods -----------------------

def test_a_pod_that_ended_keeps_its_node_one_deleted_gives_it_up() -> None:
    """Leaving the bound pods' selection comes as DELETED with the pod as it was: a pod
    that succeeded ran there (its job stays Running on that node, not PodsNotScheduled);
    one deleted (a suspend) is gone from it."""
    cache = JobCache()
    cache.sync_jobsets([jobset("alice", "train")])
    cache.pod_events([pod("alice", "train-node-0-0-a", "node-1")], sync=True)
    [bj] = cache.pod_events([pod("alice", "train-node-0-0-a", "node-1")], deleted=True)
    assert bj.state is BackendState.RUNNING and bj.nodes == ("node-1",)
    going = pod("alice", "train-node-0-0-a", "node-1")
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    [bj] = cache.pod_events([going], deleted=True)
    assert bj.nodes == () and bj.state is BackendState.PENDING
    assert bj.reason == "PodsNotScheduled"


def test_a_restart_is_forgotten_when_its_pod_ends_without_failing() -> None:
    cache = JobCache()
    cache.sync_jobsets([jobset("alice", "train")])
    cache.pod_events([restarted("train-node-0-0-a", 1)], sync=True)
    cache.pod_events([restarted("train-node-0-0-a", 1)], deleted=True)  # succeeded
    bj = cache.jobset_event(jobset("alice", "train", failed=True), deleted=False)
    assert bj is not None and bj.exit_code is None


def test_a_failed_pod_is_blamed_whichever_watch_speaks_first() -> None:
    for failed_first in (True, False):
        cache = JobCache()
        cache.sync_jobsets([jobset("alice", "train")])
        cache.pod_events([restarted("train-node-0-0-a", 1)], sync=True)
        ended = [restarted("train-node-0-0-a", 1)]  # as it was, leaving the bound pods
        failed = [pod("alice", "train-node-0-0-a", "node-1", failed=True)]
        if failed_first:
            cache.pod_events(failed, source=FAILED)
            cache.pod_events(ended, deleted=True, source=BOUND)
        else:
            cache.pod_events(ended, deleted=True, source=BOUND)
            cache.pod_events(failed, source=FAILED)
        bj = cache.jobset_event(jobset("alice", "train", failed=True), deleted=False)
        assert bj is not None and bj.exit_code == 66, failed_first


def test_a_listing_of_bound_pods_replaces_nodes_and_keeps_failures() -> None:
    cache = JobCache()
    cache.sync_jobsets([jobset("alice", "train")])
    cache.pod_events([pod("alice", "train-node-0-0-a", "node-1", failed=True)], sync=True,
                     source=FAILED)
    cache.pod_events([pod("alice", "train-node-1-0-b", "node-2")], sync=True)
    cache.pod_events([pod("alice", "train-node-1-0-c", "node-3")], sync=True)
    seen = cache.pods_of("alice", UID)
    assert seen is not None and seen.nodes == {"train-node-1-0-c": "node-3"}
    bj = cache.jobset_event(jobset("alice", "train", failed=True), deleted=False)
    assert bj is not None and bj.exit_code == 66
