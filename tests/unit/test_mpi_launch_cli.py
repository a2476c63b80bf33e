"""The mpi-launch entry point, the launch plan, the batch-script invocation and the port rule."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpi_launch.__main__ import default_hostfile_dir, main, read_allocation
from mpi_launch.allocation import Allocation, Host, from_host_list
from mpi_launch.plan import LaunchOptions, PlanError, launch_invocation, plan_launch, torch_argv
from mpi_launch.rankenv import PORT_RANGE, master_port

REPO = Path(__file__).resolve().parents[2]
SLURM = {"SLURM_JOB_ID": "56", "SLURM_JOB_NODELIST": "node[1-2]",
         "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_NODEID": "0"}


def run_cli(*args: str, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m mpi_launch`` in a clean environment (plus ``env``)."""
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO),
            "LANG": "C.UTF-8"}
    return subprocess.run([sys.executable, "-m", "mpi_launch", *args], env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=60, check=False, cwd=cwd)


# --------------------------------------------------------------------------- errors


R_MISSING_NODELIST = json.dumps({"version": 1, "execution": {
    "R_lite": [{"rank": "0-1", "children": {"core": "0-3", "gpu": "0"}}],
    "starttime": 0, "expiration": 0}})


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--runtime", "mpi"], {**SLURM, "SLURM_JOB_NODELIST": "node[1-"},
         "SLURM_JOB_NODELIST='node[1-': unclosed bracket at position 4"),
        (["--runtime", "mpi"], {**SLURM, "SLURM_TASKS_PER_NODE": "-1,2"},
         "SLURM_TASKS_PER_NODE='-1,2': '-1': counts must be positive"),
        (["--runtime", "mpi"], {**SLURM, "SLURM_JOB_NODELIST": "node[01-04]",
                                "SLURM_TASKS_PER_NODE": "72(x2),36"},
         "SLURM_TASKS_PER_NODE='72(x2),36': gives 3 counts for 4 hosts"),
        (["--runtime", "mpi", "--flux-r", "R.json"], {"FLUX_JOB_ID": "f1"},
         "R.json.execution.nodelist=unset: missing"),
        (["--runtime", "torch"], {"JOB_COMPLETION_INDEX": "5", "JOBSET_NAME": "js",
                                  "PET_NNODES": "2"},
         "JOB_COMPLETION_INDEX='5': outside the 2 node pods"),
        (["--runtime", "plain", "--hosts", "a:0"], {}, "--hosts='a:0': 'a:0': slots must be"),
        (["--runtime", "jax", "--hosts", "a:2,b:2"], {}, "--runtime jax runs one process"),
        (["--runtime", "mpi", "--launcher", "srun", "--hosts", "a"], {},
         "--launcher srun needs a Slurm allocation"),
        (["--runtime", "mpi", "--nproc-per-node", "0"], SLURM, "--nproc-per-node 0"),
        (["--runtime", "jax", "--direct"], SLURM, "--direct is for --runtime torch"),
        (["--runtime", "nope"], {}, "argument --runtime: invalid choice: 'nope'"),
        (["--runtime", "mpi", "--nproc-per-node", "two"], {}, "invalid int value: 'two'"),
        (["--bogus"], {}, "the following arguments are required: --runtime"),
    ],
)
def test_malformed_input_exits_2_with_one_line(args: list[str], env: dict[str, str],
                                                message: str, tmp_path: Path) -> None:
    (tmp_path / "R.json").write_text(R_MISSING_NODELIST)
    res = run_cli(*args, "--", "true", env=env, cwd=tmp_path)
    assert res.returncode == 2, res
    assert res.stdout == ""
    assert "Traceback" not in res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("mpi-launch: error: ")
    assert message in lines[0]


