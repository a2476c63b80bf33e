"""Conformance: one table of TrainJobs (every runtime of the catalogue x MPI flavour x
resource form) rendered by all three back ends (Slurm sbatch flags and script, Flux
jobspec, Kubernetes JobSet), which must agree on nodes, ranks per node, resources per
node, the job's environment names, the user's argv, the MPI flavour and the framework's
rank environment names.

What a back end cannot express is listed here, explicitly (:data:`CANNOT`), and
checked to be refused or absent rather than silently different.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from bridge.backend import BackendRejected, SubmitRequest
from bridge.model import ANN_SCHEDULING, TrainJob
from bridge.runtimes import FRAMEWORK_LABEL, Framework, MpiImplementation, RuntimeCatalog
from bridge.runtimes import _runtime as runtime_doc
from bridge.scheduling import SchedulingOptions
from bridge.shape import GPU_RESOURCE, JobShape
from bridge.topology import cpu_millis, memory_mb
from flux_adapter.jobspec import build_jobspec, layout_for
from flux_adapter.jobspec import job_environment as flux_environment
from k8s_adapter.jobset import JobSetOptions, render_jobset
from mpi_launch.allocation import Allocation, Host
from mpi_launch.hostfile import hostfile_env
from mpi_launch.rankenv import jax_env, torch_node_env, xgboost_env
from slurm_adapter.script import job_environment, job_spec, launch_command, sbatch_args
from tests.unit import builders
from tests.unit.builders import submit_request

UID = "00000000-0000-4000-8000-0000000000c0"
NODES, RANKS = 2, 2
USER_ENV = {"DATA_DIR": "/data", "SEED": "7"}
USER_ARGV = ["python", "train.py", "--epochs", "3"]


def catalog() -> RuntimeCatalog:
    """The built-in catalogue plus one MPI runtime per further flavour."""
    extra = [runtime_doc(f"mpi-{impl.value.lower()}", Framework.MPI,
                         {"numProcPerNode": 1, "mpiImplementation": impl.value})
             for impl in MpiImplementation if impl is not MpiImplementation.OPENMPI]
    extra.append(runtime_doc("mpi-intelmpi", Framework.MPI,
                             {"numProcPerNode": 1, "mpiImplementation": "IntelMPI"}))
    return RuntimeCatalog(list(extra))


#: Resource forms: none; resourcesPerNode (a TrainJob CR); tbatch's (options and the
#: same values in resourcesPerNode); and each with memory.
FORMS: dict[str, tuple[dict[str, Any] | None, dict[str, Any]]] = {
    "none": (None, {}),
    "resourcesPerNode": ({"requests": {"cpu": "4", GPU_RESOURCE: 2},
                          "limits": {GPU_RESOURCE: 2}}, {}),
    "resourcesPerNode+memory": ({"requests": {"cpu": "4", "memory": "2Gi",
                                              GPU_RESOURCE: 1}}, {}),
    "tbatch": ({"requests": {"cpu": 6, GPU_RESOURCE: 1}, "limits": {"cpu": 6,
                                                                    GPU_RESOURCE: 1}},
               {"cpus_per_task": 3, "gpus_per_node": 1}),
    "tbatch+memory": ({"requests": {"memory": "512Mi"}, "limits": {"memory": "512Mi"}},
                      {"mem_per_node_mb": 512}),
}

#: (back end, form) -> what that back end cannot express, and how it says so.
CANNOT: dict[tuple[str, str], str] = {
    ("flux", "resourcesPerNode+memory"): "memory",  # jobspec v1 has no memory: refused
    ("flux", "tbatch+memory"): "--mem",
}
#: Kubernetes requests nothing for a form without resources (best effort pods), where
#: Slurm and Flux allocate one CPU per rank: CPUs are compared only where it asks.


def trainjob(runtime: str, form: str) -> TrainJob:
    resources, options = FORMS[form]
    annotations = ({ANN_SCHEDULING: SchedulingOptions(**options).model_dump_json(
        exclude_defaults=True)} if options else {})
    return builders.trainjob(runtime, name="conf", uid=UID, nodes=NODES, procs=RANKS,
                             image="registry.example/train:1", command=USER_ARGV[:2],
                             args=USER_ARGV[2:], env=USER_ENV, resources=resources,
                             annotations=annotations)


def request(job: TrainJob, cat: RuntimeCatalog) -> SubmitRequest:
    """The request of an admitted job: its options and shape resolved."""
    return submit_request(job, uid=UID, job_id=7, catalog=cat, resolve=True)


def _after_dashes(argv: list[str]) -> list[str]:
    return argv[argv.index("--") + 1:] if "--" in argv else argv


def _mpi_of(argv: list[str]) -> str | None:
    return argv[argv.index("--mpi") + 1] if "--mpi" in argv else None


def slurm_view(req: SubmitRequest) -> dict[str, Any]:
    spec = job_spec(req, default_chdir="/home/alice")
    args = sbatch_args(spec)
    assert f"--nodes={spec.nodes}" in args
    argv = launch_command(req.plan)
    ranks = spec.ntasks_per_node
    return {"nodes": spec.nodes, "ranks": ranks,
            "cpus": (spec.cpus_per_task or 1) * (ranks or 1),
            "gpus": spec.gpus_per_node or 0, "memory": spec.mem_per_node_mb,
            "env": set(job_environment(req)) - {"PATH"},
            "argv": _after_dashes(argv), "mpi": _mpi_of(argv)}


def flux_view(req: SubmitRequest) -> dict[str, Any]:
    js = build_jobspec(req, default_cwd="/home/alice", mpi_launch="mpi-launch")
    node = js["resources"][0]
    children = {c["type"]: c["count"] for c in node["with"][0]["with"]}
    argv = list(js["tasks"][0]["command"])
    if argv[:2] == ["flux", "broker"]:  # a plain job on several nodes: a nested instance
        argv = argv[2:]                 # whose initial program is the user's argv
    return {"nodes": node["count"], "ranks": layout_for(req).ranks_per_node,
            "cpus": children["core"], "gpus": children.get("gpu", 0), "memory": None,
            "env": set(js["attributes"]["system"]["environment"]) - {"PATH"},
            "flux_env": set(flux_environment(req.plan)),
            "argv": _after_dashes(argv), "mpi": _mpi_of(argv)}


def k8s_view(req: SubmitRequest) -> dict[str, Any]:
    js = render_jobset(req, JobSetOptions())
    jobs = js["spec"]["replicatedJobs"]
    pods = [j["template"]["spec"]["template"]["spec"]["containers"][0] for j in jobs]
    first = pods[0]
    env = {e["name"]: e.get("value") for e in first["env"]}
    requests = first.get("resources", {}).get("requests", {})
    limits = first.get("resources", {}).get("limits", {})
    for pod in pods:  # every node pod asks for the same
        assert pod.get("resources", {}) == first.get("resources", {})
    return {"nodes": sum(j["template"]["spec"]["parallelism"] for j in jobs),
            "ranks": int(env["JOBSET_NPROC_PER_NODE"]),
            "cpus": (math.ceil(cpu_millis(requests["cpu"]) / 1000) if "cpu" in requests
                     else None),
            "gpus": int(limits.get(GPU_RESOURCE, requests.get(GPU_RESOURCE, 0))),
            "memory": memory_mb(requests["memory"]) if "memory" in requests else None,
            "env": set(env), "argv": [*first.get("command", []), *first.get("args", [])]}


def rank_env_names(shape: JobShape) -> set[str]:
    """The framework's rank environment names as mpi_launch writes them on Slurm and
    Flux (what the JobSet must carry too)."""
    alloc = Allocation(world="slurm", job_id="1", hosts=(Host("a", RANKS), Host("b", RANKS)))
    fw = shape.framework
    if fw is Framework.TORCH:
        return set(torch_node_env(alloc, RANKS, 1))
    if fw is Framework.JAX:
        return set(jax_env(alloc, 0, 1))
    if fw is Framework.XGBOOST:
        return set(xgboost_env(alloc, 0, 1))
    if fw is Framework.MPI:
        return set(hostfile_env(shape.mpi_flavour, "/h", [Host("a", 1), Host("b", 1)]))
    return set()


CAT = catalog()
TABLE = [(runtime, form) for runtime in CAT.names() for form in FORMS]


def test_the_table_covers_every_runtime_and_flavour() -> None:
    frameworks = {CAT.get(trainjob(r, "none")).metadata.labels[FRAMEWORK_LABEL]
                  for r in CAT.names()}
    assert frameworks == {f.value for f in Framework}
    flavours = {CAT.resolve(trainjob(r, "none")).mpi_implementation for r in CAT.names()}
    assert set(MpiImplementation) <= flavours


@pytest.mark.parametrize(("runtime", "form"), TABLE)
def test_three_back_ends_agree(runtime: str, form: str) -> None:
    req = request(trainjob(runtime, form), CAT)
    shape = req.job_shape
    views = {"slurm": slurm_view(req), "kubernetes": k8s_view(req)}
    if ("flux", form) in CANNOT:
        with pytest.raises(BackendRejected, match=CANNOT[("flux", form)]):
            flux_view(req)
    else:
        views["flux"] = flux_view(req)
    for name, view in views.items():
        where = f"{name} ({runtime}, {form})"
        assert view["nodes"] == shape.nodes == NODES, where
        # A plain job runs its command once per node whatever numProcPerNode says; the
        # JobSet spells "nothing says" as 1.
        expected = None if shape.framework is Framework.PLAIN else RANKS
        assert shape.ranks_per_node == expected, where
        assert view["ranks"] == (expected or 1 if name == "kubernetes" else expected), where
        assert view["gpus"] == (shape.gpus_per_node or 0), where
        if view["cpus"] is not None:  # Kubernetes asks for none when nothing is given
            assert view["cpus"] == (shape.cpus_per_node or shape.ranks_per_node or 1), where
        if name != "flux":  # Flux refuses memory (CANNOT) or has none to set
            assert view["memory"] == shape.mem_per_node_mb, where
        assert set(USER_ENV) <= view["env"], where
        assert {"HPC_BRIDGE_JOB_ID", "HPC_BRIDGE_JOB_UID"} <= view["env"], where
        assert view["argv"] == USER_ARGV, where
    if shape.framework is Framework.MPI:
        assert views["slurm"]["mpi"] == shape.mpi_flavour, runtime
        if "flux" in views and views["flux"]["mpi"] is not None:
            assert views["flux"]["mpi"] == shape.mpi_flavour, runtime
    assert rank_env_names(shape) <= views["kubernetes"]["env"], runtime
    if shape.cpus_per_node is not None or form == "none":
        assert views["kubernetes"]["cpus"] == shape.cpus_per_node, (runtime, form)
