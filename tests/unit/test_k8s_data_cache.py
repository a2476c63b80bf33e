"""k8s_adapter.data_cache: a TrainJob's data cache as the ``data-cache`` replicated job
of its JobSet, the training pods waiting for it (``dependsOn``), and the token Secret.

The cache container's arguments are run through the kubelet's ``$(VAR)`` expansion
(restated from Kubernetes' ``third_party/forked/golang/expansion``) and then parsed by
``data-cache serve``'s own parser, so the JobSet and the server cannot drift; the
addresses are checked against ``mpi_launch.allocation.jobset_allocation``'s pod names.

Golden file: tests/unit/golden/k8s/; rewrite after an intended change with
``UPDATE_GOLDEN=1 pytest tests/unit/test_k8s_data_cache.py`` and review the diff.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from bridge.backend import BackendRejected
from bridge.dataset import DataCacheSpec
from bridge.engine import Engine, EngineSettings
from bridge.model import ANN_BATCH_SCRIPT, TrainJob, ValidationError, load_trainjob
from bridge.runtimes import RuntimeCatalog
from bridge.scheduling import SchedulingOptions
from bridge.store import Store
from data_cache.__main__ import _parser as serve_parser
from data_cache.credentials import CERT_ENV, KEY_ENV
from data_cache.reader import ADDRESSES_ENV
from data_cache.server import TOKEN_ENV
from k8s_adapter import data_cache
from k8s_adapter.backend import KubernetesBackend, create
from k8s_adapter.jobcache import JobCache
from k8s_adapter.jobset import COMPLETION_INDEX, JobSetOptions, render_jobset
from mpi_launch.allocation import jobset_allocation
from tests.unit import builders
from tests.unit.builders import ALICE, HOSTILE, IMAGE
from tests.unit.builders import submit_request as request
from tests.unit.golden_files import GOLDEN, check_golden, json_text

OPTS = JobSetOptions()
INDEX_REF = {"fieldRef": {"fieldPath": COMPLETION_INDEX}}
TOKEN_REF = {"secretKeyRef": {"name": "train-data-cache-token", "key": "token"}}
CERT_REF = {"secretKeyRef": {"name": "train-data-cache-token", "key": "cert.pem"}}
KEY_REF = {"secretKeyRef": {"name": "train-data-cache-token", "key": "key.pem"}}
CREDS = {TOKEN_ENV: TOKEN_REF, CERT_ENV: CERT_REF, KEY_ENV: KEY_REF}


def doc(runtime: str = "torch-distributed", *, nodes: int = 2, name: str = "train",
        dataset: Mapping[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    command = ["mpirun", "python", "t.py"] if runtime.startswith("mpi") else ["torchrun", "t.py"]
    d = builders.trainjob_doc(runtime, name=name, nodes=nodes, image=IMAGE, command=command,
                              **fields)
    d["spec"]["initializer"] = {"dataset": dict(dataset or {"storageUri": "file:///data/ds"})}
    return d


def job(runtime: str = "torch-distributed", **kwargs: Any) -> TrainJob:
    return load_trainjob(doc(runtime, **kwargs))


def render(tj: TrainJob, **kwargs: Any) -> dict[str, Any]:
    body = render_jobset(request(tj, **kwargs), OPTS)
    assert json.loads(json.dumps(body)) == body, "a JobSet must be plain JSON data"
    return body


def rjobs(body: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {rj["name"]: rj for rj in body["spec"]["replicatedJobs"]}


def pod_spec(body: Mapping[str, Any], rjob: str) -> dict[str, Any]:
    spec: dict[str, Any] = rjobs(body)[rjob]["template"]["spec"]["template"]["spec"]
    return spec


def the_container(body: Mapping[str, Any], rjob: str) -> dict[str, Any]:
    (c,) = pod_spec(body, rjob)["containers"]
    assert isinstance(c, dict)
    return c


def env_of(c: Mapping[str, Any]) -> dict[str, Any]:
    names = [e["name"] for e in c["env"]]
    assert len(names) == len(set(names)), f"duplicate env names: {names}"
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def kubelet_expand(arg: str, env: Mapping[str, str]) -> str:
    """The kubelet's expansion of ``$(VAR)`` in a container's args (byte-wise, as
    Kubernetes' Go code does): ``$$`` is ``$``; ``$(NAME)`` is the variable's value, or
    stays as it is when the container has no such variable."""
    data, out, i = arg.encode(), bytearray(), 0
    while i < len(data):
        if data[i:i + 1] == b"$" and i + 1 < len(data):
            nxt = data[i + 1:i + 2]
            if nxt == b"$":
                out += b"$"
                i += 2
                continue
            if nxt == b"(":
                end = data.find(b")", i + 2)
                if end != -1:
                    name = data[i + 2:end].decode()
                    out += env[name].encode() if name in env else data[i:end + 1]
                    i = end + 1
                    continue
                out += b"$("
                i += 2
                continue
            out += b"$" + bytes([data[i + 1]]).decode("latin-1").encode()  # Go: string(byte)
            i += 2
            continue
        out += data[i:i + 1]
        i += 1
    return out.decode(errors="surrogateescape")


def served_args(body: Mapping[str, Any], index: int) -> Any:
    """What ``data-cache serve`` in cache pod ``index`` parses."""
    c = the_container(body, "data-cache")
    env = {"HPC_BRIDGE_DATA_CACHE_INDEX": str(index)}
    assert env_of(c)["HPC_BRIDGE_DATA_CACHE_INDEX"] == INDEX_REF
    assert c["command"] == ["data-cache"]
    return serve_parser().parse_args([kubelet_expand(a, env) for a in c["args"]])


# --------------------------------------------------------------------------- golden


def test_golden_torch_job_with_a_cache() -> None:
    body = render(job(nodes=2, dataset={"storageUri": "file:///data/tokens", "env": [
        {"name": "FORMAT", "value": "parquet"}, {"name": "BLOCK_ROWS", "value": "4096"},
        {"name": "WORKER_MEM", "value": "4Gi"}]}))
    check_golden(GOLDEN / "k8s" / "torch-data-cache.json", json_text(body))


# --------------------------------------------------------------------------- layout


@pytest.mark.parametrize(("runtime", "nodes", "training"), [
    ("torch-distributed", 1, ["node"]), ("torch-distributed", 3, ["node"]),
    ("plain", 2, ["node"]), ("jax-distributed", 2, ["node"]),
    ("mpi-distributed", 1, ["launcher"]), ("mpi-distributed", 3, ["launcher", "node"])])
def test_the_cache_comes_first_one_server_per_node_and_the_rest_wait_for_it(
        runtime: str, nodes: int, training: list[str]) -> None:
    body = render(job(runtime, nodes=nodes))
    assert list(rjobs(body)) == ["data-cache", *training]
    cache = rjobs(body)["data-cache"]
    assert "dependsOn" not in cache  # JobSet: the first replicated job may not have one
    spec = cache["template"]["spec"]
    assert (cache["replicas"], spec["parallelism"], spec["completions"],
            spec["completionMode"]) == (1, nodes, nodes, "Indexed")
    assert cache["template"]["metadata"]["labels"] == {
        "trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}
    for name in training:
        assert rjobs(body)[name]["dependsOn"] == [{"name": "data-cache", "status": "Ready"}]
        env = env_of(the_container(body, name))
        assert env[ADDRESSES_ENV] == ",".join(data_cache.addresses("train", nodes))
        assert {k: env[k] for k in CREDS} == CREDS
    # The JobSet still succeeds with its training, not with the servers (which never end).
    assert body["spec"]["successPolicy"]["targetReplicatedJobs"] == [training[0]]
    # The cache pods are the job's pods: its labels, its owner's identity.
    labels = rjobs(body)["data-cache"]["template"]["spec"]["template"]["metadata"]["labels"]
    assert labels == rjobs(body)[training[0]]["template"]["spec"]["template"]["metadata"][
        "labels"]


def test_no_dataset_no_cache() -> None:
    body = render_jobset(request(builders.trainjob("torch-distributed", nodes=2, image=IMAGE,
                                                   command=["torchrun", "t.py"])), OPTS)
    assert list(rjobs(body)) == ["node"] and "dependsOn" not in rjobs(body)["node"]
    names = {e["name"] for e in the_container(body, "node")["env"]}
    assert not names & {ADDRESSES_ENV, TOKEN_ENV}


def test_the_names_are_the_ones_the_data_cache_reads() -> None:
    assert (data_cache.ADDRESSES_ENV, data_cache.TOKEN_ENV) == (ADDRESSES_ENV, TOKEN_ENV)


@pytest.mark.parametrize("nodes", [1, 2, 5])
def test_each_server_parses_its_place_its_peers_and_its_own_name(nodes: int) -> None:
    body = render(job(nodes=nodes))
    # Pod i's stable name is the one JobSet gives it (as for the node pods).
    hosts = jobset_allocation("train", nodes=nodes, slots=1, pod_index=0,
                              replicated_job="data-cache").names
    peers = [f"grpc+tls://{h}:50051" for h in hosts]
    assert data_cache.addresses("train", nodes) == peers
    for i in range(nodes):
        args = served_args(body, i)
        assert (args.index, args.count, args.port) == (i, nodes, 50051)
        assert args.peers.split(",") == peers
        assert args.advertise == hosts[i]
        assert args.source == "file:///data/ds"
        assert (args.format, args.memory_limit, args.dir) == (None, None, None)
    c = the_container(body, "data-cache")
    assert env_of(c) == {"HPC_BRIDGE_DATA_CACHE_INDEX": INDEX_REF, **CREDS}
    assert c["image"] == IMAGE  # the trainer's
    assert c["ports"] == [{"name": "data-cache", "containerPort": 50051}]
    assert c["readinessProbe"]["tcpSocket"] == {"port": 50051}
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert "resources" not in c  # no WORKER_MEM: no request, no limit


def test_a_hostile_path_reaches_the_server_unchanged() -> None:
    # Unescaped, the kubelet would change it.
    env = {"HPC_BRIDGE_DATA_CACHE_INDEX": "1"}
    assert kubelet_expand("/d/$(HPC_BRIDGE_DATA_CACHE_INDEX)/$$/$(NO)", env) == "/d/1/$/$(NO)"
    assert kubelet_expand("/$é", env) != "/$é"
    for source in (f"/data/{HOSTILE}", "/d/$(HPC_BRIDGE_DATA_CACHE_INDEX)/$$/$é/$(", "/d/$"):
        args = served_args(render(job(dataset={"storageUri": source})), 1)
        assert args.source == source and args.index == 1


def test_worker_mem_is_the_pods_memory_and_the_data_stays_below_it() -> None:
    body = render(job(dataset={"storageUri": "/data/ds", "env": [
        {"name": "WORKER_MEM", "value": "8Gi"}, {"name": "FORMAT", "value": "csv"},
        {"name": "BLOCK_ROWS", "value": "100"}]}))
    c = the_container(body, "data-cache")
    assert c["resources"] == {"requests": {"memory": str(8 << 30)},
                              "limits": {"memory": str(8 << 30)}}
    args = served_args(body, 0)
    assert (args.format, args.block_rows, args.memory_limit) == ("csv", 100, 7 << 30)


@pytest.mark.parametrize("memory", [1, 1 << 20, 300 << 20, 512 << 20, 1 << 30, 3 << 30,
                                    64 << 30, 10**12 + 7])
def test_the_data_budget_leaves_room_for_the_process(memory: int) -> None:
    budget = data_cache.data_budget(memory)
    room = memory - budget
    assert 0 < budget < memory or memory == 1
    assert room <= memory // 2 + 1  # never more than half for the process
    assert room >= min(256 << 20, memory // 2) and room >= memory // 8


def test_the_cache_restarts_as_the_node_job_does() -> None:
    req = request(job())
    req.plan.extra["template"] = {"spec": {"replicatedJobs": [{"name": "node", "template": {
        "spec": {"backoffLimit": 1, "podFailurePolicy": {"rules": [{
            "action": "FailJob", "onExitCodes": {"containerName": "node", "operator": "In",
                                                 "values": [42]}}]},
                 "template": {"spec": {"restartPolicy": "Never"}}}}}]}}
    body = render_jobset(req, OPTS)
    cache = rjobs(body)["data-cache"]["template"]["spec"]
    assert cache["backoffLimit"] == 1 and cache["template"]["spec"]["restartPolicy"] == "Never"
    # Not the node's podFailurePolicy: its rules name the node's container.
    assert "podFailurePolicy" not in cache
    default = rjobs(render(job()))["data-cache"]["template"]["spec"]
    assert "backoffLimit" not in default
    assert default["template"]["spec"]["restartPolicy"] == "OnFailure"


def test_a_batch_scripts_cache_is_not_retried_either() -> None:
    d = doc(nodes=2)
    d["spec"]["trainer"].pop("command")
    d["metadata"]["annotations"][ANN_BATCH_SCRIPT] = "#!/bin/bash\necho hi\n"
    tj = load_trainjob(d)
    cache = rjobs(render(tj))["data-cache"]["template"]["spec"]
    assert cache["backoffLimit"] == 0 and cache["template"]["spec"]["restartPolicy"] == "Never"


def test_the_deadline_and_the_exclusions_hold_for_the_cache_too() -> None:
    body = render(job(), options=SchedulingOptions(time_limit_minutes=5, exclude="n1"))
    for name in ("data-cache", "node"):
        spec = rjobs(body)[name]["template"]["spec"]
        assert spec["activeDeadlineSeconds"] == 300
        terms = spec["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert {"key": "kubernetes.io/hostname", "operator": "NotIn",
                "values": ["n1"]} in terms[0]["matchExpressions"]


def test_a_jobs_own_values_of_the_cache_variables_are_replaced() -> None:
    env = env_of(the_container(render(job(env={ADDRESSES_ENV: "grpc://evil:1",
                                               TOKEN_ENV: "known", CERT_ENV: "mine",
                                               "KEEP": "me"})), "node"))
    assert env[ADDRESSES_ENV] == ",".join(data_cache.addresses("train", 2))
    assert {k: env[k] for k in CREDS} == CREDS and env["KEEP"] == "me"


# --------------------------------------------------------------------------- patches


def _patch(*replicated: dict[str, Any]) -> dict[str, Any]:
    return {"manager": "tests.hpc-bridge.io", "trainingRuntimeSpec": {"template": {
        "spec": {"replicatedJobs": list(replicated)}}}}


def test_a_patch_may_reach_the_cache_but_not_its_size_nor_the_order() -> None:
    patch = _patch(
        {"name": "data-cache", "template": {"spec": {"parallelism": 9, "template": {
            "spec": {"nodeSelector": {"disk": "fast"}}}}}},
        {"name": "node", "dependsOn": [], "template": {"spec": {"completions": 1}}})
    body = render(job(patches=[patch]))
    assert pod_spec(body, "data-cache")["nodeSelector"] == {"disk": "fast"}
    assert rjobs(body)["data-cache"]["template"]["spec"]["parallelism"] == 2
    assert rjobs(body)["node"]["template"]["spec"]["completions"] == 2
    assert rjobs(body)["node"]["dependsOn"] == [{"name": "data-cache", "status": "Ready"}]


def test_patches_that_replace_the_cache_container_are_refused_naming_it() -> None:
    """A first patch empties the cache pod's containers, so a second one's list replaces
    them whole: rendering used to end in StopIteration (a RuntimeError out of the
    back end's coroutine, neither a refusal nor a retry)."""
    def cache(spec: dict[str, Any]) -> dict[str, Any]:
        return _patch({"name": "data-cache", "template": {"spec": {"template": {"spec": spec}}}})
    patches = [cache({"containers": None}), cache({"containers": [{"name": "x", "image": "i"}]})]
    with pytest.raises(BackendRejected, match="its container 'data-cache' is gone"):
        render(job(patches=patches))


def test_the_cache_mounts_what_the_training_mounts_read_only() -> None:
    volume = {"name": "datasets", "persistentVolumeClaim": {"claimName": "shared"}}
    d = doc("mpi-distributed", nodes=2, dataset={"storageUri": "file:///mnt/data/ds"})
    d["spec"]["podSpecOverrides"] = [{
        "targetJobs": [{"name": "launcher"}, {"name": "node"}], "volumes": [volume],
        "containers": [{"name": "node", "volumeMounts": [
            {"name": "datasets", "mountPath": "/mnt/data"},
            {"name": "datasets", "mountPath": "/mnt/other", "subPath": "x"}]}]}]
    body = render(load_trainjob(d))
    cache = pod_spec(body, "data-cache")
    assert cache["volumes"] == [volume]  # not the MPI hostfile nor the SSH keys
    assert the_container(body, "data-cache")["volumeMounts"] == [
        {"name": "datasets", "mountPath": "/mnt/data", "readOnly": True},
        {"name": "datasets", "mountPath": "/mnt/other", "subPath": "x", "readOnly": True}]
    # A mount the cache has of its own (a patch) stays as the patch says.
    d["spec"]["runtimePatches"] = [_patch({"name": "data-cache", "template": {"spec": {
        "template": {"spec": {"containers": [{"name": "data-cache", "volumeMounts": [
            {"name": "scratch", "mountPath": "/mnt/data"}]}],
            "volumes": [{"name": "scratch", "emptyDir": {}}]}}}}})]
    body = render(load_trainjob(d))
    mounts = the_container(body, "data-cache")["volumeMounts"]
    assert mounts[0] == {"name": "scratch", "mountPath": "/mnt/data"}
    assert [m["mountPath"] for m in mounts] == ["/mnt/data", "/mnt/other"]
    assert [v["name"] for v in pod_spec(body, "data-cache")["volumes"]] == ["scratch",
                                                                           "datasets"]


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize("nodes", [1, 9, 10, 100])
def test_a_name_too_long_for_the_cache_pods_is_refused_naming_the_field(nodes: int) -> None:
    digits = len(str(nodes - 1))
    longest = 63 - len("-data-cache-0-") - digits - len("-abcde")
    body = render(job(name="a" * longest, nodes=nodes))
    for host in data_cache.addresses("a" * longest, nodes):
        assert len(host.split("//")[1].split(".")[0]) + len("-abcde") <= 63
    assert rjobs(body)["data-cache"]
    with pytest.raises(BackendRejected, match=rf"spec\.initializer\.dataset: .* at most "
                                              rf"{longest} characters"):
        render(job(name="a" * (longest + 1), nodes=nodes))


def test_admission_on_kubernetes_takes_a_dataset_and_refuses_a_name_too_long(
        tmp_path: Path) -> None:
    backend = create("kubernetes", {"kubeconfig": "/nonexistent", "default_image": IMAGE,
                                    "users": {"alice": {"namespace": "team-a",
                                                        "service_account": "alice"}}})
    assert getattr(KubernetesBackend, "runs_data_cache", False) is True
    engine = Engine(Store.open(tmp_path / "s.sqlite"), {"kubernetes": backend},
                    RuntimeCatalog(), EngineSettings(default_backend="kubernetes"))
    rec = engine.admit(job(name="cached"), ALICE)
    assert rec.job.spec.initializer
    with pytest.raises(ValidationError, match="too long for the data cache"):
        engine.admit(job(name="c" * 45), ALICE)


# --------------------------------------------------------------------------- Secret


def test_the_credentials_secret() -> None:
    creds = data_cache.new_credentials()
    assert len(creds.token) == 64 and int(creds.token, 16) >= 0
    assert creds.token != data_cache.new_credentials().token
    assert creds.cert and creds.cert.startswith(b"-----BEGIN CERTIFICATE-----")
    assert creds.key and creds.key.startswith(b"-----BEGIN PRIVATE KEY-----")
    secret = data_cache.secret("train", "team-a", {"l": "v"}, creds)
    assert secret["metadata"] == {"name": "train-data-cache-token", "namespace": "team-a",
                                  "labels": {"l": "v"}}
    assert secret["immutable"] is True and secret["type"] == "Opaque"
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert data == {"token": creds.token.encode(), "cert.pem": creds.cert,
                    "key.pem": creds.key}
    assert {r["secretKeyRef"]["name"] for r in CREDS.values()} == {
        data_cache.secret_name("train")}


def test_the_log_pod_is_never_a_cache_server() -> None:
    """``tlog`` reads the first training pod, whichever pod the watch showed first."""
    def pod(name: str, rjob: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "team-a", "labels": {
            "hpc-bridge.io/job-uid": "u", "jobset.sigs.k8s.io/replicatedjob-name": rjob},
            "annotations": {"batch.kubernetes.io/job-completion-index": "0"}}}

    cache = JobCache()
    cache.pod_events([pod("t-data-cache-0-0-x", "data-cache")], sync=True)
    seen = cache.pods_of("team-a", "u")
    assert seen is not None and seen.first is None
    cache.pod_events([pod("t-node-0-0-y", "node")])
    assert seen.first == "t-node-0-0-y"


def test_the_spec_reaches_the_renderer_as_parsed() -> None:
    tj = job(dataset={"storageUri": "/data/ds", "env": [{"name": "WORKER_MEM",
                                                         "value": "1Gi"}]})
    assert request(tj).plan.data_cache == DataCacheSpec("/data/ds", memory_bytes=1 << 30)
