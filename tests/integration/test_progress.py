"""Progress from inside a job on the real Slurm (issue 15 item 2): the job reports with
Kubeflow Trainer's protocol (KEP-2779) over TLS to the daemon's endpoint, with the
reporter of mpi_launch/trainer_status.py, and the report shows in tqueue, tshow and
/v1/events, and for a TrainJob CR routed to Slurm in its status.trainerStatus.
Another user's job cannot read the token or report for it (run as bob).

Ordering is by conditions: each job waits for a file the test writes (or for its
directory to go: a failed test must not leave a job running on the shared cluster)."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.bed import (
    REPO,
    Daemon,
    cleanup,
    fresh_daemon_dir,
    trainjob_doc,
    wait_for,
)
from tests.integration.conftest import rest_settings
from tests.integration.conftest_flux import flux_daemon_for
from tests.integration.k8s_bridge import (
    KWOK_FAIL,
    TRAINJOBS,
    apply,
    conditions,
    is_true,
    jobsets,
    k8s_daemon,
    trainjob,
)
from tests.integration.k8sbed import K8sBed
from tests.integration.mqtt import free_port
from tests.integration.test_k8s_trainjobs import release

pytestmark = pytest.mark.integration

TERMINAL = ["Succeeded", "Failed", "Cancelled"]
#: The reporter as a job runs it: the system python and the repository (standard
#: library only), as any user's script would.
REPORT = f"env PYTHONPATH={REPO} python3 -m mpi_launch.trainer_status"
#: The venv's interpreter (torch, and mpi_launch installed in it).
PYTHON = sys.executable


def wait_for_gate(gate: Path) -> str:
    """Shell that waits for ``gate``, or for its directory to go (a failed test must not
    leave a job running on the shared cluster)."""
    return f"while [ -d {gate.parent} ] && [ ! -e {gate} ]; do sleep 0.2; done"


def make_cert(workdir: Path) -> tuple[Path, Path]:
    cert, key = workdir / "tls" / "cert.pem", workdir / "tls" / "key.pem"
    cert.parent.mkdir(mode=0o755)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    cert.chmod(0o644)  # the CA jobs verify with: every user reads it
    key.chmod(0o600)
    return cert, key


def progress_toml(workdir: Path) -> str:
    """``[trainer_status]`` on a free port, with a certificate made for it."""
    cert, key = make_cert(workdir)
    port = free_port()
    return (f'\n[trainer_status]\nlisten = "127.0.0.1:{port}"\n'
            f'url = "https://127.0.0.1:{port}"\ntls_cert = "{cert}"\ntls_key = "{key}"\n'
            f'token_dir = "{workdir / "tokens"}"\nrate = 5.0\nburst = 5\n'
            'sweep_interval = 1.0\n')


@pytest.fixture
def daemon(testbed: dict[str, str]) -> Iterator[Daemon]:
    workdir = fresh_daemon_dir("progress")
    d = Daemon(workdir, rest_settings(testbed), extra_toml=progress_toml(workdir))
    d.start()
    yield d
    d.stop()
    cleanup(workdir)


@pytest.fixture
def flux_daemon(flux_bed: dict[str, str]) -> Iterator[Daemon]:
    d = flux_daemon_for(flux_bed, "progress-flux")
    d.extra_toml += progress_toml(d.workdir)
    d.start()
    yield d
    d.stop()
    cleanup(d.workdir)


def tbatch(d: Daemon, user: str, script: str, cwd: Path) -> int:
    res = d.cli(user, "tbatch", "--parsable", "-o", f"{cwd}/%j.out", "--wrap", script,
                cwd=cwd)
    assert res.returncode == 0, res.stderr
    return int(res.stdout)


def reported(d: Daemon, ref: int) -> dict[str, Any] | None:
    status = d.job(ref).get("trainerStatus")
    return status if status and status.get("metrics") else None


def test_a_job_on_slurm_reports_its_progress(daemon: Daemon, outdir: Path) -> None:
    gate = outdir / "gate"
    script = (f"{REPORT} --progress 45 --eta 3725 --metric loss=0.25 --metric epoch=2 && "
              f"{wait_for_gate(gate)}")
    job = tbatch(daemon, "alice", script, outdir)
    status = wait_for(lambda: reported(daemon, job), 120, "the job's report")
    assert status["progressPercentage"] == 45
    assert status["estimatedRemainingSeconds"] == 3725
    assert status["metrics"] == [{"name": "loss", "value": "0.25"},
                                 {"name": "epoch", "value": "2"}]
    daemon.wait_state(job, ["Running"])  # it reported from inside: it runs
    queue = daemon.cli("alice", "tqueue", "-h", "-j", str(job), "-O",
                       "jobid:.8 ,progress:.9 ,eta:.10 ,statecompact")
    shown_id, percent, eta, state = queue.stdout.split()
    assert (shown_id, percent, state) == (str(job), "45%", "R"), queue
    hours, minutes, seconds = (int(x) for x in eta.split(":"))
    assert 3725 - 300 <= hours * 3600 + minutes * 60 + seconds <= 3725, eta  # counting down
    wide = daemon.cli("alice", "tqueue", "--progress", "-j", str(job)).stdout
    assert "PROGRESS" in wide.splitlines()[0] and "45%" in wide, wide
    show = daemon.cli("alice", "tshow", str(job)).stdout
    assert "Progress=45% EstimatedRemaining=1:02:05" in show, show
    assert "Metrics=loss=0.25,epoch=2" in show, show
    others = daemon.cli("bob", "tshow", str(job)).stdout  # progress, not metrics
    assert "Progress=45%" in others and "Metrics=" not in others, others
    events = daemon.cli("alice", "tqueue", "--json", "-j", str(job))
    assert json.loads(events.stdout)["items"][0]["trainerStatus"]["progressPercentage"] == 45
    seen = daemon.api("GET", "/v1/events", params={"since": 0, "timeout": 0}).json()
    progress = [e for e in seen["items"] if e["type"] == "progress" and e["jobId"] == job]
    assert progress and progress[-1]["trainerStatus"]["progressPercentage"] == 45, seen
    gate.touch()
    assert daemon.wait_state(job, TERMINAL, timeout=180)["state"] == "Succeeded"


TRAIN = """
import os, sys, torch, torch.distributed as dist
from mpi_launch.trainer_status import flush, report
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(0)
x, y = torch.randn(64, 4), torch.randn(64, 1)
steps = 5
for step in range(1, steps + 1):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    report(100 * step / steps, steps - step, {"loss": loss.item(), "step": step})
assert flush(30)
dist.barrier()
dist.destroy_process_group()
# Under load this torch build (2.13, CPU) sometimes aborts in its own teardown after all
# of the above ("terminate called without an active exception", seen 1 run in 8 with
# the unit tests beside it, ranks 2 or 3, seconds after destroy_process_group). What
# this test checks is done and flushed: leave without running the interpreter's
# teardown.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""


