"""Hostile input runs as data or is refused with a clear error; no shell ever sees it."""

from __future__ import annotations

import base64
import json
import select
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile import (
    CASE_TIMEOUT,
    HOSTILE_WORDS,
    QUERIES,
    REF_ROUTES,
    assert_refused_or_ok,
    cases,
    follows,
    mutated_trainjobs,
    quoted,
    raw_bodies,
    url_query,
)
from tests.integration.bed import Daemon

pytestmark = pytest.mark.integration

CANARY = "/tmp/hpc-bridge-pwned"  # the file an injection would create


@pytest.fixture(autouse=True)
def no_canary() -> None:
    Path(CANARY).unlink(missing_ok=True)


HOSTILE = [
    "it's a \"job\"",
    f"$(touch {CANARY})",
    f"`touch {CANARY}`",
    f"; touch {CANARY} #",
    "ünïcødé ✓ 名前",
    "--comment=evil",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_job_names_args_and_env_are_data(daemon: Daemon, outdir: Path,
                                                 name: str) -> None:
    script = outdir / "echo.sh"
    script.write_text('#!/bin/bash\n#SBATCH -N 1\nprintf "%s\\n" "$SLURM_JOB_NAME" "$1" '
                      '"$HOSTILE" "${#BIG}"\n')
    big = "x" * 10_240
    res = daemon.cli("alice", "tbatch", "--parsable", f"--job-name={name}", str(script), name,
                     cwd=outdir, env={"HOSTILE": name, "BIG": big})
    assert res.returncode == 0, res.stderr
    job_id = int(res.stdout)
    done = daemon.wait_state(job_id, ["Succeeded", "Failed"])
    assert done["state"] == "Succeeded", done
    out = daemon.cli("alice", "tlog", str(job_id)).stdout.splitlines()
    assert out == [name, name, name, "10240"]
    assert not Path(CANARY).exists()


@pytest.mark.parametrize(("args", "words"), [
    (["--job-name=two\nlines"], "control characters"),
    (["--nodes=0"], "nodes"),
    (["--nodes=99"], "nodes"),
    (["--time=1:2:3:4"], "time"),
    (["--runtime=tensorflow-ps"], "unknown"),
    (["--frobnicate"], "unrecognized option"),
])
def test_bad_requests_are_refused_clearly(daemon: Daemon, outdir: Path, args: list[str],
                                          words: str) -> None:
    script = outdir / "ok.sh"
    script.write_text("#!/bin/bash\necho hi\n")
    res = daemon.cli("alice", "tbatch", *args, str(script), cwd=outdir)
    if res.returncode == 0:
        # Impossible for Slurm but well-formed: admitted, then failed with Slurm's reason.
        job_id = int(res.stdout.split()[-1])
        done = daemon.wait_state(job_id, ["Failed", "Succeeded"], timeout=60)
        assert done["state"] == "Failed", done
        assert words in (done["message"] + done["reason"]).lower(), done
    else:
        assert res.stderr.startswith("tbatch: error:"), res.stderr
        assert words in res.stderr.lower(), res.stderr
        assert "Traceback" not in res.stderr


def test_malformed_script_gets_line_number(daemon: Daemon, outdir: Path) -> None:
    script = outdir / "bad.sh"
    script.write_text("#!/bin/bash\n#SBATCH -N 1\n#SBATCH --bogus\necho\n")
    res = daemon.cli("alice", "tbatch", str(script), cwd=outdir)
    assert res.returncode != 0
    assert ":3:" in res.stderr and "--bogus" in res.stderr
    nohashbang = outdir / "nohb.sh"
    nohashbang.write_text("echo hi\n")
    res = daemon.cli("alice", "tbatch", str(nohashbang), cwd=outdir)
    assert res.returncode != 0 and "#!" in res.stderr


def test_malformed_trainjob_yaml(daemon: Daemon, outdir: Path) -> None:
    bad = outdir / "bad.yaml"
    bad.write_text("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nspec: [\n")
    res = daemon.cli("alice", "tbatch", "-f", str(bad), cwd=outdir)
    assert res.returncode != 0 and "malformed YAML" in res.stderr
    zero = outdir / "zero.yaml"
    zero.write_text(json.dumps({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "zero"},
        "spec": {"runtimeRef": {"name": "plain"},
                 "trainer": {"numNodes": 0, "command": ["true"]}}}))
    res = daemon.cli("alice", "tbatch", "-f", str(zero), cwd=outdir)
    assert res.returncode != 0 and "spec.trainer.numNodes" in res.stderr


