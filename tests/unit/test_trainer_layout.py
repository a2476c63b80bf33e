"""Golden test: the bridge's JobSet has the layout Kubeflow Trainer v2.3 gives the same
TrainJob (tests/fixtures/trainer-v2.3-jobsets/, recorded from Trainer v2.3.0's real
controller by testbed/k8s/record-trainer-jobsets.sh: see the README there and each
file's header).

The recorded JobSets already hold JobSet's webhook defaults; both sides get them (and
Kubernetes' Job and container-port defaults) before the layout fields are compared:
replicated jobs (by name), replicas, parallelism, completions, completionMode,
backoffLimit, restartPolicy, container names and ports, every environment variable
Trainer sets (and no other ``PET_*``), the MPI volumes with their sources and mount
paths, the hostfile, the success and failure policies. What the bridge adds on
purpose (``JOBSET_*`` variables, the hostfile on every MPI pod, labels, DNS settings
written out) is allowed beside them.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge.model import TrainingRuntime, load_document, load_trainjob
from bridge.runtimes import RuntimeCatalog
from k8s_adapter.jobset import JobSetOptions, hostfile_text, jobset_name, render_jobset
from tests.unit.builders import UID
from tests.unit.builders import submit_request as request

FIXTURES = Path(__file__).parent.parent / "fixtures" / "trainer-v2.3-jobsets"
#: The bridge's built-in runtimes (``*.yaml``) and Trainer's own (``upstream-runtimes/``).
CASES = sorted(str(p.relative_to(FIXTURES)) for p in FIXTURES.glob("**/*.yaml"))
#: Kubernetes' default ``backoffLimit`` of a Job that sets none.
JOB_BACKOFF_LIMIT = 6


def jobset_defaults(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` as JobSet's defaulting webhook and Kubernetes' Job defaults leave it."""
    out = copy.deepcopy(spec)
    network = out.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    success = out.setdefault("successPolicy", {"operator": "All"})
    if not success.get("targetReplicatedJobs"):
        success["targetReplicatedJobs"] = [rj["name"] for rj in out["replicatedJobs"]]
    for rj in out["replicatedJobs"]:
        job = rj["template"]["spec"]
        job.setdefault("completionMode", "Indexed")
        job.setdefault("backoffLimit", JOB_BACKOFF_LIMIT)
        pod = job["template"]["spec"]
        pod.setdefault("restartPolicy", "OnFailure")
        for container in pod.get("containers") or []:
            for port in container.get("ports") or []:
                port.setdefault("protocol", "TCP")  # the JobSet CRD schema default
    return out


def load_case(name: str) -> dict[str, Any]:
    case: dict[str, Any] = yaml.safe_load((FIXTURES / name).read_text())
    return case


def recorded_runtime(case: dict[str, Any]) -> RuntimeCatalog | None:
    """The catalogue with the case's runtime when it is one of Trainer's own (a
    namespaced TrainingRuntime), else ``None`` (the built-in catalogue)."""
    runtime = dict(case["runtime"])
    kind, name = runtime.pop("kind"), runtime.pop("name")
    if kind != "TrainingRuntime":
        return None
    doc = load_document({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind,
                         "metadata": {"name": name,
                                      "namespace": case["trainJob"]["metadata"]["namespace"]},
                         "spec": runtime})
    assert isinstance(doc, TrainingRuntime)
    return RuntimeCatalog([doc])


