"""What each back end does with each scheduling option (bridge/option_support.py, issue
12 item 4): every option is honoured or refused at admission with the option and the
back end named, never ignored; the compatibility table is made from the same tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.backend import BackendRejected
from bridge.compat_table import render
from bridge.engine import Engine, EngineSettings
from bridge.model import ANN_SCHEDULING, ValidationError, load_trainjob
from bridge.option_support import (
    AdmitContext,
    Support,
    installed_tables,
    missing,
    refusals,
    set_fields,
)
from bridge.runtimes import RuntimeCatalog
from bridge.sbatch.manual import RELEASES, all_names
from bridge.sbatch.options import BY_LONG, refused_names
from bridge.scheduling import SchedulingOptions
from bridge.store import Store
from flux_adapter.backend import create as create_flux
from flux_adapter.options import SUPPORT as FLUX
from k8s_adapter.backend import create as create_k8s
from k8s_adapter.options import SUPPORT as K8S
from slurm_adapter.options import SUPPORT as SLURM
from tests.unit.builders import ALICE, submit_request, trainjob

DOC = Path(__file__).resolve().parents[2] / "docs" / "sbatch-compat.md"
NODELIST = AdmitContext(placement="nodelist")

#: One value for every field, each as tbatch would store it.
EVERY: dict[str, Any] = {
    "job_name": "j", "partition": "debug", "account": "a", "qos": "q",
    "time_limit_minutes": 5, "ntasks": 2, "ntasks_per_node": 2, "cpus_per_task": 1,
    "gpus_per_node": 1, "mem_per_node_mb": 100, "output": "o-%j", "error": "e-%j",
    "chdir": "/tmp", "submit_dir": "/tmp", "exclusive": True, "switches": 1,
    "switches_wait_minutes": 2, "export": "ALL", "nodelist": "n1", "exclude": "n2",
    "constraint": "ib", "mail_type": "END", "mail_user": "a@b", "signal": "USR1@60",
    "requeue": True, "open_mode": "append", "comment": "c", "wckey": "w",
    "reservation": "r", "licenses": "l", "begin": "now", "deadline": "now+1hour",
    "hint": "nomultithread", "mem_per_cpu_mb": 10, "gres": "gpu:1",
    "distribution": "block", "tmp_mb": 1, "gpus": "1", "gpus_per_task": "1",
    "cpus_per_gpu": 1, "mem_per_gpu_mb": 1, "max_nodes": 3, "dependency": "afterok:1",
    "kill_on_invalid_dep": True, "hold": True,
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
    ({"constraint": "a:b"}, "--constraint", "'a:b' is not a Kubernetes node label"),
    ({"constraint": "zone=-x"}, "--constraint", "not a Kubernetes node label"),
    ({"switches": 1}, "--switches", 'placement = "nodelist"'),
    ({"ntasks": 3}, "--ntasks", "do not divide evenly over 2 pods"),
    ({"mail_type": "END"}, "--mail-type", "only Slurm"),
    ({"max_nodes": 4}, "--nodes=MIN-MAX (a range, at most 4)", "only Slurm"),
])
def test_kubernetes_refuses_what_a_pod_cannot_do(options: dict[str, Any], flag: str,
                                                  words: str) -> None:
    found = refusals(SchedulingOptions.model_validate(options), K8S, "kubernetes",
                     AdmitContext(nodes=2))
    assert len(found) == 1
    assert found[0].startswith(f"{flag} is not supported by back end 'kubernetes': ")
    assert words in found[0]


def test_kubernetes_honours_switches_when_it_pins_pods() -> None:
    options = SchedulingOptions(switches=1, switches_wait_minutes=5)
    assert refusals(options, K8S, "kubernetes", NODELIST) == []
    assert len(refusals(options, K8S, "kubernetes")) == 2


@pytest.mark.parametrize("ctx", [NODELIST, AdmitContext()])
def test_kubernetes_honours_exclude_and_label_constraints_in_every_mode(
        ctx: AdmitContext) -> None:
    options = SchedulingOptions(exclude="n[1-2]",
                                constraint="ib&topology.kubernetes.io/zone=a&gpu=")
    assert refusals(options, K8S, "kubernetes", ctx) == []


def test_kubernetes_takes_a_routed_partition_and_even_tasks() -> None:
    ctx = AdmitContext(routed_partitions=frozenset({"gpu"}), nodes=2)
    assert refusals(SchedulingOptions(partition="gpu", ntasks=4), K8S, "kubernetes", ctx) == []
    assert refusals(SchedulingOptions(ntasks=3, ntasks_per_node=2), K8S, "kubernetes",
                    ctx) == []
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


def _engine(tmp_path: Path, placement: str = "constraints") -> Engine:
    backend = create_k8s("kubernetes", {"kubeconfig": "/nonexistent", "users": {
        "alice": {"namespace": "team-a", "service_account": "alice"}}})
    return Engine(Store.open(tmp_path / "s.sqlite"), {"kubernetes": backend},
                  RuntimeCatalog(), EngineSettings(default_backend="kubernetes",
                                                   placement={"kubernetes": placement}))


def _job(options: dict[str, Any]) -> Any:
    return load_trainjob({"metadata": {"name": "t", "annotations": {
        ANN_SCHEDULING: json.dumps(options)}},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": 1, "image": "busybox", "command": ["true"]}}})


def test_admission_refuses_every_option_at_once_and_stores_nothing(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    with pytest.raises(ValidationError) as err:
        engine.admit(_job({"qos": "q", "output": "o", "switches": 1}), ALICE)
    text = str(err.value)
    for flag in ("--qos", "--output", "--switches"):
        assert f"{flag} is not supported by back end 'kubernetes'" in text
    assert engine.store.list_jobs() == []


def test_admission_reads_the_back_ends_placement_mode(tmp_path: Path) -> None:
    engine = _engine(tmp_path, placement="nodelist")
    record = engine.admit(_job({"switches": 1, "exclude": "n1", "constraint": "ib"}), ALICE)
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