def test_trainjob_yaml_with_command_runs(daemon: Daemon, outdir: Path) -> None:
    doc = outdir / "tj.yaml"
    doc.write_text(f"""apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: yaml-job
  annotations:
    hpc-bridge.io/scheduling: '{{"chdir": "{outdir}", "output": "yaml-%j.out"}}'
spec:
  runtimeRef:
    name: plain
  trainer:
    numNodes: 1
    command: ["/bin/echo", "$(not expanded)", "it's"]
""")
    res = daemon.cli("alice", "tbatch", "-f", str(doc), cwd=outdir)
    assert res.returncode == 0, res.stderr
    job_id = int(res.stdout.split()[-1])
    done = daemon.wait_state(job_id, ["Succeeded", "Failed"])
    assert done["state"] == "Succeeded", done
    assert daemon.cli("alice", "tlog", str(job_id)).stdout == "$(not expanded) it's\n"


# --- the hostile-input suite's sample against a real daemon, as alice -------------------

class AliceApi:
    """tests/integration/api_worker.py run as alice: requests over the daemon's unix
    socket with alice's peer credentials, one answer per request or a hang reported."""

    def __init__(self, daemon: Daemon) -> None:
        self.proc = subprocess.Popen(
            ["runuser", "-u", "alice", "--", sys.executable, "-I", str(WORKER),
             str(daemon.socket), str(CASE_TIMEOUT)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.deadline = CASE_TIMEOUT + 5

    def call(self, method: str, path: str, body: bytes | None = None,
             head_only: bool = False) -> tuple[int, bytes, str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({
            "method": method, "path": path, "head_only": head_only,
            "body": base64.b64encode(body).decode() if body is not None else None}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], self.deadline)
        assert ready, f"no answer within {self.deadline} s: {method} {path}"
        answer = json.loads(self.proc.stdout.readline())
        assert "failed" not in answer, (method, path, answer)
        return answer["status"], base64.b64decode(answer["body"]), answer["type"].split(";")[0]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


WORKER = Path(__file__).with_name("api_worker.py")


def _held(body: bytes) -> bytes:
    """The body with ``spec.suspend: true`` where it is a TrainJob the daemon may admit,
    so that no fuzzed job reaches Slurm (the bed is shared)."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return body
    if isinstance(doc, dict) and isinstance(doc.get("spec"), dict):
        doc["spec"]["suspend"] = True
        return json.dumps(doc).encode()
    return body


def test_hostile_api_requests_as_alice(daemon: Daemon, outdir: Path) -> None:
    """A sample of the hostile-input suite (tests/unit/test_api_fuzz.py) against a real
    daemon on the Slurm bed, sent as alice over the unix socket: every answer a 4xx with
    a JSON message or a correct one; no fuzzed job reaches Slurm."""
    script = outdir / "ran.sh"
    script.write_text("#!/bin/bash\necho ran\n")
    res = daemon.cli("alice", "tbatch", "--parsable", "-J", "ran", "-o", str(outdir / "r.out"),
                     str(script), cwd=outdir)
    assert res.returncode == 0, res.stderr
    ran = daemon.wait_state(int(res.stdout), ["Succeeded", "Failed"])
    alice = AliceApi(daemon)
    try:
        @cases(0.3)
        @given(st.one_of(mutated_trainjobs().map(lambda d: json.dumps(d).encode()),
                         raw_bodies()))
        def submissions(body: bytes) -> None:
            status, raw, ctype = alice.call("POST", "/v1/jobs", _held(body))
            answer = assert_refused_or_ok(status, raw, ctype)
            if status < 400:
                assert status == 201 and answer["state"] == "Suspended", answer

        @cases(0.3)
        @given(st.sampled_from(REF_ROUTES), QUERIES, st.one_of(
            st.sampled_from([str(ran["id"]), ran["uid"], ran["name"]]),
            st.sampled_from(HOSTILE_WORDS).filter(bool)))
        def routes(route: tuple[str, str], query: list[tuple[str, str]], ref: str) -> None:
            method, suffix = route
            path = f"/v1/jobs/{quoted(ref)}{suffix}{url_query(query)}"
            status, raw, ctype = alice.call(method, path, head_only=follows(query))
            assert_refused_or_ok(status, raw, ctype)
            if (status == 200 and suffix == "/log" and ref == str(ran["id"])
                    and not {k for k, _ in query} - {"follow"} and not follows(query)):
                assert raw == b"ran\n"

        @cases(0.1)
        @given(QUERIES)
        def listings(query: list[tuple[str, str]]) -> None:
            status, raw, ctype = alice.call("GET", "/v1/jobs" + url_query(query))
            answer = assert_refused_or_ok(status, raw, ctype)
            if status < 400:
                assert isinstance(answer["items"], list)

        submissions()
        routes()
        listings()
    finally:
        alice.close()
    jobs = daemon.api("GET", "/v1/jobs", params={"states": "all"}).json()["items"]
    fuzzed = [j for j in jobs if j["id"] != ran["id"]]
    assert all(j["user"] == "alice" and j["backendId"] is None for j in fuzzed), fuzzed[:3]
