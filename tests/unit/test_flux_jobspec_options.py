"""flux_adapter.jobspec: options the Flux back end cannot honour are refused by name, every
runtime takes every supported option, and hypothesis-generated requests give canonical
jobspecs (:func:`tests.unit.flux_jobspec_helpers.check_v1`) or named refusals (the
jobspec's layouts, attributes and goldens: test_flux_jobspec.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.backend import BackendRejected, SubmitRequest
from bridge.model import TrainJob
from bridge.scheduling import SchedulingOptions
from bridge.slurm_options import PASSED
from flux_adapter.jobspec import (
    OPTION_MAP,
    UID_ATTRIBUTE,
    build_jobspec,
    uid_from_name,
)
from tests.unit.builders import UID, submit_request, trainjob
from tests.unit.flux_jobspec_helpers import (
    MPI_LAUNCH,
    SCRIPT,
    build,
    check_v1,
    command_of,
    request,
    shell,
)

RUNTIMES = ["plain", "torch-distributed", "mpi-distributed", "deepspeed-distributed",
            "jax-distributed", "xgboost-distributed"]


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(("options", "flag", "words"), [
    (SchedulingOptions(qos="high"), "--qos=high", "Slurm QOS"),
    (SchedulingOptions(mem_per_node_mb=4000), "--mem=4000", "memory"),
    (SchedulingOptions(switches=1), "--switches=1", "leaf switches"),
    (SchedulingOptions(switches=1, switches_wait_minutes=5), "--switches=1", "leaf switches"),
    (SchedulingOptions(constraint="[a|b]"), "--constraint", "no Flux equivalent"),
    (SchedulingOptions(constraint="a&b|c"), "--constraint", "mixed"),
    (SchedulingOptions(constraint="a*2"), "--constraint", "counts"),
    # Admission refuses it now; a row an older daemon admitted may still carry it.
    (SchedulingOptions.model_construct(nodelist="n[1-"), "--nodelist", "bracket"),
    (SchedulingOptions(output="x-%N"), "%N", "Flux has no equivalent"),
])
def test_refused_options_name_the_option(options: SchedulingOptions, flag: str,
                                         words: str) -> None:
    with pytest.raises(BackendRejected) as info:
        build(request(trainjob("plain", command=["true"]), options))
    message = str(info.value)
    assert message.startswith("flux back end: ")
    assert flag in message and words in message


def test_several_refused_options_are_named_together() -> None:
    with pytest.raises(BackendRejected) as info:
        build(request(trainjob("plain", command=["true"]),
                      SchedulingOptions(qos="q", mem_per_node_mb=1)))
    assert "--qos=q" in str(info.value) and "--mem=1" in str(info.value)


@pytest.mark.parametrize(("job", "options", "match"), [
    (trainjob("plain", command=["echo", "{{id}}"]), SchedulingOptions(), r"command\[1\]"),
    (trainjob("plain", script=SCRIPT, args=["{{tmpdir}}"]), SchedulingOptions(),
     "script argument"),
    (trainjob("plain", command=["true"]), SchedulingOptions(chdir="/x/{{name}}"), "--chdir"),
    (trainjob("plain", script="echo no shebang\n"), SchedulingOptions(), "#!"),
    (trainjob("plain", command=["-rf"]), SchedulingOptions(), "starts with '-'"),
])
def test_other_refusals(job: TrainJob, options: SchedulingOptions, match: str) -> None:
    with pytest.raises(BackendRejected, match=match):
        build(request(job, options))


def test_every_option_is_mapped_or_refused() -> None:
    fields = set(SchedulingOptions.model_fields)
    refused = {"qos", "mem_per_node_mb", "switches", "switches_wait_minutes"}
    slurm_only = {*PASSED, "requeue", "max_nodes"}  # refused at admission, and by the jobspec
    assert fields == set(OPTION_MAP) | refused | slurm_only


def test_options_only_slurm_honours_are_refused() -> None:
    with pytest.raises(BackendRejected, match="--mail-type: only Slurm honours it"):
        req = submit_request(trainjob(command=["true"]), SchedulingOptions(mail_type="END"))
        build_jobspec(req, default_cwd="/")


# --------------------------------------------------------------------------- every combination

SUPPORTED: dict[str, Any] = {
    "job_name": "jn", "partition": "pq", "account": "acct", "time_limit_minutes": 5,
    "ntasks_per_node": 2, "cpus_per_task": 3, "gpus_per_node": 2, "output": "o-%j.%x",
    "error": "e-%j", "chdir": "/tmp/w", "exclusive": True, "export": "NONE",
    "nodelist": "c[1-4]", "exclude": "c9", "constraint": "ib",
}


@pytest.mark.parametrize("option", sorted(SUPPORTED))
@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("mode", ["command", "script"])
def test_every_runtime_and_option(runtime: str, option: str, mode: str) -> None:
    script = SCRIPT if mode == "script" else None
    command = None if script else (["deepspeed", "t.py"] if runtime.startswith("deepspeed")
                                   else ["python", "t.py"])
    job = trainjob(runtime, nodes=2, command=command, script=script)
    js = build(request(job, SchedulingOptions(**{option: SUPPORTED[option]})))
    assert js["resources"][0]["type"] == "node" and js["resources"][0]["count"] == 2


def test_all_supported_options_at_once_on_every_runtime() -> None:
    for runtime in RUNTIMES:
        command = ["deepspeed", "t.py"] if runtime.startswith("deepspeed") else ["./t"]
        js = build(request(trainjob(runtime, nodes=2, command=command),
                           SchedulingOptions(**SUPPORTED)))
        system = js["attributes"]["system"]
        assert system["duration"] == 300.0 and system["queue"] == "pq"


# --------------------------------------------------------------------------- hypothesis

_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")), min_size=1,
                 max_size=20)
_words = st.lists(_names, min_size=1, max_size=4)


@st.composite
def requests(draw: st.DrawFn) -> tuple[SubmitRequest, SchedulingOptions]:
    runtime = draw(st.sampled_from(RUNTIMES))
    nodes = draw(st.integers(1, 16))
    procs = draw(st.one_of(st.none(), st.integers(1, 8), st.just("auto")))
    mode = draw(st.sampled_from(["command", "launcher", "script"]))
    script = None
    command: list[str] | None = None
    if mode == "script":
        script = "#!/bin/sh\n" + draw(st.text(st.characters(codec="utf-8",
                                                           exclude_characters="\x00"),
                                             max_size=200))
    elif mode == "launcher":
        command = [draw(st.sampled_from(["mpirun", "mpiexec", "deepspeed"])), *draw(_words)]
    else:
        command = [draw(st.from_regex(r"[a-z./][a-z0-9./_]{0,15}", fullmatch=True)),
                   *draw(st.lists(_names, max_size=3))]
    job = trainjob(runtime, nodes=nodes, procs=procs, command=command, script=script,
                   args=draw(st.lists(_names, max_size=3)),
                   env=draw(st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}",
                                                          fullmatch=True), _names,
                                            max_size=3)))
    opts: dict[str, Any] = {}
    if draw(st.booleans()):
        opts["ntasks"] = draw(st.integers(1, 64))
    if draw(st.booleans()):
        opts["ntasks_per_node"] = draw(st.integers(1, 8))
    for key, strategy in [
        ("cpus_per_task", st.integers(1, 8)), ("gpus_per_node", st.integers(0, 8)),
        ("time_limit_minutes", st.integers(1, 10_000)), ("partition", st.sampled_from(
            ["batch", "debug"])), ("account", st.sampled_from(["a", "b"])),
        ("job_name", st.from_regex(r"[A-Za-z0-9_.-]{1,12}", fullmatch=True)),
        ("output", st.sampled_from(["o-%j.out", "%x.%u.%j", "x%%y", "%N.out", "{{id}}"])),
        ("error", st.sampled_from(["e-%j", "/abs/%x"])), ("exclusive", st.booleans()),
        ("chdir", st.sampled_from(["/tmp", "/scratch/x"])),
        ("nodelist", st.sampled_from(["n[1-4]", "a,b", "n[1-"])),
        ("exclude", st.sampled_from(["n9", "x[1-2]"])),
        ("constraint", st.sampled_from(["ib", "a&b", "a|b", "[a|b]", "a*2"])),
        ("qos", st.just("high")), ("mem_per_node_mb", st.integers(1, 10_000)),
        ("switches", st.integers(1, 4)),
    ]:
        if draw(st.integers(0, 3)) == 0:
            opts[key] = draw(strategy)
    # Unvalidated: the renderer must refuse a malformed list itself (rows admitted
    # before admission checked host lists).
    options = SchedulingOptions.model_construct(**opts)
    return request(job, options), options


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_generated_requests_give_canonical_jobspecs_or_named_refusals(
        case: tuple[SubmitRequest, SchedulingOptions]) -> None:
    req, o = case
    must_refuse = (o.qos is not None or o.mem_per_node_mb is not None
                   or o.switches is not None)
    try:
        js = build_jobspec(req, default_cwd="/home/alice", mpi_launch=MPI_LAUNCH)
    except BackendRejected as exc:
        message = str(exc)
        assert message.startswith("flux back end: ")
        assert any(word in message for word in (
            "--qos", "--mem", "--switches", "--constraint", "--nodelist", "output",
            "--ntasks", "template", "'-'")), message
        return
    assert not must_refuse, "an option without a Flux equivalent was not refused"
    check_v1(js)
    system = js["attributes"]["system"]
    assert js["resources"][0]["count"] == req.plan.num_nodes
    assert system["duration"] == (o.time_limit_minutes or 0) * 60
    assert js["attributes"]["user"][UID_ATTRIBUTE] == UID
    assert uid_from_name(system["job"]["name"]) == UID
    command = command_of(js)
    if req.plan.batch_script is not None:
        assert system["files"]["script"]["data"] == req.plan.batch_script
        assert "{{tmpdir}}/script" in command
    else:
        user = [*req.plan.command, *req.plan.args]
        assert command[-len(user):] == user  # the user's argv, untouched, at the end
    tasks = shell(js).get("per-resource", {}).get("count", 1)
    cores = js["resources"][0]["with"][0]["with"][0]["count"]
    assert cores >= tasks * (o.cpus_per_task or 1) or tasks == 1

