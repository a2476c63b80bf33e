"""What each back end does with each scheduling option (bridge/option_support.py, issue
12 item 4): every option is honoured or refused at admission with the option and the
back end named, never ignored; the compatibility table is made from the same tables."""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.backend import BackendJob, BackendRejected, BackendState
from bridge.compat_table import render
from bridge.engine import Engine, EngineSettings
from bridge.feed import EventFeed
from bridge.model import ANN_ADOPT_ONLY, ANN_SCHEDULING, ValidationError, load_trainjob
from bridge.option_support import (
    AdmitContext,
    Support,
    check_backend_options,
    installed_tables,
    missing,
    refusals,
    set_fields,
)
from bridge.runtimes import RuntimeCatalog
from bridge.sbatch.manual import RELEASES, all_names
from bridge.sbatch.options import BY_LONG, refused_names
from bridge.scheduling import SchedulingOptions
from bridge.service import JobService
from bridge.states import JobState
from bridge.store import Store
from flux_adapter.backend import create as create_flux
from flux_adapter.options import SUPPORT as FLUX
from k8s_adapter.backend import create as create_k8s
from k8s_adapter.options import SUPPORT as K8S
from slurm_adapter.options import SUPPORT as SLURM
from tests.unit.builders import ALICE, submit_request, trainjob
from tests.unit.fakes import FakeBackend, settle
from tests.unit.test_engine_placement import inventory

DOC = Path(__file__).resolve().parents[2] / "docs" / "sbatch-compat.md"

#: One value for every field, each as tbatch would store it.
EVERY: dict[str, Any] = {
    "job_name": "j", "partition": "debug", "account": "a", "qos": "q",
    "time_limit_minutes": 5, "ntasks": 2, "ntasks_per_node": 2, "cpus_per_task": 1,
    "gpus_per_node": 1, "mem_per_node_mb": 100, "output": "o-%j", "error": "e-%j",
    "chdir": "/tmp", "submit_dir": "/tmp", "submit_path": "/usr/bin", "exclusive": True,
    "switches": 1,
    "switches_wait_minutes": 2, "export": "ALL", "nodelist": "n1", "exclude": "n2",
    "constraint": "ib", "mail_type": "END", "mail_user": "a@b", "signal": "USR1@60",
    "requeue": True, "open_mode": "append", "comment": "c", "wckey": "w",
    "reservation": "r", "licenses": "l", "begin": "now", "deadline": "now+1hour",
    "hint": "nomultithread", "mem_per_cpu_mb": 10, "gres": "gpu:1",
    "distribution": "block", "tmp_mb": 1, "gpus": "1", "gpus_per_task": "1",
    "cpus_per_gpu": 1, "mem_per_gpu_mb": 1, "max_nodes": 3, "dependency": "afterok:1",
    "kill_on_invalid_dep": True, "array": "0-3%2", "hold": True,
}


def test_every_field_has_a_value_here() -> None:
    assert set(EVERY) == set(SchedulingOptions.model_fields)
    assert set_fields(SchedulingOptions.model_validate(EVERY)) == list(EVERY)


@pytest.mark.parametrize("name", ["slurm", "flux", "kubernetes"])
def test_every_back_end_covers_every_option(name: str) -> None:
    tables = installed_tables()
    assert missing(tables[name]) == []
    backend = {"slurm": SLURM, "flux": FLUX, "kubernetes": K8S}[name]
    assert tables[name] is backend


def test_backends_declare_their_table() -> None:
    k8s = create_k8s("kubernetes", {"kubeconfig": "/nonexistent"})
    assert k8s.option_support is K8S
    assert create_flux("flux", {}).option_support is FLUX


def test_slurm_honours_everything() -> None:
    assert refusals(SchedulingOptions.model_validate(EVERY), SLURM, "slurm") == []


def test_a_support_is_honoured_or_refused() -> None:
    with pytest.raises(ValueError, match="either"):
        Support()
    with pytest.raises(ValueError, match="either"):
        Support(how="a", why="b")


def test_a_field_a_table_lacks_is_refused_not_ignored() -> None:
    found = refusals(SchedulingOptions(qos="q"), {}, "new")
    assert found == ["--qos is not supported by back end 'new': the back end does not say "
                     "that it honours it"]