def test_a_torch_job_on_slurm_reports_with_the_reporter(daemon: Daemon, outdir: Path
                                                         ) -> None:
    """Two nodes of two torch ranks train a little; rank 0's reports arrive (the other
    ranks' reporters send nothing), the last one kept."""
    (outdir / "train.py").write_text(TRAIN)
    doc = trainjob_doc(outdir, "ddp-progress", "torch-distributed",
                       [PYTHON, str(outdir / "train.py")], nodes=2, procs=2)
    path = outdir / "ddp-progress.json"
    path.write_text(json.dumps(doc))
    res = daemon.cli("alice", "tbatch", "--parsable", "-f", str(path), cwd=outdir)
    assert res.returncode == 0, res.stderr
    job = int(res.stdout)
    done = daemon.wait_state(job, TERMINAL, timeout=240)
    if done["state"] != "Succeeded":
        print("OUTPUT", daemon.cli("alice", "tlog", str(job)).stdout)
        print("ERRORS", daemon.cli("alice", "tlog", "-e", str(job)).stdout)
    assert done["state"] == "Succeeded", (done["reason"], done["message"])
    status = daemon.job(job)["trainerStatus"]
    assert (status["progressPercentage"], status["estimatedRemainingSeconds"]) == (100, 0)
    metrics = {m["name"]: m["value"] for m in status["metrics"]}
    assert metrics["step"] == "5" and float(metrics["loss"]) >= 0, status
    reports = [e for e in daemon.api("GET", "/v1/events", params={
        "since": 0, "timeout": 0, "limit": 1000}).json()["items"]
        if e["type"] == "progress" and e["jobId"] == job]
    assert 1 <= len(reports) <= 5, reports  # rank 0's only, the newest wins a backlog


