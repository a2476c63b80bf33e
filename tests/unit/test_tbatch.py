"""``tbatch`` against the real API in process (:func:`tests.unit.conftest.api_client`):
the client sends what it was given (``POST /v1/sbatch``), the daemon parses it and
stores the job; user errors are the daemon's 400, printed as tbatch always printed them.
The command runs in a worker thread (it is synchronous) while the loop serves it.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from bridge.cli import tbatch_main
from bridge.model import ANN_BATCH_SCRIPT, ANN_SCHEDULING
from bridge.store import JobRecord
from tests.unit.conftest import ApiClient


@pytest.fixture
def as_alice(api_client: ApiClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
             ) -> ApiClient:
    """tbatch talks to ``api_client`` as alice, from ``tmp_path``."""
    monkeypatch.setenv("HPC_BRIDGE_URL", str(api_client.client.make_url("")).rstrip("/"))
    monkeypatch.setenv("HPC_BRIDGE_TOKEN", "alice")
    monkeypatch.chdir(tmp_path)
    return api_client


async def tbatch(*argv: str) -> int:
    """Run tbatch (in a thread: the event loop serves the API meanwhile)."""
    return await asyncio.to_thread(tbatch_main, list(argv))


def only_job(api: ApiClient) -> JobRecord:
    jobs = api.store.list_jobs()
    assert len(jobs) == 1
    return api.store.get(jobs[0].id)


def scheduling(record: JobRecord) -> dict[str, Any]:
    options = json.loads(record.job.metadata.annotations[ANN_SCHEDULING])
    assert isinstance(options, dict)
    return options


async def test_script_file(as_alice: ApiClient, tmp_path: Path,
                           monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n#SBATCH -N 2 -t 30\nsrun hostname\n")
    monkeypatch.setenv("MY_VAR", "x y")
    assert await tbatch("-p", "gpu", "train.sh", "arg1") == 0
    record = only_job(as_alice)
    assert capsys.readouterr().out == f"Submitted batch job {record.id}\n"
    assert record.owner.user == "alice"
    trainer = record.job.spec.trainer
    assert trainer is not None and trainer.num_nodes == 2 and trainer.args == ["arg1"]
    env = {e.name: e.value for e in trainer.env or []}
    assert env["MY_VAR"] == "x y"
    assert "HPC_BRIDGE_TOKEN" not in env  # never exported by --export=ALL
    options = scheduling(record)
    assert options["partition"] == "gpu"
    assert options["submit_dir"] == str(tmp_path) and "chdir" not in options
    assert options["job_name"] == "train.sh"
    assert record.job.metadata.annotations[ANN_BATCH_SCRIPT] == script.read_text()


@pytest.mark.parametrize("where", ["script", "command line"])
async def test_parsable_from_either(where: str, as_alice: ApiClient, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    directive = "#SBATCH --parsable\n" if where == "script" else ""
    (tmp_path / "j.sh").write_text(f"#!/bin/sh\n{directive}true\n")
    argv = ["--parsable", "j.sh"] if where == "command line" else ["j.sh"]
    assert await tbatch(*argv) == 0
    assert capsys.readouterr().out == f"{only_job(as_alice).id}\n"


async def test_script_from_stdin(as_alice: ApiClient, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(b"#!/bin/sh\n#SBATCH -J piped\necho hi\n"))
    monkeypatch.setattr(sys, "stdin", stdin)
    assert await tbatch("--parsable") == 0
    assert capsys.readouterr().out == f"{only_job(as_alice).id}\n"
    assert scheduling(only_job(as_alice))["job_name"] == "piped"


async def test_wrap(as_alice: ApiClient) -> None:
    assert await tbatch("--wrap", "echo `hostname` $(id)") == 0
    assert only_job(as_alice).job.metadata.annotations[ANN_BATCH_SCRIPT] == (
        "#!/bin/sh\n# This script was created by tbatch --wrap.\n\necho `hostname` $(id)\n"
    )


async def test_trainjob_file(as_alice: ApiClient, tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(
        "spec:\n  runtimeRef: {name: torch-distributed}\n"
        "  trainer: {command: [python, train.py], image: x}\n"
    )
    # An image on a back end with no container runtime: refused, naming it.
    assert await tbatch("-f", "job.yaml", "--backend", "slurm") == 1
    assert as_alice.store.list_jobs() == []
    (tmp_path / "job.yaml").write_text(
        "spec:\n  runtimeRef: {name: torch-distributed}\n"
        "  trainer: {command: [python, train.py]}\n"
    )
    assert await tbatch("-f", "job.yaml", "--backend", "slurm") == 0
    record = only_job(as_alice)
    job = record.job
    assert job.spec.trainer is not None and job.spec.trainer.command == ["python", "train.py"]
    assert job.metadata.annotations["hpc-bridge.io/backend"] == "slurm"
    # Where the file says nothing, what sbatch gives a script: the directory tbatch ran
    # in and its PATH (a trainer's own PATH, or chdir, win: the file's word).
    assert {k: scheduling(record).get(k) for k in ("submit_dir", "submit_path")} == {
        "submit_dir": str(tmp_path), "submit_path": os.environ["PATH"]}
    (tmp_path / "own.yaml").write_text(
        "metadata: {annotations: {hpc-bridge.io/scheduling: '{\"chdir\": \"/srv\"}'}}\n"
        "spec:\n  runtimeRef: {name: torch-distributed}\n"
        "  trainer: {command: [python], env: [{name: PATH, value: /opt/bin}]}\n")
    assert await tbatch("-f", "own.yaml", "--backend", "slurm") == 0
    own = as_alice.store.get(max(j.id for j in as_alice.store.list_jobs()))
    assert scheduling(own) == {"chdir": "/srv"}


async def test_bytes_that_are_not_utf8_travel_unchanged(
        as_alice: ApiClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A Latin-1 script, argument and variable reach the parser as the client saw them
    (``{"base64": ...}`` on the wire): the argument is refused as sbatch's parser did;
    the script keeps its bytes (which this fake back end, unlike Slurm's, refuses), and
    the variable is no reason to refuse (``--export=ALL`` leaves it out)."""
    (tmp_path / "latin1.sh").write_bytes(b"#!/bin/sh\necho caf\xe9\n")
    monkeypatch.setenv("LATIN", "caf\udce9")  # what os.environ holds for b"caf\xe9"
    assert await tbatch("latin1.sh", "caf\udce9") == 1
    assert capsys.readouterr().err == (
        "tbatch: error: argument is not valid UTF-8: 'caf\\udce9'\n")
    assert await tbatch("latin1.sh", "cafe") == 1
    assert capsys.readouterr().err == (
        f"tbatch: error: metadata.annotations[{ANN_BATCH_SCRIPT}]: a batch script that is "
        "not UTF-8 text is not supported by back end 'slurm'\n")