@pytest.mark.parametrize(("options", "flag", "words"), [
    ({"account": "a"}, "--account", "no Slurm account"),
    ({"qos": "q"}, "--qos", "no Slurm QOS"),
    ({"output": "o-%j"}, "--output", "container log"),
    ({"error": "e-%j"}, "--error", "container log"),
    ({"chdir": "/scratch/run"}, "--chdir", "WORKDIR"),
    ({"exclusive": True}, "--exclusive", "other pods"),
    ({"nodelist": "n1"}, "--nodelist", "--exclude"),
    ({"partition": "debug"}, "--partition", "route_partitions (here: none)"),
    ({"constraint": "ib|gpu"}, "--constraint", "'|'"),
    ({"constraint": "a:b"}, "--constraint", "'a:b' is not a node label a job may ask for"),
    ({"constraint": "zone=-x"}, "--constraint", "its value is not"),
    ({"constraint": "a..b/gpu"}, "--constraint", "not a DNS subdomain"),
    ({"constraint": "kubernetes.io/hostname=n1"}, "--constraint", "names hosts"),
    ({"constraint": "node-role.kubernetes.io/control-plane"}, "--constraint", "node roles"),
    ({"constraint": "zone=a,zone=b"}, "--constraint", "cannot be both 'a' and 'b'"),
    ({"exclude": ","}, "--exclude", "names no hosts"),
    ({"exclude": "n[1-2000]"}, "--exclude", "more than 1024 hosts"),
    ({"switches": 1}, "--switches", "no leaf switches"),
    ({"ntasks": 3, "ntasks_per_node": 2}, "--ntasks", "disagree over 2 pod(s)"),
    ({"mail_type": "END"}, "--mail-type", "only Slurm"),
    ({"max_nodes": 4}, "--nodes=MIN-MAX (a range, at most 4)", "only Slurm"),
])
def test_kubernetes_refuses_what_a_pod_cannot_do(options: dict[str, Any], flag: str,
                                                  words: str) -> None:
    found = refusals(SchedulingOptions.model_validate(options), K8S, "kubernetes",
                     AdmitContext(nodes=2, framework="torch"))
    assert len(found) == 1
    assert found[0].startswith(f"{flag} is not supported by back end 'kubernetes': ")
    assert words in found[0]


def test_kubernetes_refuses_switches_unless_kueue_places_the_pods() -> None:
    """Only Kueue's Topology Aware Scheduling can count leaf switches there
    (k8s_adapter/kueue_topology.py), and only with a level above the hosts."""
    options = SchedulingOptions(switches=1, switches_wait_minutes=5)
    assert len(refusals(options, K8S, "kubernetes", AdmitContext())) == 2
    assert len(refusals(options, K8S, "kubernetes")) == 2
    levels = ("topology.example/rack", "kubernetes.io/hostname")
    kueue = AdmitContext(queue_places=True, topology_labels=levels)
    assert refusals(options, K8S, "kubernetes", kueue) == []  # one node: always one switch
    two = AdmitContext(nodes=2, queue_places=True, topology_labels=levels)
    found = refusals(options, K8S, "kubernetes", two)
    assert len(found) == 2 and "topology webhook" in found[0]  # Kueue did not get it
    handed = AdmitContext(nodes=2, queue_places=True, topology_labels=levels,
                          topology_handed=True)
    assert refusals(options, K8S, "kubernetes", handed) == []
    hosts_only = AdmitContext(queue_places=True, topology_labels=levels[1:])
    found = refusals(options, K8S, "kubernetes", hosts_only)
    assert len(found) == 2 and "no level above the host" in found[0]


def test_kubernetes_refuses_tasks_that_do_not_divide_over_the_pods() -> None:
    [found] = refusals(SchedulingOptions(ntasks=3), K8S, "kubernetes",
                       AdmitContext(nodes=2, framework="mpi"))
    assert "do not divide evenly over 2 pods" in found


@pytest.mark.parametrize("framework", ["jax", "xgboost"])
def test_kubernetes_runs_one_jax_or_xgboost_process_per_pod(framework: str) -> None:
    ctx = AdmitContext(nodes=2, framework=framework)
    for options in (SchedulingOptions(ntasks_per_node=4), SchedulingOptions(ntasks=8)):
        [found] = refusals(options, K8S, "kubernetes", ctx)
        assert "one process per pod" in found
    assert refusals(SchedulingOptions(ntasks=2), K8S, "kubernetes", ctx) == []


@pytest.mark.parametrize("ctx", [AdmitContext(), AdmitContext()])
def test_kubernetes_honours_exclude_and_label_constraints_in_every_mode(
        ctx: AdmitContext) -> None:
    options = SchedulingOptions(
        exclude="n[1-2]", constraint="ib&topology.kubernetes.io/zone=a&gpu=&ib=x&"
                                     "node.kubernetes.io/instance-type=m5")
    assert refusals(options, K8S, "kubernetes", ctx) == []