def test_missing_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--runtime", "plain", "--hosts", "a"]) == 2
    assert main(["--runtime", "plain", "--hosts", "a", "--"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["mpi-launch: error: no command: put it after '--' "
                   "(mpi-launch ... -- COMMAND ARGS)"] * 2


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "--runtime" in capsys.readouterr().out


def test_unrunnable_program_exits_127() -> None:
    res = run_cli("--runtime", "plain", "--hosts", "a", "--", "no-such-program-here")
    assert res.returncode == 127
    assert res.stderr.strip() == ("mpi-launch: error: cannot run 'no-such-program-here': "
                                  "No such file or directory")


# --------------------------------------------------------------------------- dry run, exec


def test_dry_run_prints_hostfile_env_and_argv(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    for key in list(os.environ):
        if key.startswith(("SLURM_", "FLUX_", "JOB_COMPLETION", "JOBSET_")):
            monkeypatch.delenv(key)
    for key, value in SLURM.items():
        monkeypatch.setenv(key, value)
    code = main(["--runtime", "mpi", "--hostfile-dir", str(tmp_path), "--dry-run", "--",
                 "python3", "-c", "print('hi there')"])
    out = capsys.readouterr().out
    assert code == 0
    hostfile = f"{tmp_path}/hostfile.openmpi"
    assert out.splitlines() == [
        "# world: slurm  job: 56  nodes: node[1-2] (2)  node rank: 0",
        f"# hostfile: {hostfile}", "node1 slots=2", "node2 slots=2",
        "# environment", "MPI_LAUNCH_JOB_ID=56", "MPI_LAUNCH_NNODES=2",
        "MPI_LAUNCH_NODELIST='node[1-2]'", "MPI_LAUNCH_NODE_RANK=0", "MPI_LAUNCH_WORLD=slurm",
        f"OMPI_MCA_orte_default_hostfile={hostfile}", f"PRTE_MCA_prte_default_hostfile={hostfile}",
        "# exec", f"mpirun --hostfile {hostfile} -np 4 python3 -c 'print('\"'\"'hi there'\"'\"')'",
    ]
    assert not list(tmp_path.iterdir())  # a dry run writes nothing


def test_exec_writes_hostfile_and_passes_env(tmp_path: Path) -> None:
    fake = tmp_path / "fake-mpirun"
    record = tmp_path / "record.json"
    fake.write_text("#!" + sys.executable + "\nimport json, os, sys\n"
                    f"json.dump({{'argv': sys.argv[1:], 'env': dict(os.environ)}}, "
                    f"open({str(record)!r}, 'w'))\n")
    fake.chmod(0o755)
    hostdir = tmp_path / "hf"
    res = run_cli("--runtime", "mpi", "--hosts", "a:2,b.example:3", "--hostfile-dir",
                  str(hostdir), "--mpirun", str(fake), "--", "app", "x y")
    assert res.returncode == 0, res.stderr
    seen = json.loads(record.read_text())
    hostfile = hostdir / "hostfile.openmpi"
    assert seen["argv"] == ["--hostfile", str(hostfile), "-np", "5", "app", "x y"]
    assert hostfile.read_text() == "a slots=2\nb.example slots=3\n"
    assert seen["env"]["OMPI_MCA_orte_default_hostfile"] == str(hostfile)
    assert seen["env"]["PRTE_MCA_prte_keep_fqdn_hostnames"] == "true"
    assert seen["env"]["MPI_LAUNCH_NODELIST"] == "a,b.example"
    assert seen["env"]["PATH"]  # the inherited environment is kept


def test_mpi_on_other_nodes_exits_0_without_running() -> None:
    res = run_cli("--runtime", "mpi", "--", "false", env={**SLURM, "SLURM_NODEID": "1"})
    assert res.returncode == 0
    assert res.stderr.strip() == ("mpi-launch: node rank 1: the MPI launcher runs on node "
                                  "rank 0 only; nothing to run here")


def test_plain_execs_the_command_with_the_common_env() -> None:
    res = run_cli("--runtime", "plain", "--hosts", "a:2,b:2", "--node-rank", "1", "--",
                  sys.executable, "-c",
                  "import os; print(os.environ['MPI_LAUNCH_NODE_RANK'], "
                  "os.environ['MPI_LAUNCH_NODELIST'])")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "1 a,b\n"


def test_default_hostfile_dir_must_be_private(tmp_path: Path) -> None:
    alloc = from_host_list("a:2", job_id="j/1")
    path = default_hostfile_dir(alloc, {"TMPDIR": str(tmp_path)})
    assert path == f"{tmp_path}/mpi-launch-{os.getuid()}-j_1"
    os.makedirs(path)
    os.chmod(path, 0o777)
    res = run_cli("--runtime", "mpi", "--hosts", "a:2", "--mpirun", "true", "--", "x",
                  env={"TMPDIR": str(tmp_path), "MPI_LAUNCH_JOB_ID": "j/1"})
    assert res.returncode == 2
    assert "not a private directory of this user" in res.stderr


def test_read_allocation_world_selection(tmp_path: Path) -> None:
    assert read_allocation("auto", SLURM).world == "slurm"
    assert read_allocation("auto", SLURM, hosts="x:2").world == "local"
    assert read_allocation("local", {}, hostname="me").names == ["me"]
    r = tmp_path / "R"
    r.write_text(json.dumps({"version": 1, "execution": {
        "R_lite": [{"rank": "0-1", "children": {"core": "0-3"}}], "nodelist": ["f[1-2]"]}}))
    flux = read_allocation("auto", {"FLUX_JOB_ID": "fA", "FLUX_TASK_RANK": "5",
                                    "FLUX_TASK_LOCAL_ID": "1"}, flux_r=str(r), hostname="f2")
    assert (flux.world, flux.node_rank, flux.proc_rank, flux.local_rank) == ("flux", 1, 5, 1)


# --------------------------------------------------------------------------- plans


def alloc2(**kw: object) -> Allocation:
    base: dict[str, object] = {"world": "slurm", "job_id": "9",
                               "hosts": (Host("n1", 2), Host("n2", 2))}
    base.update(kw)
    return Allocation(**base)  # type: ignore[arg-type]


def test_mpi_plans_per_flavour_and_launcher() -> None:
    cmd = ("app",)
    mpich = plan_launch(alloc2(), LaunchOptions("mpi", cmd, mpi="mpich"), "/d")
    assert mpich.argv == ("mpiexec", "-f", "/d/hostfile.mpich", "-n", "4", "app")
    assert mpich.hostfile_text == "n1:2\nn2:2\n"
    srun = plan_launch(alloc2(), LaunchOptions("mpi", cmd, launcher="srun"), "/d")
    assert srun.argv == ("srun", "--mpi=pmix", "--nodes=2", "--ntasks=4",
                         "--ntasks-per-node=2", "--kill-on-bad-exit=1", "app")
    assert srun.hostfile_path is None
    uneven = alloc2(hosts=(Host("n1", 3), Host("n2", 1)))
    intel = plan_launch(uneven, LaunchOptions("mpi", cmd, mpi="intel"), "/d")
    assert intel.argv == ("mpiexec", "-machinefile", "/d/hostfile.intel", "-n", "4", "app")
    srun_mpich = plan_launch(uneven, LaunchOptions("mpi", cmd, mpi="mpich", launcher="srun"),
                             "/d")
    assert srun_mpich.argv == ("srun", "--mpi=pmi2", "--nodes=2", "--ntasks=4",
                               "--kill-on-bad-exit=1", "app")
    more = plan_launch(alloc2(), LaunchOptions("mpi", cmd, nproc_per_node=3), "/d")
    assert more.argv[:5] == ("mpirun", "--hostfile", "/d/hostfile.openmpi", "-np", "6")


def test_per_rank_runtimes_need_a_rank() -> None:
    with pytest.raises(PlanError, match="nothing tells this process its rank"):
        plan_launch(alloc2(), LaunchOptions("xgboost", ("x",)), "/d")
    one = plan_launch(alloc2(node_rank=1), LaunchOptions("xgboost", ("x",), nproc_per_node=1),
                      "/d")
    assert one.env["DMLC_TASK_ID"] == "1" and one.env["DMLC_NUM_WORKER"] == "2"
    with pytest.raises(PlanError, match="rank 7 outside the 4 slots"):
        plan_launch(alloc2(proc_rank=7), LaunchOptions("jax", ("x",)), "/d")
    derived = plan_launch(alloc2(node_rank=1, proc_rank=3), LaunchOptions(
        "torch", ("x",), direct=True), "/d")
    assert derived.env["LOCAL_RANK"] == "1" and derived.env["WORLD_SIZE"] == "4"


def test_torch_nproc_defaults_to_gpus_then_slots() -> None:
    gpus = plan_launch(alloc2(hosts=(Host("n1", 1, 8), Host("n2", 1, 8))),
                       LaunchOptions("torch", ("t.py",)), "/d")
    assert gpus.env["PET_NPROC_PER_NODE"] == "8"
    slots = plan_launch(alloc2(), LaunchOptions("torch", ("t.py",)), "/d")
    assert slots.env["PET_NPROC_PER_NODE"] == "2"
    given = plan_launch(alloc2(hosts=(Host("n1", 1, 8), Host("n2", 1, 8))),
                        LaunchOptions("torch", ("t.py",), nproc_per_node=2), "/d")
    assert given.env["PET_NPROC_PER_NODE"] == "2"


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        (["train.py", "--lr", "1"], ["torchrun", "OPTS", "train.py", "--lr", "1"]),
        (["-m", "pkg.train", "a"], ["torchrun", "OPTS", "-m", "pkg.train", "a"]),
        (["python3", "train.py"], ["python3", "-m", "torch.distributed.run", "OPTS",
                                   "train.py"]),
        (["/opt/venv/bin/python", "-u", "-X", "dev", "-m", "pkg"],
         ["/opt/venv/bin/python", "-u", "-X", "dev", "-m", "torch.distributed.run", "OPTS",
          "-m", "pkg"]),
        (["python", "-c", "print(1)"], ["torchrun", "OPTS", "--no-python", "python", "-c",
                                        "print(1)"]),
        (["./run.sh", "x"], ["torchrun", "OPTS", "--no-python", "./run.sh", "x"]),
    ],
)
def test_torch_argv(command: list[str], argv: list[str]) -> None:
    opts = ["--nnodes=2", "--nproc-per-node=4", "--node-rank=1", "--master-addr=n1",
            "--master-port=29500"]
    expected = [a for x in argv for a in (opts if x == "OPTS" else [x])]
    assert torch_argv(command, nnodes=2, nproc_per_node=4, node_rank=1, master_addr="n1",
                      port=29500) == expected


# --------------------------------------------------------------------------- invocation


def test_launch_invocation_per_runtime() -> None:
    assert launch_invocation("mpi", "openmpi", 2, 2) == [
        "mpi-launch", "--runtime", "mpi", "--mpi", "openmpi", "--nproc-per-node", "2"]
    assert launch_invocation("mpi", None, 2, None) == [
        "mpi-launch", "--runtime", "mpi", "--mpi", "openmpi"]
    assert launch_invocation("torch", None, 2, 2) == [
        "srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--cpu-bind=none",
        "--kill-on-bad-exit=1", "mpi-launch", "--runtime", "torch", "--nproc-per-node", "2"]
    assert launch_invocation("jax", None, 3, 1, executable="/v/bin/mpi-launch") == [
        "srun", "--nodes=3", "--ntasks=3", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
        "/v/bin/mpi-launch", "--runtime", "jax", "--nproc-per-node", "1"]
    assert launch_invocation("plain", None, 2, None) == [
        "srun", "--nodes=2", "--kill-on-bad-exit=1", "mpi-launch", "--runtime", "plain"]
    with pytest.raises(ValueError, match="unknown runtime"):
        launch_invocation("deepspeed", None, 1, 1)
    with pytest.raises(ValueError, match="nodes must be >= 1"):
        launch_invocation("torch", None, 0, 1)


# --------------------------------------------------------------------------- port rule


def test_master_port_rule() -> None:
    a = alloc2(job_id="1234")
    assert PORT_RANGE[0] <= master_port(a) <= PORT_RANGE[1] < 32768  # not an ephemeral port
    assert master_port(a) == master_port(alloc2(job_id="1234", node_rank=1))  # every node agrees
    ports = {master_port(alloc2(job_id=str(j))) for j in range(1000)}
    assert len(ports) > 940  # distinct jobs rarely share a port (about 961 expected)
    assert master_port(alloc2(job_id="1234", step="0")) != master_port(a)
    assert master_port(alloc2(resv_ports=(12000, 12001))) == 12000
    plan = plan_launch(a, LaunchOptions("torch", ("t.py",), master_port=29500), "/d")
    assert plan.env["PET_MASTER_PORT"] == "29500"


# --------------------------------------------------------------------------- stdlib only


def test_mpi_launch_imports_only_the_standard_library() -> None:
    for path in sorted((REPO / "mpi_launch").glob("*.py")):
        assert path.stem != "utils"
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top == "mpi_launch" or top in sys.stdlib_module_names or (
                    top == "__future__"), f"{path.name} imports {name}"


@pytest.mark.parametrize("first", ["mpirun", "/usr/bin/mpiexec", "deepspeed"])
def test_a_command_that_is_itself_an_mpi_launcher_runs_as_it_is(first: str) -> None:
    cmd = (first, "-np", "4", "python3", "x.py")
    plan = plan_launch(alloc2(), LaunchOptions("mpi", cmd), "/d")
    assert plan.argv == cmd
    assert plan.env["OMPI_MCA_orte_default_hostfile"] == "/d/hostfile.openmpi"
    assert plan.hostfile_text is not None


def test_launcher_none_sets_everything_and_runs_the_command_once() -> None:
    cmd = ("/job/script.sh", "a b")
    mpi = plan_launch(alloc2(), LaunchOptions("mpi", cmd, launcher="none"), "/d")
    assert mpi.argv == cmd and "HYDRA_HOST_FILE" not in mpi.env
    assert mpi.env["PRTE_MCA_prte_default_hostfile"] == "/d/hostfile.openmpi"
    torch = plan_launch(alloc2(), LaunchOptions("torch", cmd, launcher="none",
                                                nproc_per_node=2), "/d")
    assert torch.argv == cmd
    assert torch.env["PET_NNODES"] == "2" and torch.env["PET_NPROC_PER_NODE"] == "2"


def test_torchrun_commands_run_unchanged_with_pet_variables() -> None:
    for cmd in (("torchrun", "train.py"), ("/venv/bin/torchrun", "--standalone", "t.py"),
                ("python3", "-m", "torch.distributed.run", "t.py")):
        plan = plan_launch(alloc2(), LaunchOptions("torch", cmd, nproc_per_node=2), "/d")
        assert plan.argv == cmd
        assert plan.env["PET_NODE_RANK"] == "0"


def test_launch_invocation_passes_the_launcher() -> None:
    assert launch_invocation("mpi", "openmpi", 2, None, launcher="none")[-2:] == [
        "--launcher", "none"]
    with pytest.raises(ValueError, match="unknown launcher"):
        launch_invocation("mpi", "openmpi", 2, None, launcher="ssh")


def test_mpich_uses_the_mpiexec_beside_the_program_and_hydra_slurm(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch
                                                                    ) -> None:
    monkeypatch.delenv("HYDRA_LAUNCHER", raising=False)
    (tmp_path / "python3").touch(mode=0o755)
    (tmp_path / "mpiexec").touch(mode=0o755)
    cmd = (str(tmp_path / "python3"), "x.py")
    plan = plan_launch(alloc2(), LaunchOptions("mpi", cmd, mpi="mpich"), "/d")
    assert plan.argv[0] == str(tmp_path / "mpiexec")
    assert plan.env["HYDRA_LAUNCHER"] == "slurm"
    # Open MPI keeps mpirun; a relative program keeps the PATH lookup.
    assert plan_launch(alloc2(), LaunchOptions("mpi", cmd), "/d").argv[0] == "mpirun"
    assert plan_launch(alloc2(), LaunchOptions("mpi", ("python3",), mpi="mpich"),
                       "/d").argv[0] == "mpiexec"
    monkeypatch.setenv("HYDRA_LAUNCHER", "ssh")
    assert "HYDRA_LAUNCHER" not in plan_launch(
        alloc2(), LaunchOptions("mpi", cmd, mpi="mpich"), "/d").env