def bridge_jobset(case: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    doc = copy.deepcopy(case["trainJob"])
    doc.update(apiVersion="trainer.kubeflow.org/v1alpha1", kind="TrainJob")
    doc["metadata"]["uid"] = UID
    req = request(load_trainjob(doc), catalog=recorded_runtime(case))
    return render_jobset(req, JobSetOptions()), req


def claims(spec: dict[str, Any]) -> list[Any]:
    """``volumeClaimPolicies`` without what JobSet and the apiserver default
    (``retentionPolicy``, an empty ``status``)."""
    return [[{k: v for k, v in t.items() if k != "status"} for t in p.get("templates") or []]
            for p in spec.get("volumeClaimPolicies") or []]


def by_name(items: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    return {i["name"]: i for i in items or []}


@pytest.mark.parametrize("case_name", CASES)
def test_the_bridge_lays_out_the_jobset_as_trainer_does(case_name: str) -> None:
    case = load_case(case_name)
    body, req = bridge_jobset(case)
    ours = jobset_defaults(body["spec"])
    theirs = jobset_defaults(case["jobSet"]["spec"])
    assert body["metadata"]["name"] == case["trainJob"]["metadata"]["name"]

    assert ours.get("failurePolicy") == theirs.get("failurePolicy")
    assert claims(ours) == claims(theirs)
    mpi_node = "launcher" in {rj["name"] for rj in theirs["replicatedJobs"]}
    assert ours["successPolicy"] == theirs["successPolicy"]
    for key in ("enableDNSHostnames", "publishNotReadyAddresses"):
        assert ours["network"][key] == theirs["network"][key]

    our_rjobs, their_rjobs = by_name(ours["replicatedJobs"]), by_name(theirs["replicatedJobs"])
    assert set(our_rjobs) == set(their_rjobs)
    for name, their_rj in their_rjobs.items():
        our_rj = our_rjobs[name]
        assert our_rj["replicas"] == their_rj["replicas"], name
        their_labels = (their_rj["template"].get("metadata") or {}).get("labels") or {}
        assert their_labels.items() <= our_rj["template"]["metadata"]["labels"].items()
        assert our_rj.get("dependsOn") == their_rj.get("dependsOn"), name
        our_job, their_job = our_rj["template"]["spec"], their_rj["template"]["spec"]
        for key in ("parallelism", "completions", "completionMode", "backoffLimit"):
            assert our_job[key] == their_job[key], (name, key)
        our_pod, their_pod = our_job["template"]["spec"], their_job["template"]["spec"]
        assert our_pod["restartPolicy"] == their_pod["restartPolicy"], name
        our_vols = by_name(our_pod.get("volumes"))
        for vol_name, vol in by_name(their_pod.get("volumes")).items():
            assert vol_name in our_vols, (name, vol_name)
            for kind, source in vol.items():
                if kind != "name":
                    assert source.items() <= our_vols[vol_name][kind].items(), (name, vol_name)
        our_containers = by_name(our_pod["containers"])
        assert set(our_containers) == {c["name"] for c in their_pod["containers"]}
        for their_c in their_pod["containers"]:
            our_c = our_containers[their_c["name"]]
            assert our_c.get("ports") == their_c.get("ports"), name
            assert (our_c.get("resources") or {}) == (their_c.get("resources") or {}), name
            if not (mpi_node and name == "node"):  # sshd: see the module docstring
                assert our_c.get("command") == their_c.get("command"), name
                assert our_c.get("args") == their_c.get("args"), name
            mounts = {(m["name"], m["mountPath"]) for m in our_c.get("volumeMounts") or []}
            assert {(m["name"], m["mountPath"])
                    for m in their_c.get("volumeMounts") or []} <= mounts, name
            our_env = by_name(our_c.get("env"))
            their_env = by_name(their_c.get("env"))
            for env_name, item in their_env.items():
                assert our_env.get(env_name) == item, (name, env_name)
            assert ({n for n in our_env if n.startswith("PET_")}
                    == {n for n in their_env if n.startswith("PET_")}), name

    # Trainer writes the hosts in its template's replicated-job order: its own MPI
    # runtimes list node before launcher, the bridge's launcher first; the bridge puts
    # the launcher first for every MPI job.
    if "hostfile" in case and not case_name.startswith("upstream-runtimes/"):
        assert hostfile_text(jobset_name(req), req) == case["hostfile"]


def test_the_fixtures_say_where_they_come_from() -> None:
    assert {"torch-distributed.yaml", "mpi-distributed.yaml"} <= set(CASES)
    for name in CASES:
        head = (FIXTURES / name).read_text().split("\ntrainJob:")[0]
        assert "RECORDED" in head and "kubeflow/trainer" in head
