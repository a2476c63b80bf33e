"""A TrainJob's data cache on the Kubernetes back end (k8s_adapter/data_cache.py,
docs/data-cache.md "On Kubernetes"), against the test bed's real kube-apiserver, JobSet
controller (its webhook validates ``dependsOn``) and scheduler.

kwok runs no containers: the JobSet and the Secret are checked as objects, and the
order as the JobSet controller keeps it: while the cache pods cannot run (a node
selector no node has yet) no training Job exists; once they are Ready the training
runs and the job completes; the token's Secret goes with the JobSet when the TrainJob
is deleted.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.bed import Daemon
from tests.integration.k8s_bridge import (
    JOBSETS,
    KWOK_FAIL,
    KWOK_STAY_RUNNING,
    TRAINJOBS,
    apply,
    conditions,
    is_true,
    k8s_daemon,
    pods,
    trainjob,
)
from tests.integration.k8s_users import submit_as, torch_job
from tests.integration.k8sbed import K8sBed
from tests.integration.test_k8s_trainjobs import release

pytestmark = pytest.mark.integration

DATASET = {"storageUri": "file:///data/tokens",
           "env": [{"name": "FORMAT", "value": "parquet"},
                   {"name": "WORKER_MEM", "value": "1Gi"}]}


@pytest.fixture
def bridge(k8s: K8sBed, k8s_namespace: str) -> Iterator[Daemon]:
    daemon = k8s_daemon(k8s, k8s_namespace)
    daemon.start()
    yield daemon
    release(k8s, k8s_namespace, daemon)


def cached_trainjob(name: str, cache_pod: dict[str, Any] | None = None,
                    runtime: str = "torch-distributed") -> dict[str, Any]:
    """A TrainJob on 2 nodes with a dataset; ``cache_pod`` is patched into the
    data-cache pod template (Trainer v2.3 ``runtimePatches``)."""
    doc = trainjob(name, runtime=runtime, nodes=2)
    doc["spec"]["initializer"] = {"dataset": DATASET}
    if cache_pod is not None:
        doc["spec"]["runtimePatches"] = [{"manager": "tests.hpc-bridge.io", "trainingRuntimeSpec": {
            "template": {"spec": {"replicatedJobs": [
                {"name": "data-cache", "template": {"spec": {"template": cache_pod}}}]}}}}]
    return doc


def rjobs(js: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {rj["name"]: rj for rj in js["spec"]["replicatedJobs"]}


def containers(js: dict[str, Any], rjob: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = rjobs(js)[rjob]["template"]["spec"]["template"]["spec"][
        "containers"]
    return found


def jobs_of(k8s: K8sBed, ns: str, jobset: str, rjob: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = k8s.get_json(
        "-n", ns, "jobs", "-l", f"jobset.sigs.k8s.io/jobset-name={jobset},"
        f"jobset.sigs.k8s.io/replicatedjob-name={rjob}").get("items") or []
    return items


def secret_or_none(k8s: K8sBed, ns: str, name: str) -> dict[str, Any] | None:
    proc = k8s.kubectl("-n", ns, "get", "secret", name, "-o", "json", check=False)
    if proc.returncode != 0:
        assert "NotFound" in proc.stderr, proc.stderr
        return None
    found: dict[str, Any] = json.loads(proc.stdout)
    return found


def token_of(secret: dict[str, Any]) -> str:
    return base64.b64decode(secret["data"]["token"]).decode()


def check_jobset(js: dict[str, Any], name: str) -> None:
    """The layout as created: the cache first, the training depending on it."""
    peers = ",".join(f"grpc+tls://{name}-data-cache-0-{i}.{name}:50051" for i in range(2))
    token_ref = {"secretKeyRef": {"name": f"{name}-data-cache-token", "key": "token"}}
    assert list(rjobs(js)) == ["data-cache", "node"]
    assert rjobs(js)["node"]["dependsOn"] == [{"name": "data-cache", "status": "Ready"}]
    cache_job = rjobs(js)["data-cache"]["template"]["spec"]
    assert (cache_job["parallelism"], cache_job["completions"],
            cache_job["completionMode"]) == (2, 2, "Indexed")
    [server] = containers(js, "data-cache")
    assert server["name"] == "data-cache" and server["command"] == ["data-cache"]
    args = server["args"]
    assert args[:3] == ["serve", "--source", "file:///data/tokens"]
    pairs = dict(zip(args[1::2], args[2::2], strict=True))
    assert pairs["--index"] == "$(HPC_BRIDGE_DATA_CACHE_INDEX)"
    assert (pairs["--count"], pairs["--port"], pairs["--format"]) == ("2", "50051", "parquet")
    assert pairs["--advertise"] == f"{name}-data-cache-0-$(HPC_BRIDGE_DATA_CACHE_INDEX).{name}"
    assert pairs["--peers"] == peers
    assert int(pairs["--memory-limit"]) < 1 << 30
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in server["env"]}
    assert "job-completion-index" in env["HPC_BRIDGE_DATA_CACHE_INDEX"]["fieldRef"]["fieldPath"]
    assert env["HPC_BRIDGE_DATA_CACHE_TOKEN"] == token_ref
    for var, key in (("CERT", "cert.pem"), ("KEY", "key.pem")):
        assert env[f"HPC_BRIDGE_DATA_CACHE_{var}"] == {"secretKeyRef": {
            "name": f"{name}-data-cache-token", "key": key}}
    assert server["readinessProbe"]["tcpSocket"] == {"port": 50051}
    assert server["resources"]["limits"]["memory"] == str(1 << 30)
    [node] = containers(js, "node")
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in node["env"]}
    assert env["HPC_BRIDGE_DATA_CACHE"] == peers
    assert env["HPC_BRIDGE_DATA_CACHE_TOKEN"] == token_ref
    for var, key in (("CERT", "cert.pem"), ("KEY", "key.pem")):
        assert env[f"HPC_BRIDGE_DATA_CACHE_{var}"] == {"secretKeyRef": {
            "name": f"{name}-data-cache-token", "key": key}}


def test_the_training_waits_for_its_cache_and_the_token_goes_with_the_job(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    ns = k8s_namespace
    label = f"test.hpc-bridge.io/cache-{ns}"  # no node has it yet
    apply(k8s, ns, cached_trainjob("cached", {
        "metadata": {"labels": {KWOK_STAY_RUNNING: "true"}},  # servers serve until the end
        "spec": {"nodeSelector": {label: "yes"}}}))
    k8s.wait_for(lambda: k8s.kubectl("-n", ns, "get", JOBSETS, "cached",
                                     check=False).returncode == 0, 60, "the JobSet")
    js = k8s.get_json("-n", ns, JOBSETS, "cached")
    check_jobset(js, "cached")
    tj = k8s.get_json("-n", ns, TRAINJOBS, "cached")
    assert js["metadata"]["ownerReferences"][0]["uid"] == tj["metadata"]["uid"]

    secret = secret_or_none(k8s, ns, "cached-data-cache-token")
    assert secret is not None
    assert re.fullmatch(r"[0-9a-f]{64}", token_of(secret)), "32 random bytes, hex"
    assert secret["immutable"] is True
    assert secret["metadata"]["labels"]["hpc-bridge.io/job-uid"] == tj["metadata"]["uid"]
    k8s.wait_for(lambda: (secret_or_none(k8s, ns, "cached-data-cache-token") or {})[
        "metadata"].get("ownerReferences"), 60, "the Secret handed to its JobSet")
    owner = k8s.get_json("-n", ns, "secret", "cached-data-cache-token")["metadata"][
        "ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("JobSet", "cached",
                                                            js["metadata"]["uid"])

    # The cache pods cannot be scheduled: no training Job is made meanwhile.
    k8s.wait_for(lambda: len(pods(k8s, ns, "jobset.sigs.k8s.io/replicatedjob-name=data-cache"))
                 == 2, 60, "the 2 cache pods")
    # The JobSet controller has reconciled with the cache's Job active (its pods exist,
    # not ready): that pass would have made the node Job, were it not gated.
    k8s.wait_for(lambda: any(
        r.get("name") == "data-cache" and r.get("active") == 1 and not r.get("ready")
        for r in (k8s.get_json("-n", ns, JOBSETS, "cached").get("status") or {}).get(
            "replicatedJobsStatus") or []), 60, "the JobSet to count the cache's Job active")
    assert jobs_of(k8s, ns, "cached", "data-cache")
    assert not jobs_of(k8s, ns, "cached", "node"), "training started before its cache"
    assert not pods(k8s, ns, "jobset.sigs.k8s.io/replicatedjob-name=node")
    assert not is_true(conditions(k8s, ns, "cached"), "Complete")

    nodes = [n["metadata"]["name"] for n in k8s.get_json("nodes")["items"]]
    try:
        for n in nodes:
            k8s.kubectl("label", "node", n, f"{label}=yes", "--overwrite")
        k8s.wait_for(lambda: is_true(conditions(k8s, ns, "cached"), "Complete"), 120,
                     "TrainJob cached to be Complete once its cache is ready")
    finally:
        for n in nodes:
            k8s.kubectl("label", "node", n, f"{label}-", check=False)
    [node_job] = jobs_of(k8s, ns, "cached", "node")
    assert node_job["status"].get("succeeded") == 2
    # The JobSet is done: JobSet stops the servers with it (their Job is deleted).
    k8s.wait_for(lambda: not pods(k8s, ns, "jobset.sigs.k8s.io/replicatedjob-name=data-cache"),
                 90, "the cache pods to go once the training is done")
    assert secret_or_none(k8s, ns, "cached-data-cache-token") is not None  # as the JobSet

    k8s.kubectl("-n", ns, "delete", TRAINJOBS, "cached", "--timeout=90s")
    k8s.wait_for(lambda: secret_or_none(k8s, ns, "cached-data-cache-token") is None, 90,
                 "the token's Secret to go with its JobSet")


def test_a_planted_secret_is_refused_and_a_retry_keeps_its_own(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    """A Secret under the cache's name that is not this job's (planted by someone who
    may create Secrets in the namespace, who would then know the credentials) fails the
    job, naming it. One an earlier attempt of the same job made (a daemon that made the
    Secret and crashed before the JobSet; here: made while the job is held) is kept on
    the retry's 409, so every pod reads the same token; it is still handed over."""
    ns = k8s_namespace
    k8s.kubectl("-n", ns, "create", "secret", "generic", "planted-data-cache-token",
                "--from-literal=token=known")
    apply(k8s, ns, cached_trainjob("planted"))
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, "planted"), "Failed"), 90,
                 "TrainJob planted to fail")
    message = conditions(k8s, ns, "planted")["Failed"].get("message", "")
    assert "planted-data-cache-token exists and is not this job's" in message, message
    assert k8s.kubectl("-n", ns, "get", JOBSETS, "planted", check=False).returncode != 0

    earlier = "ab" * 32
    held = cached_trainjob("again")
    held["spec"]["suspend"] = True
    apply(k8s, ns, held)
    uid = k8s.get_json("-n", ns, TRAINJOBS, "again")["metadata"]["uid"]
    k8s.kubectl("-n", ns, "create", "secret", "generic", "again-data-cache-token",
                f"--from-literal=token={earlier}")
    k8s.kubectl("-n", ns, "label", "secret", "again-data-cache-token",
                f"hpc-bridge.io/job-uid={uid}")
    k8s.kubectl("-n", ns, "patch", TRAINJOBS, "again", "--type=merge", "-p",
                json.dumps({"spec": {"suspend": False}}))
    k8s.wait_for(lambda: k8s.kubectl("-n", ns, "get", JOBSETS, "again",
                                     check=False).returncode == 0, 60, "the JobSet")
    check_jobset(k8s.get_json("-n", ns, JOBSETS, "again"), "again")
    k8s.wait_for(lambda: (secret_or_none(k8s, ns, "again-data-cache-token") or {})[
        "metadata"].get("ownerReferences"), 60, "the Secret handed to its JobSet")
    secret = secret_or_none(k8s, ns, "again-data-cache-token")
    assert secret is not None and token_of(secret) == earlier
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, "again"), "Complete"), 120,
                 "TrainJob again to be Complete")
    k8s.kubectl("-n", ns, "delete", TRAINJOBS, "again", "--timeout=90s")
    k8s.wait_for(lambda: secret_or_none(k8s, ns, "again-data-cache-token") is None, 90,
                 "the token's Secret to go with its JobSet")