def test_kubernetes_takes_a_routed_partition_and_even_tasks() -> None:
    ctx = AdmitContext(routed_partitions=frozenset({"gpu"}), nodes=2)
    assert refusals(SchedulingOptions(partition="gpu", ntasks=4), K8S, "kubernetes", ctx) == []
    assert refusals(SchedulingOptions(ntasks=4, ntasks_per_node=2), K8S, "kubernetes",
                    ctx) == []
    # A plain job's -n only sizes each pod (its script runs once per pod).
    assert refusals(SchedulingOptions(ntasks=3), K8S, "kubernetes", ctx) == []
    [found] = refusals(SchedulingOptions(partition="debug"), K8S, "kubernetes", ctx)
    assert "(here: gpu)" in found


@pytest.mark.parametrize(("options", "words"), [
    ({"qos": "q"}, "Slurm QOS"),
    ({"mem_per_node_mb": 100}, "never memory"),
    ({"switches": 1}, "leaf switches"),
    ({"constraint": "[a|b]"}, "no Flux equivalent"),
    ({"output": "x-%N"}, "%N"),
    ({"error": "x-%t"}, "%t"),
    ({"comment": "c"}, "only Slurm"),
])
def test_flux_refuses_at_admission_what_the_jobspec_cannot_say(options: dict[str, Any],
                                                               words: str) -> None:
    [found] = refusals(SchedulingOptions.model_validate(options), FLUX, "flux")
    assert "is not supported by back end 'flux': " in found and words in found


def test_flux_admission_agrees_with_the_jobspec_builder() -> None:
    """What admission lets through, the jobspec builder translates (and the reverse)."""
    from flux_adapter.jobspec import build_jobspec

    for value in ("ib", "a&b", "a|b", "[a|b]", "a*2", "a&b|c"):
        options = SchedulingOptions(constraint=value)
        admitted = refusals(options, FLUX, "flux") == []
        try:
            build_jobspec(submit_request(trainjob(command=["true"]), options),
                          default_cwd="/tmp")
            built = True
        except BackendRejected:
            built = False
        assert admitted == built, value


@given(st.sets(st.sampled_from(sorted(EVERY))))
def test_refusals_name_each_refused_field_once(names: set[str]) -> None:
    options = SchedulingOptions.model_validate({n: EVERY[n] for n in names})
    for backend, table, ctx in (("flux", FLUX, AdmitContext()),
                                ("kubernetes", K8S, AdmitContext(nodes=2))):
        found = refusals(options, table, backend, ctx)
        expected = [n for n in set_fields(options)
                    if table[n].reason(options, ctx) is not None]
        assert len(found) == len(expected)
        assert all(f"back end {backend!r}" in m for m in found)


def _engine(tmp_path: Path) -> Engine:
    backend = create_k8s("kubernetes", {"kubeconfig": "/nonexistent", "users": {
        "alice": {"namespace": "team-a", "service_account": "alice"}}})
    return Engine(Store.open(tmp_path / "s.sqlite"), {"kubernetes": backend},
                  RuntimeCatalog(), EngineSettings(default_backend="kubernetes"))