def test_a_job_on_flux_reports_its_progress(flux_daemon: Daemon, outdir: Path) -> None:
    gate = outdir / "flux-gate"
    job = tbatch(flux_daemon, "alice", f"{REPORT} --progress 60 --metric step=12 && "
                 f"{wait_for_gate(gate)}", outdir)
    status = wait_for(lambda: reported(flux_daemon, job), 120, "the Flux job's report")
    assert (status["progressPercentage"], status["metrics"]) == (
        60, [{"name": "step", "value": "12"}])
    assert flux_daemon.job(job)["backend"] == "flux"
    gate.touch()
    assert flux_daemon.wait_state(job, TERMINAL, timeout=180)["state"] == "Succeeded"


def test_another_users_job_cannot_report_for_it(daemon: Daemon, outdir: Path) -> None:
    """bob's job reads alice's token file (refused by its mode) and reports to alice's
    job's URL with its own token (403): alice's job shows nothing of it."""
    gate = outdir / "gate2"
    alices = tbatch(daemon, "alice",
                    f"echo $KUBEFLOW_TRAINER_STATUS_URL $KUBEFLOW_TRAINER_STATUS_TOKEN "
                    f"> {outdir}/alice.env; {wait_for_gate(gate)}",
                    outdir)
    env_file = outdir / "alice.env"
    url, token = wait_for(lambda: env_file.exists() and env_file.read_text().split(), 120,
                          "alice's job to start")
    attack = (f"cat {token} > {outdir}/stolen 2>{outdir}/cat.err; echo $? > {outdir}/cat.rc; "
              f"KUBEFLOW_TRAINER_STATUS_URL={url} {REPORT} --strict --progress 99 "
              f"2> {outdir}/report.err; echo $? > {outdir}/report.rc")
    bobs = tbatch(daemon, "bob", attack, outdir)
    assert daemon.wait_state(bobs, TERMINAL, timeout=180)["state"] == "Succeeded"
    assert (outdir / "cat.rc").read_text().strip() != "0"
    assert "Permission denied" in (outdir / "cat.err").read_text()
    assert (outdir / "report.rc").read_text().strip() == "1"
    assert "403" in (outdir / "report.err").read_text()
    assert daemon.job(alices).get("trainerStatus") is None
    gate.touch()
    assert daemon.wait_state(alices, TERMINAL, timeout=180)["state"] == "Succeeded"
    assert not Path(token).exists() or wait_for(lambda: not Path(token).exists(), 90,
                                                 "the ended job's token file to go")


@pytest.fixture
def cr_bridge(k8s: K8sBed, k8s_namespace: str, testbed: dict[str, str]) -> Iterator[Daemon]:
    """The Kubernetes front door with Slurm, and the progress endpoint."""
    d = k8s_daemon(k8s, k8s_namespace, slurm=testbed)
    d.extra_toml += progress_toml(d.workdir)
    d.start()
    yield d
    release(k8s, k8s_namespace, d)


