"""sbatch options on the Kubernetes back end (issue 12 item 4), against the real
apiserver, scheduler and JobSet controller, submitted as alice over the socket.

Before, the Kubernetes back end silently ignored ``--qos``, ``-o``, ``--exclusive``,
``-D`` … and ``--exclude``/``--constraint`` unless the engine could pin the pods. Now
every option is honoured or refused at admission naming the option and the back end
(k8s_adapter/options.py), and ``--exclude``/``--constraint`` are required node
affinity the real scheduler obeys (k8s_adapter/affinity.py), in placement mode
``constraints`` too.
"""

from __future__ import annotations

import json

import pytest

from tests.integration.bed import Daemon
from tests.integration.k8s_bridge import jobsets, pods
from tests.integration.k8s_users import submit_as, torch_job
from tests.integration.k8sbed import K8sBed

pytestmark = pytest.mark.integration


def test_options_a_pod_cannot_honour_are_refused_together_by_tbatch(
        k8s: K8sBed, k8s_namespace: str, k8s_alice: Daemon) -> None:
    script = k8s_alice.workdir / "slurmish.sh"
    script.write_text("#!/bin/sh\n#SBATCH --qos=high\n#SBATCH -o run-%j.out\n"
                      "#SBATCH --exclusive -D /scratch/alice\n#SBATCH --mail-type=END\n"
                      "echo hi\n")
    script.chmod(0o644)
    res = k8s_alice.cli("alice", "tbatch", "--backend", "kubernetes", str(script),
                               cwd=k8s_alice.workdir)
    assert res.returncode != 0, res
    for flag in ("--qos", "--output", "--exclusive", "--chdir", "--mail-type"):
        assert f"{flag} is not supported by back end 'kubernetes'" in res.stderr, (flag, res)
    assert k8s_alice.api("GET", "/v1/jobs").json()["items"] == []
    assert jobsets(k8s, k8s_namespace) == []
    # The same script without them runs there (the submitting directory is not -D).
    script.write_text("#!/bin/sh\n#SBATCH -N 1 -t 5\necho hi\n")
    res = k8s_alice.cli("alice", "tbatch", "--parsable", "--backend", "kubernetes",
                               str(script), cwd=k8s_alice.workdir)
    assert res.returncode == 0, res
    done = k8s_alice.wait_state(int(res.stdout), ["Succeeded", "Failed"], timeout=120)
    assert done["state"] == "Succeeded", done
    [js] = jobsets(k8s, k8s_namespace)
    job_spec = js["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job_spec["activeDeadlineSeconds"] == 300  # -t 5


def test_the_scheduler_obeys_exclude_and_constraint(
        k8s: K8sBed, k8s_namespace: str, k8s_alice: Daemon) -> None:
    """Rack rack-2 is kwok-node-3 and -4; without kwok-node-3 only kwok-node-4 is left,
    so the real scheduler puts both pods there."""
    doc = torch_job("picky", None, nodes=2)
    doc["metadata"]["annotations"]["hpc-bridge.io/scheduling"] = json.dumps({
        "exclude": "kwok-node-3", "constraint": "topology.hpc-bridge.io/rack=rack-2&type"})
    answer = submit_as(k8s_alice, "alice", doc)
    assert answer["status"] == 201, answer
    done = k8s_alice.wait_state(answer["id"], ["Succeeded", "Failed"], timeout=120)
    assert done["state"] == "Succeeded", done
    placed = {p["spec"].get("nodeName") for p in pods(k8s, k8s_namespace)}
    assert placed == {"kwok-node-4"}, placed


def test_a_constraint_on_hosts_or_node_roles_is_refused(
        k8s: K8sBed, k8s_namespace: str, k8s_alice: Daemon) -> None:
    """--nodelist is refused; a constraint on kubernetes.io/hostname would be it by
    another name, and a job must not pick control-plane nodes."""
    for constraint in ("kubernetes.io/hostname=kwok-node-1",
                       "node-role.kubernetes.io/control-plane"):
        doc = torch_job("roles", None)
        doc["metadata"]["annotations"]["hpc-bridge.io/scheduling"] = json.dumps(
            {"constraint": constraint})
        answer = submit_as(k8s_alice, "alice", doc)
        assert answer["status"] == 400, answer
        assert "names hosts or node roles" in answer["error"], answer
    assert jobsets(k8s, k8s_namespace) == []


def test_a_constraint_kubernetes_cannot_express_is_refused(
        k8s: K8sBed, k8s_namespace: str, k8s_alice: Daemon) -> None:
    doc = torch_job("orish", None)
    doc["metadata"]["annotations"]["hpc-bridge.io/scheduling"] = json.dumps(
        {"constraint": "rack-1|rack-2", "switches": 1})
    answer = submit_as(k8s_alice, "alice", doc)
    assert answer["status"] == 400, answer
    assert "--constraint is not supported by back end 'kubernetes'" in answer["error"]
    assert "--switches is not supported by back end 'kubernetes'" in answer["error"]
    assert "no leaf switches" in answer["error"]
    assert jobsets(k8s, k8s_namespace) == []


def test_sbatchs_gpu_options_become_each_pods_gpus(
        k8s: K8sBed, k8s_namespace: str, k8s_alice: Daemon) -> None:
    """``--gres=gpu:2`` and ``--gpus=4`` over two nodes each ask every pod for two
    ``nvidia.com/gpu`` (request and limit); the real scheduler places the pods on the
    GPU nodes and the job runs. A GPU type is refused, naming it and the back end."""
    script = k8s_alice.workdir / "gpus.sh"
    script.write_text("#!/bin/sh\n#SBATCH -N 2 -t 5\necho hi\n")
    script.chmod(0o644)
    ids = []
    for flag in ("--gres=gpu:2", "--gpus=4"):
        res = k8s_alice.cli("alice", "tbatch", "--parsable", "--backend", "kubernetes", flag,
                            str(script), cwd=k8s_alice.workdir)
        assert res.returncode == 0, res
        ids.append(int(res.stdout))
    for job_id in ids:
        done = k8s_alice.wait_state(job_id, ["Succeeded", "Failed"], timeout=120)
        assert done["state"] == "Succeeded", done
    sets = jobsets(k8s, k8s_namespace)
    assert len(sets) == 2
    for js in sets:
        [container] = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
            "spec"]["containers"]
        assert (container["resources"]["requests"]["nvidia.com/gpu"],
                container["resources"]["limits"]["nvidia.com/gpu"]) == ("2", "2"), container
    res = k8s_alice.cli("alice", "tbatch", "--backend", "kubernetes", "--gres=gpu:a100:1",
                        str(script), cwd=k8s_alice.workdir)
    assert res.returncode == 1, res
    assert ("command line: --gres is not supported by back end 'kubernetes': "
            "--gres=gpu:a100:1 names a GPU type ('a100')") in res.stderr, res.stderr