def _job(options: dict[str, Any]) -> Any:
    return load_trainjob({"metadata": {"name": "t", "annotations": {
        ANN_SCHEDULING: json.dumps(options)}},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": 1, "image": "busybox", "command": ["true"]}}})


def test_admission_refuses_every_option_at_once_and_stores_nothing(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    with pytest.raises(ValidationError) as err:
        engine.admit(_job({"qos": "q", "output": "o", "switches": 1, "exclude": ","}), ALICE)
    text = str(err.value)
    for flag in ("--qos", "--output", "--switches", "--exclude"):
        assert f"{flag} is not supported by back end 'kubernetes'" in text
    assert engine.store.list_jobs() == []


def test_admission_takes_what_kubernetes_honours(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    record = engine.admit(_job({"exclude": "n1", "constraint": "ib", "time_limit_minutes": 5,
                                "mem_per_node_mb": 100}), ALICE)
    assert record.id >= 1


def test_the_compatibility_table_is_current() -> None:
    """docs/sbatch-compat.md is what the code's tables say (regenerate it with
    ``python -m bridge.compat_table > docs/sbatch-compat.md``)."""
    assert DOC.read_text() == render()


def test_tbatch_knows_every_option_of_every_release() -> None:
    """Every sbatch option is taken or refused by name: none is 'unrecognized'."""
    known = set(BY_LONG) | set(refused_names())
    assert [n for n in all_names() if n not in known] == []
    assert "**unknown**" not in render()
    assert set(RELEASES) == {"22.05", "24.11", "26.05"}


class _K8sTableBackend(FakeBackend):
    """The fake back end with Kubernetes' option table; ``found``: what lookup finds."""

    option_support = K8S
    runs_pods = True

    def __init__(self) -> None:
        super().__init__(inventory())
        self.found: list[BackendJob] = []

    async def lookup(self, job_uids: Collection[str]) -> list[BackendJob]:
        return [j for j in self.found if j.job_uid in job_uids]


async def test_a_job_taken_before_is_adopted_if_it_runs_and_never_submitted_if_not(
        tmp_path: Path) -> None:
    """A TrainJob CR a bridge took before (a new leader, a lost store) may be running
    under the rules it was admitted by: it is not refused (that would orphan its
    JobSet), but found or failed, never submitted with an option its back end refuses.
    Setting the door's finalizer on a new TrainJob therefore gains a user nothing."""
    backend = _K8sTableBackend()
    engine = Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": backend}, RuntimeCatalog(),
                    EngineSettings(default_backend="slurm"))
    service = JobService(engine, EventFeed(engine.store, interval=0.005))
    with pytest.raises(ValidationError):
        service.admit(_job({"output": "train.log", "qos": "q"}), ALICE)
    gone = service.admit(_job({"output": "train.log", "qos": "q"}), ALICE,
                         taken_before=True).record
    running = service.admit(load_trainjob({**_job({"qos": "q"}).to_dict(),
                                           "metadata": {"name": "t2", "annotations": {
                                               ANN_SCHEDULING: '{"qos": "q"}'}}}),
                            ALICE, taken_before=True).record
    assert "--qos is not supported" in gone.job.metadata.annotations[ANN_ADOPT_ONLY]
    backend.found = [BackendJob(job_uid=running.uid, backend_id="7",
                                state=BackendState.RUNNING)]
    await settle(engine)
    failed, adopted = engine.store.get(gone.id), engine.store.get(running.id)
    assert (failed.state, failed.reason) == (JobState.FAILED, "InvalidJob")
    assert "not submitted again" in failed.message and "--output" in failed.message
    assert adopted.state is JobState.RUNNING and adopted.backend_id == "7"
    assert backend.submitted == []
    # A client's own adopt-only annotation is dropped at admission.
    forged = _job({})
    forged.metadata.annotations[ANN_ADOPT_ONLY] = "x"
    assert ANN_ADOPT_ONLY not in service.admit(forged, ALICE).record.job.metadata.annotations


def test_a_back_end_without_a_table_still_refuses_the_options_only_slurm_honours() -> None:
    options = SchedulingOptions(mail_type="END", qos="q", output="o")
    with pytest.raises(ValidationError) as err:
        check_backend_options(options, "thirdparty", None, AdmitContext(), False)
    assert str(err.value).count("is not supported by back end 'thirdparty'") == 1
    assert "--mail-type" in str(err.value)


def test_a_refusal_names_a_field_no_option_sets() -> None:
    [found] = refusals(SchedulingOptions(submit_dir="/x"), {}, "new")
    assert found.startswith("the submitting directory (submit_dir) is not supported by "
                            "back end 'new'")


def _flux_engine(tmp_path: Path) -> Engine:
    return Engine(Store.open(tmp_path / "f.sqlite"), {"flux": create_flux("flux", {})},
                  RuntimeCatalog(), EngineSettings(default_backend="flux"))


@pytest.mark.parametrize(("runtime", "options", "words"), [
    ("torch-distributed", {"ntasks": 3}, "does not divide evenly over 2 nodes"),
    ("plain", {"submit_dir": "/home/alice/{{id}}"}, "'{{...}}'"),
    ("plain", {"exclude": ","}, "names no hosts"),
    ("plain", {"job_name": "x}}", "output": "%x-%j.out"}, "'}}'"),
])
def test_flux_refuses_at_admission_whatever_its_jobspec_cannot_say(
        tmp_path: Path, runtime: str, options: dict[str, Any], words: str) -> None:
    """Admission builds the jobspec (FluxBackend.validate): what submission would
    refuse is a 400 now, with nothing stored."""
    engine = _flux_engine(tmp_path)
    job = load_trainjob({"metadata": {"name": "t", "annotations": {
        ANN_SCHEDULING: json.dumps(options)}},
        "spec": {"runtimeRef": {"name": runtime},
                 "trainer": {"numNodes": 2, "command": ["true"]}}})
    with pytest.raises(ValidationError) as err:
        engine.admit(job, ALICE)
    assert words in str(err.value)
    assert engine.store.list_jobs() == []
