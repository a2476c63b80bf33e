"""Multi-user safety on the real Slurm bed: bob attacks alice through a real daemon.

Each test is an attack a local user could make (issue 11): reading the state database,
hijacking another user's job with a forged Slurm comment or a confusable uid, capturing
another user's job names, submitting twice through a retry, a world-readable token
file, reading files through ``tlog``. The daemon runs as root, as in production; the
attacker's commands run as bob (``runuser``), the victim's as alice.
"""

from __future__ import annotations

import json
import stat
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.integration.bed import (
    BIN,
    Daemon,
    cleanup,
    fresh_daemon_dir,
    trainjob_doc,
)
from tests.integration.conftest import rest_settings

pytestmark = pytest.mark.integration

_POST = """
import json, sys, httpx
a = json.loads(sys.argv[1])
with httpx.Client(transport=httpx.HTTPTransport(uds=a["sock"]), base_url="http://bridge",
                  timeout=30) as c:
    r = c.request(a["method"], a["path"], content=a.get("body"), headers=a.get("headers"))
print(json.dumps([r.status_code, r.text]))
"""


def api_as(d: Daemon, user: str, method: str, path: str, body: Any = None,
           headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """One API request over the unix socket as ``user`` (the kernel names the caller)."""
    args = {"sock": str(d.socket), "method": method, "path": path,
            "body": json.dumps(body) if body is not None else None, "headers": headers or {}}
    res = subprocess.run(["runuser", "-u", user, "--", str(BIN / "python"), "-c", _POST,
                          json.dumps(args)], capture_output=True, text=True, timeout=60,
                         check=True)
    status, text = json.loads(res.stdout)
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def as_user(user: str, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", user, "--", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=60, check=False)


def tbatch(d: Daemon, user: str, outdir: Path, *args: str) -> int:
    res = d.cli(user, "tbatch", "--parsable", "-t", "5", *args, cwd=outdir)
    assert res.returncode == 0, res.stderr
    return int(res.stdout)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# ------------------------------------------------------------------------------ files


def test_state_files_are_private_and_fixed_at_start(testbed: dict[str, str],
                                                    outdir: Path) -> None:
    workdir = fresh_daemon_dir("files")
    state = workdir / "state"
    state.mkdir(mode=0o755)  # as an older daemon (or a careless admin) left it
    d = Daemon(workdir, rest_settings(testbed))
    try:
        d.start()
        res = d.cli("alice", "tbatch", "--parsable", "--wrap", "true", cwd=outdir,
                    env={"TOKEN": "alice-secret"})
        assert res.returncode == 0, res.stderr
        d.wait_state(int(res.stdout), ["Succeeded", "Failed"])
        db = state / "bridge.sqlite"
        files = [db, *(p for p in (Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists())]
        assert mode(state) == 0o700
        assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}
        for path in files:
            res = as_user("bob", "cat", str(path))
            assert res.returncode != 0 and "alice-secret" not in res.stdout
        assert f"{state}: 0755 -> 0700" in d.log.read_text()
        # Files an older daemon left open are closed at the next start, and it says so.
        d.stop()
        state.chmod(0o755)
        db.chmod(0o644)
        d.start()
        assert (mode(state), mode(db)) == (0o700, 0o600)
        assert f"{db}: 0644 -> 0600" in d.log.read_text()
    finally:
        d.stop()
        cleanup(workdir)


def _serve_fails(d: Daemon) -> str:
    d.write_config()
    res = subprocess.run([str(BIN / "hpc-bridge"), "serve", "--config", str(d.config)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 2, res.stderr[-2000:]
    return res.stderr


def test_token_files_others_may_read_are_refused_and_the_uid_column_counts(
        testbed: dict[str, str], outdir: Path) -> None:
    workdir = fresh_daemon_dir("tokens")
    tokens = workdir / "tokens.csv"
    tokens.write_text("s3cr3t-alice,alice,1001\n")
    tokens.chmod(0o644)  # bob could read alice's token
    d = Daemon(workdir, rest_settings(testbed),
               daemon_settings={"tcp": "127.0.0.1:0", "token_file": str(tokens)})
    try:
        assert f"token file {tokens} is mode 0644" in _serve_fails(d)
        tokens.chmod(0o600)
        tokens.write_text("s3cr3t-alice,alice,0\n")  # alice's token claiming uid 0
        assert "uid '0' is not the uid of user 'alice' (1001)" in _serve_fails(d)
    finally:
        cleanup(workdir)


# --------------------------------------------------------------------------- identity


def _slurm_state(job_id: str) -> str:
    out = subprocess.run(["squeue", "--json"], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    for job in json.loads(out)["jobs"]:
        if str(job.get("job_id")) == job_id:
            return str(job.get("job_state"))
    return "GONE"


def foreign_logged(d: Daemon) -> set[str]:
    """Back-end ids of the jobs the daemon logged as foreign."""
    lines = [json.loads(line) for line in d.log.read_text().splitlines()
             if line.startswith("{") and "foreign back-end job" in line]
    return {str(line["backend_id"]) for line in lines}


def test_a_forged_slurm_comment_does_not_hijack_anothers_job(testbed: dict[str, str],
                                                              outdir: Path) -> None:
    """bob's ``sbatch --comment=hpc-bridge:<alice's uid>`` made alice's running job
    Failed/BackendLost (then tcancel refused it). Now bob's job is foreign: ignored and
    logged; alice's job runs to its end and can be cancelled."""
    workdir = fresh_daemon_dir("hijack")
    d = Daemon(workdir, rest_settings(testbed), engine_settings={"lost_after_seconds": 3.0})
    forged: list[str] = []
    try:
        d.start()
        short = tbatch(d, "alice", outdir, "--wrap", "sleep 25")
        long = tbatch(d, "alice", outdir, "--wrap", "sleep 300")
        for job in (short, long):
            d.wait_state(job, ["Running"])
            uid = d.job(job)["uid"]
            res = as_user("bob", "sbatch", "--parsable", f"--comment=hpc-bridge:{uid}",
                          "-t", "5", "-o", "/dev/null", "--wrap", "sleep 120", cwd=outdir)
            assert res.returncode == 0, res.stderr
            forged.append(res.stdout.strip().split(";")[0])
        # On a bridge matching by key alone, both became Failed/BackendLost within ~5 s.
        done = d.wait_state(short, ["Succeeded", "Failed"], timeout=120)
        assert done["state"] == "Succeeded", done
        assert d.job(long)["state"] == "Running"
        res = d.cli("alice", "tcancel", str(long))
        assert res.returncode == 0, res.stderr
        assert d.wait_state(long, ["Cancelled", "Failed"])["state"] == "Cancelled"
        # The bridge never touched bob's jobs.
        assert all(_slurm_state(b) in ("RUNNING", "PENDING") for b in forged)
        assert d.log.read_text().count("foreign back-end job") == len(forged)  # once each
        assert foreign_logged(d) == set(forged)
    finally:
        for b in forged:
            subprocess.run(["scancel", b], check=False, timeout=60)
        d.stop()
        cleanup(workdir)


@pytest.mark.parametrize("suffix", ["\u0000", "x", "-copy"])
def test_a_uid_that_is_not_rfc4122_is_refused(daemon: Daemon, outdir: Path,
                                              suffix: str) -> None:
    victim = str(uuid.uuid4())
    doc = trainjob_doc(outdir, f"u-{uuid.uuid4().hex[:8]}", "plain", ["true"])
    doc["metadata"]["uid"] = victim
    status, body = api_as(daemon, "alice", "POST", "/v1/jobs", doc)
    assert status == 201, body
    doc["metadata"]["uid"] = victim + suffix
    doc["metadata"]["name"] += "-bob"
    status, body = api_as(daemon, "bob", "POST", "/v1/jobs", doc)
    assert status == 400 and body["error"].startswith("metadata.uid: "), body


def test_references_resolve_among_the_callers_jobs_first(daemon: Daemon,
                                                         outdir: Path) -> None:
    name = f"train-{uuid.uuid4().hex[:6]}"
    doc = trainjob_doc(outdir, name, "plain", ["sleep", "300"])
    status, alices = api_as(daemon, "alice", "POST", "/v1/jobs", doc)
    assert status == 201, alices
    # bob takes the same name (another namespace) and alice's uid as a name.
    doc["metadata"]["namespace"] = "bobs"
    status, bobs = api_as(daemon, "bob", "POST", "/v1/jobs", doc)
    assert status == 201, bobs
    doc["metadata"]["name"] = alices["uid"]
    status, bobs_by_uid = api_as(daemon, "bob", "POST", "/v1/jobs", doc)
    assert status == 201, bobs_by_uid
    for ref in (name, alices["uid"]):
        res = daemon.cli("alice", "tshow", ref)
        assert res.returncode == 0 and f"JobId={alices['id']} " in res.stdout, res
    # Someone with no job of that name (root here) gets the candidates, not a guess.
    res = daemon.cli("root", "tshow", name)
    assert res.returncode != 0
    assert f"{alices['id']} (alice" in res.stderr and f"{bobs['id']} (bob" in res.stderr
    res = daemon.cli("alice", "tcancel", name)
    assert res.returncode == 0, res.stderr
    assert daemon.job(alices["id"])["cancelRequested"] or daemon.job(
        alices["id"])["state"] == "Cancelled"
    assert daemon.job(bobs["id"])["state"] not in ("Cancelled",)
    for job in (bobs, bobs_by_uid):
        assert daemon.cli("bob", "tcancel", str(job["id"])).returncode == 0


def test_a_retried_submission_makes_one_job(daemon: Daemon, outdir: Path) -> None:
    doc = trainjob_doc(outdir, f"once-{uuid.uuid4().hex[:6]}", "plain", ["true"])
    key = {"Idempotency-Key": uuid.uuid4().hex}
    first = api_as(daemon, "alice", "POST", "/v1/jobs", doc, key)
    again = api_as(daemon, "alice", "POST", "/v1/jobs", doc, key)
    assert first[0] == 201 and again[0] == 200, (first, again)
    assert again[1]["id"] == first[1]["id"]
    # The key is alice's: bob using it makes his own job, and sees nothing of hers.
    doc["metadata"]["name"] += "-bob"
    bobs = api_as(daemon, "bob", "POST", "/v1/jobs", doc, key)
    assert bobs[0] == 201 and bobs[1]["id"] != first[1]["id"]
    # The same key with another body is refused rather than answered with a wrong job.
    doc["metadata"]["name"] += "-other"
    other = api_as(daemon, "alice", "POST", "/v1/jobs", doc, key)
    assert other[0] == 409 and "Idempotency-Key" in other[1]["error"]
    names = [j["name"] for j in daemon.api("GET", "/v1/jobs?states=all").json()["items"]
             if j["user"] == "alice" and j["name"].startswith("once-")]
    assert names.count(first[1]["name"]) == 1


# ----------------------------------------------------------------------------- errors


def test_tlog_refusing_a_file_exits_non_zero_with_the_reason(daemon: Daemon,
                                                             outdir: Path) -> None:
    job = tbatch(daemon, "alice", outdir, "-o", "out-%j.txt", "--wrap", "echo mine")
    daemon.wait_state(job, ["Succeeded"])
    assert daemon.cli("alice", "tlog", str(job)).stdout == "mine\n"
    secret = outdir / "bobs-secret"
    assert as_user("bob", "sh", "-c", f"echo bob-only > {secret}").returncode == 0
    out = outdir / f"out-{job}.txt"  # %j is the bridge's id
    assert as_user("alice", "ln", "-sfn", str(secret), str(out)).returncode == 0
    res = daemon.cli("alice", "tlog", str(job))
    assert res.returncode != 0 and "bob-only" not in res.stdout
    assert f"{out} is a symbolic link" in res.stderr


def test_a_launch_failure_names_the_output_path(daemon: Daemon, outdir: Path) -> None:
    path = f"/nonexistent-hpcb-{uuid.uuid4().hex[:6]}/x.out"
    job = tbatch(daemon, "alice", outdir, "-o", path, "--wrap", "true")
    done = daemon.wait_state(job, ["Failed", "Succeeded"])
    assert done["state"] == "Failed"
    assert f"could not open output file {path}" in done["message"], done
    assert "signal 53" not in done["message"]


def test_tbatch_whose_answer_is_lost_retries_with_its_key_and_makes_one_job(
        daemon: Daemon, outdir: Path) -> None:
    """The daemon admits alice's job but the answer never reaches tbatch (connection
    reset): tbatch sends it again with the same key and gets the same job."""
    listen = outdir / f"proxy-{uuid.uuid4().hex[:6]}.sock"
    proxy = subprocess.Popen(
        ["runuser", "-u", "alice", "--", str(BIN / "python"),
         str(Path(__file__).with_name("resetting_proxy.py")), str(listen),
         str(daemon.socket)], stdout=subprocess.PIPE, text=True)
    try:
        assert proxy.stdout is not None and proxy.stdout.readline() == "READY\n"
        name = f"retry-{uuid.uuid4().hex[:6]}"
        res = daemon.cli("alice", "tbatch", "--parsable", "-J", name, "--wrap", "true",
                         cwd=outdir, env={"HPC_BRIDGE_SOCKET": str(listen)})
        assert res.returncode == 0, res.stderr
        assert proxy.stdout.readline().startswith("DROPPED POST /v1/sbatch")
        assert proxy.stdout.readline().startswith("RELAYED POST /v1/sbatch")
        jobs = [j for j in daemon.api("GET", "/v1/jobs?states=all").json()["items"]
                if j["jobName"] == name]
        assert [(j["id"], j["user"]) for j in jobs] == [(int(res.stdout), "alice")]
    finally:
        proxy.terminate()
        proxy.wait(10)


def test_jobs_keep_a_users_umask_under_the_daemons_077(cli_daemon: Daemon,
                                                        outdir: Path) -> None:
    """sbatch hands its umask on to the job: the daemon's private 077 must not become
    the job's (its output and files would be unreadable to the user's group)."""
    job = tbatch(cli_daemon, "alice", outdir, "-o", "um-%j.txt", "--wrap", "umask")
    done = cli_daemon.wait_state(job, ["Succeeded", "Failed"])
    assert done["state"] == "Succeeded", done
    out = outdir / f"um-{job}.txt"  # %j is the bridge's id
    assert out.read_text() == "0022\n" and mode(out) == 0o644
