"""sbatch options passed to Slurm as they are (issue 12): tbatch reads and checks them,
they travel in the scheduling annotation, the Slurm back end hands them to sbatch, and
the engine refuses them for a back end that cannot honour them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError as PydanticError

from bridge.engine import Engine, EngineSettings
from bridge.model import ANN_SCHEDULING, TrainJob, ValidationError, load_trainjob
from bridge.runtimes import RuntimeCatalog
from bridge.sbatch import SbatchError, parse_tbatch, to_trainjob
from bridge.scheduling import SchedulingOptions, scheduling_of
from bridge.store import Store
from k8s_adapter.backend import create
from slurm_adapter.backend import job_from_slurm
from slurm_adapter.dialects import V0_0_38, UnsupportedOption
from slurm_adapter.script import job_spec, rest_job, sbatch_args
from tests.unit.builders import ALICE, UID, trainjob
from tests.unit.builders import submit_request as request

SCRIPT = (
    "#!/bin/sh\n"
    "#SBATCH --mail-type=end,fail --mail-user=alice@example.org\n"
    "#SBATCH --signal=B:USR1@60 --requeue --open-mode=a\n"
    "#SBATCH --comment='my run 7' --wckey=proj --reservation=r1 -L lic:2\n"
    "#SBATCH -b now+1hour --deadline=2030-01-01T00:00:00 --hint=nomultithread\n"
    "#SBATCH --mem-per-cpu=2G --gres=gpu:1 -m cyclic:block --tmp=100\n"
    "#SBATCH -G 2 --gpus-per-task=1 --cpus-per-gpu=4\n"
    "#SBATCH --no-requeue\n"
    "echo hi\n"
)

FLAGS = [
    "--no-requeue",
    "--mail-type=END,FAIL",
    "--mail-user=alice@example.org",
    "--signal=B:USR1@60",
    "--open-mode=append",
    "--wckey=proj",
    "--reservation=r1",
    "--licenses=lic:2",
    "--begin=now+1hour",
    "--deadline=2030-01-01T00:00:00",
    "--hint=nomultithread",
    "--mem-per-cpu=2048",
    "--gres=gpu:1",
    "--distribution=cyclic:block",
    "--tmp=100",
    "--gpus=2",
    "--gpus-per-task=1",
    "--cpus-per-gpu=4",
]


def tbatch_job() -> TrainJob:
    return to_trainjob(parse_tbatch(["job.sh"], SCRIPT), cwd="/home/alice", environ={})


def options() -> SchedulingOptions:
    return scheduling_of(tbatch_job())


def test_memory_options_exclude_each_other_as_in_sbatch() -> None:
    req = parse_tbatch(["--mem=1G", "--mem-per-gpu=1G", "job.sh"], "#!/bin/sh\n")
    with pytest.raises(SbatchError, match="--mem, --mem-per-cpu, and --mem-per-gpu are "):
        to_trainjob(req, cwd="/", environ={})


def test_tbatch_reads_them_into_the_annotation() -> None:
    o = options()
    assert (o.mail_type, o.signal, o.requeue, o.open_mode) == ("END,FAIL", "B:USR1@60",
                                                                False, "append")
    assert (o.comment, o.mem_per_cpu_mb, o.tmp_mb, o.gpus, o.cpus_per_gpu) == (
        "my run 7", 2048, 100, "2", 4)
    assert o.slurm_only()[:3] == ["--no-requeue", "--mail-type", "--mail-user"]


def test_the_slurm_back_end_hands_them_to_sbatch() -> None:
    spec = job_spec(request(tbatch_job(), options()), default_chdir="/home/alice")
    args = sbatch_args(spec)
    assert f"--comment=hpc-bridge:{UID} my run 7" in args
    assert args[-len(FLAGS):] == FLAGS
    with pytest.raises(UnsupportedOption, match="through sbatch"):
        rest_job(spec, {"PATH": "/bin"}, V0_0_38)  # the back end falls back to sbatch


def test_the_key_is_read_back_before_the_users_comment() -> None:
    raw = {"comment": f"hpc-bridge:{UID} my run 7", "job_id": 5, "job_state": "PENDING",
           "user_id": 1000}
    found = job_from_slurm(raw, V0_0_38)
    assert found is not None and found.job_uid == UID
    assert job_from_slurm({**raw, "comment": "hpc-bridge: x"}, V0_0_38) is None


def test_the_daemon_checks_the_annotation_as_tbatch_does() -> None:
    job = trainjob()
    job.metadata.annotations[ANN_SCHEDULING] = '{"mail_type": "SOMETIMES", "tmp_mb": -1}'
    with pytest.raises(ValidationError) as err:
        scheduling_of(job)
    assert "mail_type" in str(err.value) and "tmp_mb" in str(err.value)


def test_another_back_end_refuses_them_at_admission(tmp_path: Path) -> None:
    backend = create("kubernetes", {"kubeconfig": "/nonexistent", "users": {
        "alice": {"namespace": "team-a", "service_account": "alice"}}})
    engine = Engine(Store.open(tmp_path / "s.sqlite"), {"kubernetes": backend},
                    RuntimeCatalog(), EngineSettings(default_backend="kubernetes"))
    job = load_trainjob({"metadata": {"name": "t", "annotations": {
        ANN_SCHEDULING: '{"mail_type": "END", "requeue": true}'}},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": 1, "image": "busybox", "command": ["true"]}}})
    with pytest.raises(ValidationError) as err:
        engine.admit(job, ALICE)
    text = str(err.value)
    assert "--mail-type is not supported by back end 'kubernetes'" in text
    assert "--requeue is not supported by back end 'kubernetes'" in text
    assert engine.store.list_jobs() == []


def test_a_node_range_goes_to_slurm_as_a_range() -> None:
    from slurm_adapter.dialects import V0_0_41

    def tbatch(nodes: str) -> TrainJob:
        return to_trainjob(parse_tbatch(["-N", nodes, "job.sh"], "#!/bin/sh\n"), cwd="/",
                           environ={})

    job = tbatch("1-3")
    o = scheduling_of(job)
    assert (job.spec.trainer and job.spec.trainer.num_nodes, o.max_nodes) == (1, 3)
    spec = job_spec(request(job, o), default_chdir="/")
    assert "--nodes=1-3" in sbatch_args(spec)
    body = rest_job(spec, {"PATH": "/bin"}, V0_0_41)
    assert (body["minimum_nodes"], body["maximum_nodes"]) == (1, 3)
    with pytest.raises(UnsupportedOption):  # v0.0.38: submitted with sbatch
        rest_job(spec, {"PATH": "/bin"}, V0_0_38)
    for exact in ("2", "2-2", "2-"):
        assert scheduling_of(tbatch(exact)).max_nodes is None
    assert o.slurm_only() == ["--nodes=MIN-MAX (a range, at most 3)"]


def test_slurmrestd_gets_the_fields_it_has_from_v0_0_40() -> None:
    from slurm_adapter.dialects import V0_0_41, V0_0_45

    script = ("#!/bin/sh\n#SBATCH --mail-type=END,TIME_LIMIT_90 --mail-user=a@b --requeue\n"
              "#SBATCH --open-mode=t --mem-per-cpu=1G -m cyclic --comment=hi\n")
    job = to_trainjob(parse_tbatch(["job.sh"], script), cwd="/", environ={})
    spec = job_spec(request(job, scheduling_of(job)), default_chdir="/")
    for dialect in (V0_0_41, V0_0_45):
        body = rest_job(spec, {"PATH": "/bin"}, dialect)
        assert {k: body[k] for k in ("mail_type", "mail_user", "requeue", "open_mode",
                                     "memory_per_cpu", "distribution", "comment")} == {
            "mail_type": ["END", "TIME=90%"], "mail_user": "a@b", "requeue": True,
            "open_mode": ["TRUNCATE"], "distribution": "cyclic", "comment": f"hpc-bridge:{UID} hi",
            "memory_per_cpu": {"set": True, "infinite": False, "number": 1024}}
    with pytest.raises(UnsupportedOption):  # v0.0.38 has none of them: sbatch
        rest_job(spec, {"PATH": "/bin"}, V0_0_38)
    job = to_trainjob(parse_tbatch(["--wckey=w", "--reservation=r", "-L", "l:2", "--tmp=1G",
                                    "job.sh"], "#!/bin/sh\n"), cwd="/", environ={})
    body = rest_job(job_spec(request(job, scheduling_of(job)), default_chdir="/"),
                    {"PATH": "/bin"}, V0_0_41)
    assert (body["wckey"], body["reservation"], body["licenses"],
            body["temporary_disk_per_node"]) == ("w", "r", "l:2", 1024)
    for other in ("--mail-type=ALL", "--hint=multithread", "--begin=now"):
        job = to_trainjob(parse_tbatch([other, "job.sh"], "#!/bin/sh\n"), cwd="/", environ={})
        spec = job_spec(request(job, scheduling_of(job)), default_chdir="/")
        with pytest.raises(UnsupportedOption):  # no field here: sbatch reads it
            rest_job(spec, {"PATH": "/bin"}, V0_0_41)


@pytest.mark.parametrize(("field", "value"), [
    ("mail_user", "-Ssendmail=/tmp/x"),   # an option to the site's mail program
    ("mail_user", "|/tmp/run"),           # a pipe address
    ("mail_user", "a b"),
    ("begin", "--uid=0"),
    ("licenses", "-x"),
    ("comment", "a\x85b"),                # C1 control (NEL)
    ("comment", "red\x9b[31m"),           # 8-bit CSI: a terminal escape in squeue
    ("comment", "two\u2028lines"),
    ("comment", "x" * 977),               # with the bridge's key, beyond Slurm's 1024
    ("wckey", "a\u200bb"),                # format character
])
def test_the_daemon_refuses_hostile_values_of_passed_options(field: str, value: str) -> None:
    """What a hostile user could put in the scheduling annotation directly (tbatch's own
    checks are not a defence): refused at admission, naming the field."""
    with pytest.raises(PydanticError) as err:
        SchedulingOptions.model_validate({field: value})
    assert field in str(err.value)


def test_a_comment_of_the_longest_length_is_taken() -> None:
    assert SchedulingOptions.model_validate({"comment": "x" * 976}).comment == "x" * 976