def test_memory_per_cpu_and_tmp_become_the_pods_requests(
        k8s: K8sBed, k8s_namespace: str, k8s_alice: Daemon) -> None:
    """``--mem-per-cpu=100 -c 2`` is a 200Mi memory request and ``--tmp=1G`` a 1Gi
    ephemeral-storage one, in the JobSet the bridge makes (the bed's kwok nodes offer no
    ephemeral storage, so the pod is not run here: the objects are checked)."""
    script = k8s_alice.workdir / "mem.sh"
    script.write_text("#!/bin/sh\n#SBATCH -t 5 -c 2 --mem-per-cpu=100 --tmp=1G\necho hi\n")
    script.chmod(0o644)
    res = k8s_alice.cli("alice", "tbatch", "--parsable", "--backend", "kubernetes",
                        str(script), cwd=k8s_alice.workdir)
    assert res.returncode == 0, res
    k8s.wait_for(lambda: jobsets(k8s, k8s_namespace), 60, "the JobSet")
    [js] = jobsets(k8s, k8s_namespace)
    [container] = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"]
    requests = container["resources"]["requests"]
    assert (requests["memory"], requests["ephemeral-storage"], requests["cpu"]) == (
        "200Mi", "1Gi", "2"), container["resources"]  # 1024Mi, as the apiserver writes it
    assert k8s_alice.cli("alice", "tcancel", res.stdout.strip()).returncode == 0
