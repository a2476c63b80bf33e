"""What a Kubeflow SDK user does, as a script for tests/integration/test_kubeflow_sdk.py.

Runs under ``.venv-kubeflow/bin/python`` (scripts/setup-python.sh: the pinned
``kubeflow`` SDK in an environment of its own, as a user has it; never imported by the
test suite itself). One action per run, its result as JSON on stdout::

    kubeflow_sdk_probe.py --kubeconfig K --namespace NS list
    kubeflow_sdk_probe.py ... get NAME
    kubeflow_sdk_probe.py ... wait NAME STATUS[,STATUS] TIMEOUT
    kubeflow_sdk_probe.py ... events NAME
    kubeflow_sdk_probe.py ... delete NAME
    kubeflow_sdk_probe.py ... runtimes
    kubeflow_sdk_probe.py ... train RUNTIME NODES   (a CustomTrainer; prints its name)
    kubeflow_sdk_probe.py ... tune RUNTIME          (a BuiltinTrainer: torchtune, 1 GPU)
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kubeflow.common.types import KubernetesBackendConfig
from kubeflow.trainer import (
    BuiltinTrainer,
    CustomTrainer,
    DataType,
    HuggingFaceDatasetInitializer,
    HuggingFaceModelInitializer,
    Initializer,
    TorchTuneConfig,
    TrainerClient,
)


def job_view(job: Any) -> dict[str, Any]:
    return {"name": job.name, "status": job.status, "num_nodes": job.num_nodes,
            "runtime": job.runtime.name,
            "steps": [{"name": s.name, "status": s.status, "pod": s.pod_name}
                      for s in job.steps]}


def train_fn() -> None:
    """The function a CustomTrainer job runs (the SDK sends its source)."""
    print("hello from the Kubeflow SDK")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("action")
    parser.add_argument("args", nargs="*")
    opts = parser.parse_args()
    client = TrainerClient(backend_config=KubernetesBackendConfig(
        namespace=opts.namespace, config_file=opts.kubeconfig))
    result: Any
    if opts.action == "list":
        result = [job_view(j) for j in client.list_jobs()]
    elif opts.action == "get":
        result = job_view(client.get_job(opts.args[0]))
    elif opts.action == "wait":
        name, wanted, timeout = opts.args
        result = job_view(client.wait_for_job_status(
            name, status=set(wanted.split(",")), timeout=int(timeout), polling_interval=1))
    elif opts.action == "events":
        result = [{"kind": e.involved_object_kind, "name": e.involved_object_name,
                   "reason": e.reason, "message": e.message}
                  for e in client.get_job_events(opts.args[0])]
    elif opts.action == "logs":
        result = list(client.get_job_logs(opts.args[0]))
    elif opts.action == "delete":
        client.delete_job(opts.args[0])
        result = {"deleted": opts.args[0]}
    elif opts.action == "runtimes":
        result = [{"name": r.name, "framework": r.trainer.framework,
                   "image": r.trainer.image, "num_nodes": r.trainer.num_nodes}
                  for r in client.list_runtimes()]
    elif opts.action == "train":
        runtime, nodes = opts.args
        result = {"name": client.train(runtime=runtime, trainer=CustomTrainer(
            func=train_fn, num_nodes=int(nodes)))}
    elif opts.action == "tune":
        result = {"name": client.train(
            runtime=opts.args[0],
            initializer=Initializer(
                dataset=HuggingFaceDatasetInitializer(storage_uri="hf://tatsu-lab/alpaca/data"),
                model=HuggingFaceModelInitializer(
                    storage_uri="hf://meta-llama/Llama-3.2-1B-Instruct")),
            trainer=BuiltinTrainer(config=TorchTuneConfig(
                dtype=DataType.BF16, epochs=1, batch_size=2,
                resources_per_node={"gpu": 1})))}
    else:
        parser.error(f"unknown action {opts.action!r}")
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