def test_a_cache_that_fails_fails_the_job_naming_it(
        k8s: K8sBed, k8s_namespace: str, bridge: Daemon) -> None:
    """A server that cannot load its partition exits 1 (here kwok says so): with the
    runtime's "no retries" (plain-once: restartPolicy Never, backoffLimit 0, which the
    cache takes from the node job) the job fails at once, naming the cache's container.
    (kwok marks a pod Ready before it fails it, so whether a training Job was made
    meanwhile is not the point here: the first test checks the order.)"""
    ns = k8s_namespace
    apply(k8s, ns, cached_trainjob("broken", {
        "metadata": {"labels": {KWOK_FAIL: "true"},
                     "annotations": {f"{KWOK_FAIL}/exit-code": "1",
                                     f"{KWOK_FAIL}/delay": "100ms"}}}, runtime="plain-once"))
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, "broken"), "Failed"), 90,
                 "TrainJob broken to be Failed")
    failed = conditions(k8s, ns, "broken")["Failed"]
    assert "container data-cache" in failed["message"], failed
    assert "exit code 1" in failed["message"], failed
    cache_job = rjobs(k8s.get_json("-n", ns, JOBSETS, "broken"))["data-cache"]
    assert cache_job["template"]["spec"]["backoffLimit"] == 0
    assert cache_job["template"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_a_local_users_cache_runs_as_her_in_her_namespace(
        k8s: K8sBed, k8s_namespace: str, k8s_alice: Daemon) -> None:
    """tbatch's door: the Secret and the JobSet are made as alice's service account
    (impersonated; Pod Security ``restricted`` checks the cache pod too), the cache
    pods run as her uid; a name too long for the cache pods is a 400, nothing made."""
    ns = k8s_namespace
    doc = torch_job("mine", None, nodes=2)
    doc["spec"]["initializer"] = {"dataset": {"storageUri": "/home/alice/ds"}}
    answer = submit_as(k8s_alice, "alice", doc)
    assert answer["status"] == 201, answer
    done = k8s_alice.wait_state(answer["id"], ["Succeeded", "Failed"], timeout=120)
    assert done["state"] == "Succeeded", done
    [js] = k8s.get_json("-n", ns, JOBSETS)["items"]
    name = js["metadata"]["name"]
    assert list(rjobs(js)) == ["data-cache", "node"]
    assert js["metadata"]["annotations"]["hpc-bridge.io/identity"] == f"{ns}/alice"
    cache_pod = rjobs(js)["data-cache"]["template"]["spec"]["template"]["spec"]
    node_pod = rjobs(js)["node"]["template"]["spec"]["template"]["spec"]
    assert cache_pod["securityContext"]["runAsUser"] == node_pod["securityContext"][
        "runAsUser"] != 0
    assert secret_or_none(k8s, ns, f"{name}-data-cache-token") is not None

    doc = torch_job("n" * 45, None, nodes=2)
    doc["spec"]["initializer"] = {"dataset": {"storageUri": "/home/alice/ds"}}
    answer = submit_as(k8s_alice, "alice", doc)
    assert answer["status"] == 400, answer
    assert "too long for the data cache" in answer["error"], answer
    assert len(k8s.get_json("-n", ns, JOBSETS)["items"]) == 1