@pytest.mark.parametrize(
    ("argv", "files", "message"),
    [
        (["--foo", "x.sh"], {}, "tbatch: error: unrecognized option '--foo'\n"),
        (["missing.sh"], {}, "tbatch: error: Unable to open file missing.sh\n"),
        (["-N", "abc", "missing.sh"], {}, "tbatch: error: invalid --nodes value 'abc'"),
        (["j.sh"], {"j.sh": "echo no shebang\n"}, "tbatch: error: This does not look like"),
        (
            ["j.sh"],
            {"j.sh": "#!/bin/sh\n#SBATCH --bad\n"},
            "tbatch: error: j.sh:2: unrecognized option '--bad'\n",
        ),
        (
            ["--core-spec=1", "j.sh"],
            {"j.sh": "#!/bin/sh\n#SBATCH --bad\n"},
            "tbatch: error: command line: option '--core-spec' is not supported by tbatch\n"
            "tbatch: error: j.sh:2: unrecognized option '--bad'\n",
        ),
        (["-f", "nope.yaml"], {}, "tbatch: error: Unable to open file nope.yaml\n"),
        (
            ["-f", "j.yaml"],
            {"j.yaml": "kind: TrainJob\nspec: {}\n"},
            "tbatch: error: j.yaml: spec.runtimeRef: Field required\n",
        ),
        (["-N", "4", "-n", "2", "j.sh"], {"j.sh": "#!/bin/sh\n"}, "is less than --nodes=4"),
    ],
)
async def test_user_errors(argv: list[str], files: dict[str, str], message: str,
                           as_alice: ApiClient, tmp_path: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert await tbatch(*argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(message) if message.startswith("tbatch") else (
        message in captured.err)
    assert "Traceback" not in captured.err
    assert as_alice.store.list_jobs() == []


async def test_several_refusals_each_on_its_line(
        as_alice: ApiClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "j.sh").write_text("#!/bin/sh\n#SBATCH --contiguous\n#SBATCH --bad\n")
    assert await tbatch("--core-spec=1", "j.sh") == 1
    assert capsys.readouterr().err.splitlines() == [
        "tbatch: error: command line: option '--core-spec' is not supported by tbatch",
        "tbatch: error: j.sh:2: option '--contiguous' is not supported by tbatch",
        "tbatch: error: j.sh:3: unrecognized option '--bad'",
    ]


async def test_binary_and_latin1_scripts(as_alice: ApiClient, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bin").write_bytes(b"\x7fELF\x00\xff\xfe")
    assert await tbatch("bin") == 1
    assert "This does not look like a batch script" in capsys.readouterr().err
    (tmp_path / "latin1.sh").write_bytes(b"#!/bin/sh\n#SBATCH -J caf\xe9\necho caf\xe9\n")
    assert await tbatch("latin1.sh") == 1
    assert "latin1.sh:2: #SBATCH line is not UTF-8 text" in capsys.readouterr().err


async def test_finds_a_bare_script_name_on_path(
        as_alice: ApiClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "onpath.sh").write_text("#!/bin/sh\ntrue\n")
    monkeypatch.setenv("PATH", str(bindir))
    assert await tbatch("onpath.sh") == 0
    assert scheduling(only_job(as_alice))["job_name"] == "onpath.sh"


async def test_a_retry_answers_the_first_job_and_parsable(as_alice: ApiClient) -> None:
    """The same key and body again: the first job, ``parsable`` read again from the body."""
    body = {"argv": ["--parsable", "--wrap", "true"], "cwd": "/tmp", "environ": {}}
    headers = {"Idempotency-Key": "k1"}
    first = await as_alice.call("POST", "/v1/sbatch", doc=body, headers=headers)
    again = await as_alice.call("POST", "/v1/sbatch", doc=body, headers=headers)
    assert (first.status, again.status) == (201, 200)
    assert again.body == first.body and first.body["parsable"] is True


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"cwd": "/", "environ": {}}, "argv"),
        ({"argv": "x", "cwd": "/"}, "argv"),
        ({"argv": [], "environ": {}}, "cwd"),
        ({"argv": [1], "cwd": "/"}, "argv[0]"),
        ({"argv": [], "cwd": "/", "environ": []}, "environ"),
        ({"argv": [], "cwd": "/", "environ": {"A": {"base64": "!!"}}}, "environ.A"),
        ({"argv": [], "cwd": "/", "script": {"base64": "eA==", "x": 1}}, "script"),
        ({"argv": [], "cwd": "/", "scriptProblem": "gone"}, "scriptProblem"),
        ({"argv": [], "cwd": "/", "user": "root"}, "user"),
        ({"argv": ["-f", "x"], "cwd": "/"}, "file"),
    ],
)
async def test_a_malformed_body_is_a_400_naming_the_field(
        body: dict[str, Any], field: str, as_alice: ApiClient) -> None:
    answer = await as_alice.call("POST", "/v1/sbatch", doc=body)
    assert answer.status == 400, answer.body
    assert answer.error.startswith(f"{field}: "), answer.error