def test_a_trainjob_routed_to_slurm_shows_its_progress_in_its_status(
        k8s: K8sBed, k8s_namespace: str, cr_bridge: Daemon, outdir: Path) -> None:
    """kubectl apply a TrainJob that runs on Slurm: what it reports from inside is its
    status.trainerStatus, as Trainer writes it for pods."""
    ns, gate = k8s_namespace, outdir / "cr-gate"
    apply(k8s, ns, trainjob("reports", runtime="plain", nodes=1, image=None, backend="slurm",
                            command=["sh", "-c", f"{REPORT} --progress 45 --eta 30 "
                                     f"--metric loss=0.5 && {wait_for_gate(gate)}"]))

    def trainer_status() -> dict[str, Any] | None:
        status = k8s.get_json("-n", ns, TRAINJOBS, "reports").get("status") or {}
        reported = status.get("trainerStatus") or {}
        return reported if reported.get("metrics") else None

    status = wait_for(trainer_status, 120, "status.trainerStatus of TrainJob reports")
    assert (status["progressPercentage"], status["estimatedRemainingSeconds"]) == (45, 30)
    assert status["metrics"] == [{"name": "loss", "value": "0.5"}]
    assert status["lastUpdatedTime"].endswith("Z")
    gate.touch()
    k8s.wait_for(lambda: is_true(conditions(k8s, ns, "reports"), "Complete"), 120,
                 "TrainJob reports to be Complete")
    done = k8s.get_json("-n", ns, TRAINJOBS, "reports")["status"]["trainerStatus"]
    assert done["progressPercentage"] == 100
    assert done["metrics"] == [{"name": "loss", "value": "0.5"}]  # the last ones kept


def test_a_trainjobs_pods_get_their_token_as_trainer_mounts_it(
        k8s: K8sBed, k8s_namespace: str, cr_bridge: Daemon) -> None:
    """On Kubernetes (kwok pods run no containers): the JobSet's pods mount a Secret with
    the job's token and the CA at Trainer's path, with the three variables; a report
    made with that token (as the pod would) is the TrainJob's status.trainerStatus; the
    Secret belongs to the JobSet (gone with it)."""
    ns = k8s_namespace
    apply(k8s, ns, trainjob("pods-report", nodes=1, pod_labels={KWOK_FAIL: "true"},
                            pod_annotations={f"{KWOK_FAIL}/exit-code": "0",
                                             f"{KWOK_FAIL}/delay": "120s"}))
    js = wait_for(lambda: next((j for j in jobsets(k8s, ns)
                                if j["metadata"]["name"].startswith("pods-report")), None),
                  60, "the JobSet")
    name = js["metadata"]["name"]
    pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KUBEFLOW_TRAINER_STATUS_TOKEN"] == "/var/run/secrets/kubeflow/trainer/token"
    assert env["KUBEFLOW_TRAINER_STATUS_CA_CERT"] == "/var/run/secrets/kubeflow/trainer/ca.crt"
    url = env["KUBEFLOW_TRAINER_STATUS_URL"]
    assert url.endswith(f"/namespaces/{ns}/trainjobs/pods-report/status"), url
    assert {"name": "kubeflow-trainer", "mountPath": "/var/run/secrets/kubeflow/trainer",
            "readOnly": True} in container["volumeMounts"]
    secret = k8s.get_json("-n", ns, "secret", f"{name}-trainer-status")
    assert wait_for(lambda: k8s.get_json("-n", ns, "secret", f"{name}-trainer-status")[
        "metadata"].get("ownerReferences"), 60, "the Secret handed to its JobSet")[0][
        "name"] == name
    token = base64.b64decode(secret["data"]["token"]).decode()
    ca = cr_bridge.workdir / "pod-ca.pem"
    ca.write_bytes(base64.b64decode(secret["data"]["ca.crt"]))
    answer = httpx.post(url, json={"trainerStatus": {"progressPercentage": 12}},
                        headers={"Authorization": f"Bearer {token}"},
                        verify=ssl.create_default_context(cafile=str(ca)),
                        timeout=30)
    assert answer.status_code == 200, answer.text
    wait_for(lambda: ((k8s.get_json("-n", ns, TRAINJOBS, "pods-report").get("status") or {})
                      .get("trainerStatus") or {}).get("progressPercentage") == 12, 60,
             "the pod's report in the TrainJob's status")
    k8s.kubectl("-n", ns, "delete", TRAINJOBS, "pods-report", "--timeout=90s")
    wait_for(lambda: k8s.kubectl("-n", ns, "get", "secret", f"{name}-trainer-status",
                                 check=False).returncode != 0, 90,
             "the Secret to go with its JobSet")
