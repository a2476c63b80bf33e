"""``--mem-per-cpu``, ``--mem-per-gpu`` and ``--tmp`` (bridge/shape.py,
k8s_adapter/pod_resources.py): a pod's memory and local disk on Kubernetes, the job
shape's memory per node that placement counts; Slurm gets the options themselves."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.option_support import AdmitContext, refusals
from bridge.scheduling import SchedulingOptions
from k8s_adapter.options import SUPPORT as K8S
from k8s_adapter.pod_resources import container_resources
from slurm_adapter.script import job_spec, sbatch_args
from tests.unit.builders import submit_request, trainjob


@pytest.mark.parametrize(("options", "memory"), [
    ({"mem_per_cpu_mb": 100, "cpus_per_task": 2, "ntasks_per_node": 2}, "400Mi"),
    ({"mem_per_cpu_mb": 100, "ntasks_per_node": 3}, "300Mi"),  # a CPU a task
    ({"mem_per_gpu_mb": 1000, "gpus_per_node": 2}, "2000Mi"),
    ({"mem_per_gpu_mb": 1000, "gres": "gpu:4"}, "4000Mi"),
])
def test_memory_per_cpu_or_gpu_is_the_pods_memory(options: dict[str, Any], memory: str
                                                  ) -> None:
    job = trainjob("torch-distributed", nodes=2, command=["torchrun", "t.py"])
    request = submit_request(job, SchedulingOptions(**options))
    assert container_resources(request)["requests"]["memory"] == memory
    assert request.job_shape.mem_per_node_mb == int(memory.removesuffix("Mi"))
    assert refusals(SchedulingOptions(**options), K8S, "kubernetes",
                    AdmitContext(nodes=2)) == []
    spec = job_spec(request, default_chdir="/home/alice")
    args = sbatch_args(spec)
    assert spec.mem_per_node_mb is None and not any(a.startswith("--mem=") for a in args)
    assert any(a.startswith(("--mem-per-cpu=", "--mem-per-gpu=")) for a in args), args


def test_tmp_is_the_pods_local_disk_and_memory_per_gpu_needs_gpus() -> None:
    job = trainjob("plain", command=["true"])
    resources = container_resources(submit_request(job, SchedulingOptions(tmp_mb=2048)))
    assert resources["requests"]["ephemeral-storage"] == "2048Mi"
    assert "ephemeral-storage" not in container_resources(
        submit_request(job, SchedulingOptions(tmp_mb=0))).get("requests", {})
    [why] = refusals(SchedulingOptions(mem_per_gpu_mb=10), K8S, "kubernetes", AdmitContext())
    assert why.startswith("--mem-per-gpu is not supported by back end 'kubernetes': the "
                          "options ask for no GPUs per pod"), why
    [zero] = refusals(SchedulingOptions(mem_per_gpu_mb=10, gres="gpu:0"), K8S, "kubernetes",
                      AdmitContext())
    assert "ask for no GPUs per pod" in zero, zero