async def test_tbatch_runs_without_the_model(as_alice: ApiClient, tmp_path: Path) -> None:
    """A whole submission in a fresh interpreter loads neither the model (pydantic) nor
    the sbatch parser, http.client nor PyYAML: the start-up cost of tbatch is the
    interpreter's, the client's and the daemon's answer (issue 13)."""
    heavy = ["pydantic", "bridge.model", "bridge.sbatch.cmdline", "bridge.sbatch.parse", "ssl",
             "http.client",
             "bridge.sbatch.options", "yaml", "httpx", "hostlist", "importlib.metadata",
             "dataclasses"]
    (tmp_path / "j.sh").write_text("#!/bin/sh\n#SBATCH -N 1\ntrue\n")
    code = ("import sys; from bridge.cli.tbatch import tbatch_main; "
            "rc = tbatch_main(['--parsable', 'j.sh']); "
            f"print(rc, [m for m in {heavy!r} if m in sys.modules])")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err
    assert out.decode().splitlines() == [str(only_job(as_alice).id), "0 []"]


async def test_a_flood_of_refused_options_costs_a_bounded_answer(as_alice: ApiClient) -> None:
    """One word of 100,000 refused letters (-IIII...): the daemon parses for every user,
    so the refusals it lists stop at MAX_REFUSALS (an attacker's review: before, 2 GB
    and a 63 MB answer for a 1 MB body)."""
    from bridge.sbatch.cmdline import MAX_REFUSALS

    body = {"argv": ["-" + "I" * 100_000, "--wrap", "true"], "cwd": "/tmp", "environ": {}}
    answer = await as_alice.call("POST", "/v1/sbatch", doc=body)
    assert answer.status == 400
    lines = answer.error.splitlines()
    assert len(lines) == MAX_REFUSALS + 1
    assert lines[-1].endswith(f"more refused options follow (the first {MAX_REFUSALS} are "
                              "listed)")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"argv": ["--wrap", "true"], "cwd": {"base64": "L3RtcC//"}}, "cwd"),  # b"/tmp/\xff"
        ({"argv": ["--wrap", "true"], "cwd": "relative/dir"}, "cwd"),
        ({"argv": ["--wrap", "true"], "cwd": "/", "scriptProblem": []}, "scriptProblem"),
        ({"argv": ["-J", "x" * (128 * 1024 + 1), "--wrap", "true"], "cwd": "/"}, "argv[1]"),
        ({"argv": ["--wrap", "true"], "cwd": "/", "environ": {"A": "x" * (128 * 1024 + 1)}},
         "environ.A"),
    ],
)
async def test_what_once_was_a_500_names_the_field(body: dict[str, Any], field: str,
                                                   as_alice: ApiClient) -> None:
    answer = await as_alice.call("POST", "/v1/sbatch", doc=body)
    assert answer.status == 400, answer.body
    assert answer.error.startswith(f"{field}: "), answer.error


@pytest.mark.parametrize("argv", [["-N", "0" * 5000 + "1", "--wrap", "true"],
                                  ["-t", "0" * 5000 + "1", "--wrap", "true"]])
async def test_numbers_with_thousands_of_leading_zeros(argv: list[str],
                                                       as_alice: ApiClient) -> None:
    """int() refuses more than 4300 digits: leading zeros must not reach it."""
    answer = await as_alice.call("POST", "/v1/sbatch", doc={"argv": argv, "cwd": "/"})
    assert answer.status == 201, answer.body


async def test_a_long_value_is_cut_in_the_message(as_alice: ApiClient) -> None:
    body = {"argv": ["-N", "x" * 100_000, "--wrap", "true"], "cwd": "/"}
    answer = await as_alice.call("POST", "/v1/sbatch", doc=body)
    assert answer.status == 400 and len(answer.error) < 400, answer.error
    assert "..." in answer.error


@pytest.mark.parametrize(("value", "status"), [
    ("42", 42), ("0", 1), ("300", 1), ("x", 1), (None, 1)])
async def test_slurm_exit_error_is_an_errors_exit_status(
        value: str | None, status: int, as_alice: ApiClient,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """sbatch's SLURM_EXIT_ERROR (1 to 255; sbatch ignores 0); success stays 0."""
    if value is not None:
        monkeypatch.setenv("SLURM_EXIT_ERROR", value)
    assert await tbatch("--foo", "--wrap", "true") == status
    assert await tbatch("--wrap", "true") == 0


async def test_the_submitters_umask_goes_with_the_job_as_sbatchs(
        as_alice: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """SLURM_UMASK is tbatch's umask when unset (as sbatch sets it; Slurm creates the
    output files under it), and the user's own when set."""
    monkeypatch.delenv("SLURM_UMASK", raising=False)
    old = os.umask(0o027)
    try:
        assert await tbatch("--wrap", "true") == 0
    finally:
        os.umask(old)
    monkeypatch.setenv("SLURM_UMASK", "0077")
    assert await tbatch("--wrap", "true") == 0
    masks = [{e.name: e.value for e in r.job.spec.trainer.env}.get("SLURM_UMASK")
             for r in map(as_alice.store.get, sorted(j.id for j in as_alice.store.list_jobs()))
             if r.job.spec.trainer is not None]
    assert masks == ["0027", "0077"]


async def test_every_refusal_in_one_answer_each_with_where_it_was_given(
        as_alice: ApiClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The options tbatch refuses and those the job's back end refuses come in one try,
    each with its line (or the command line, or the variable): nothing is admitted."""
    (tmp_path / "j.sh").write_text(
        "#!/bin/sh\n#SBATCH --mail-type=END\n#SBATCH --wait\n#SBATCH --begin=now\ntrue\n")
    monkeypatch.setenv("SBATCH_WCKEY", "w")
    assert await tbatch("-I", "--comment=c", "j.sh") == 1
    assert capsys.readouterr().err.splitlines() == [
        "tbatch: error: command line: option '-I' (--immediate) is not supported by tbatch",
        "tbatch: error: j.sh:3: option '--wait' is not supported by tbatch",
        *(f"tbatch: error: {where}: {flag} is not supported by back end 'slurm': only Slurm "
          "honours it" for where, flag in (
              ("j.sh:2", "--mail-type"), ("command line", "--comment"),
              ("SBATCH_WCKEY", "--wckey"), ("j.sh:4", "--begin")))]
    assert as_alice.store.list_jobs() == []
    # The back end's alone: with where each was given, in place of the annotation.
    (tmp_path / "k.sh").write_text("#!/bin/sh\n#SBATCH --mail-type=END\ntrue\n")
    assert await tbatch("k.sh") == 1
    assert capsys.readouterr().err.splitlines() == [
        "tbatch: error: k.sh:2: --mail-type is not supported by back end 'slurm': only "
        "Slurm honours it",
        "tbatch: error: SBATCH_WCKEY: --wckey is not supported by back end 'slurm': only "
        "Slurm honours it"]
    assert as_alice.store.list_jobs() == []


async def test_a_path_that_is_not_utf8_is_not_the_jobs(
        as_alice: ApiClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As --export=ALL leaves such a variable out: the file's job still goes, without
    tbatch's PATH, and nothing is logged as a daemon fault."""
    monkeypatch.setenv("PATH", "/usr/bin:/caf\udce9/bin")
    (tmp_path / "job.yaml").write_text(
        "spec:\n  runtimeRef: {name: torch-distributed}\n  trainer: {command: [\"true\"]}\n")
    assert await tbatch("-f", "job.yaml", "--backend", "slurm") == 0
    assert "submit_path" not in scheduling(only_job(as_alice))
