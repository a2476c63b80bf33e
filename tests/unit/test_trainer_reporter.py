"""mpi_launch.trainer_status (KEP-2779 progress reports) against a real HTTPS server on
127.0.0.1, its command line, and the pure parts of mpi_launch.trainer_callbacks."""

from __future__ import annotations

import json
import math
import os
import queue
import re
import shutil
import ssl
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import pytest

from mpi_launch import trainer_status
from mpi_launch.trainer_callbacks import (
    eta_seconds,
    kubeflow_trainer_callback,
    lightning_callback,
    numeric_metrics,
    progress_percent,
)
from mpi_launch.trainer_status import (
    ENV_CA_CERT,
    ENV_TOKEN,
    ENV_URL,
    MAX_METRICS,
    Reporter,
    build_body,
    format_metric_value,
    rank_from_env,
)
from tests.requirements import require

REPO = Path(__file__).resolve().parents[2]
STATUS_PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/job/status"
RANKS = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


@dataclass
class Seen:
    """One request the server received; ``status``: its ``trainerStatus``."""

    path: str
    headers: dict[str, str]
    body: Any

    @property
    def status(self) -> dict[str, Any]:
        return cast(dict[str, Any], self.body["trainerStatus"])


class _Server(ThreadingHTTPServer):
    seen: queue.Queue[Seen]
    release: threading.Event  # handlers wait for it (set: they answer at once)
    answer: tuple[int, str, dict[str, str]]


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        server = cast(_Server, self.server)
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        server.seen.put(Seen(self.path, dict(self.headers.items()), json.loads(raw)))
        server.release.wait(10)
        status, text, headers = server.answer
        payload = text.encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class Endpoint:
    """The running server: its URL, token file and CA, and the requests it got (``seen``)."""

    server: _Server
    url: str
    token: Path
    ca: Path
    seen: queue.Queue[Seen] = field(default_factory=queue.Queue)

    def env(self, **extra: str) -> dict[str, str]:
        return {ENV_URL: self.url, ENV_TOKEN: str(self.token), ENV_CA_CERT: str(self.ca), **extra}

    def answer_with(self, status: int, text: str = "", **headers: str) -> None:
        self.server.answer = (status, text, headers)

    def hold(self) -> threading.Event:
        self.server.release.clear()
        return self.server.release

    def next(self) -> Seen:
        return self.seen.get(timeout=5)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The server's certificate and key (``server``, ``server-key``), and ``other``, a CA
    that did not sign it."""
    require(shutil.which("openssl") is not None, "needs the openssl command")
    where = tmp_path_factory.mktemp("tls")

    def make(name: str, *key: str) -> None:
        subprocess.run(["openssl", "req", "-x509", *key, "-nodes", "-keyout",
                        str(where / f"{name}-key.pem"), "-out", str(where / f"{name}.pem"),
                        "-days", "1", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True, timeout=60)

    make("server", "-newkey", "rsa:2048")
    make("other", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")
    return {name: where / f"{name}.pem" for name in ("server", "server-key", "other")}


@pytest.fixture
def endpoint(certs: dict[str, Path], tmp_path: Path) -> Iterator[Endpoint]:
    server = _Server(("127.0.0.1", 0), _Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs["server"], certs["server-key"])
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.release = threading.Event()
    server.release.set()
    server.answer = (200, "{}", {"Content-Type": "application/json"})
    token = tmp_path / "token"
    token.write_text("  s3cret-token\n")
    point = Endpoint(server, f"https://127.0.0.1:{server.server_address[1]}{STATUS_PATH}",
                     token, certs["server"])
    server.seen = point.seen
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    yield point
    server.release.set()
    server.shutdown()
    server.server_close()
    thread.join(5)


def reporter(env: Mapping[str, str], **kwargs: Any) -> Reporter:
    made = Reporter.from_env(env, **kwargs)
    assert made is not None
    return made


def test_the_server_gets_the_body_and_the_bearer_token(endpoint: Endpoint) -> None:
    r = reporter(endpoint.env())
    assert r.report(42.6, 30.4, {"loss": 0.25, "epoch": 2, "converged": False, "note": "warm"},
                    block=True)
    seen = endpoint.next()
    assert seen.path == STATUS_PATH
    assert seen.headers["Authorization"] == "Bearer s3cret-token"
    assert seen.headers["Content-Type"] == "application/json"
    stamp = seen.status.pop("lastUpdatedTime")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp)
    assert abs(datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
               - datetime.now(UTC)) < timedelta(minutes=1)
    assert seen.body == {"trainerStatus": {
        "progressPercentage": 43, "estimatedRemainingSeconds": 30,
        "metrics": [{"name": "loss", "value": "0.25"}, {"name": "epoch", "value": "2"},
                    {"name": "converged", "value": "false"}, {"name": "note", "value": "warm"}]}}
    assert endpoint.seen.empty()


@pytest.mark.parametrize(("given", "progress", "eta"), [
    (150, 100, 150), (-3, 0, None), (99.4, 99, 99), (0.6, 1, 1), (0, 0, 0), (-0.2, 0, None),
    (math.nan, None, None), (math.inf, None, None), ("50", None, None), (None, None, None),
    (1e300, 100, 2**31 - 1)])
def test_progress_is_clamped_and_a_negative_eta_left_out(given: Any, progress: int | None,
                                                          eta: int | None) -> None:
    status = build_body(given, given)["trainerStatus"]
    assert (status.get("progressPercentage"), status.get("estimatedRemainingSeconds")) == (
        progress, eta)


def test_metrics_are_named_strings() -> None:
    metrics = {"third": 1 / 3, "tiny": 1e-7, "big": 12345678.9, "steps": 12345678, "yes": True,
               "no": False, "": 1, "  ": 2, "unset": None, "text": "warm", "bad": math.nan}
    assert build_body(metrics=metrics)["trainerStatus"]["metrics"] == [
        {"name": "third", "value": "0.333333"}, {"name": "tiny", "value": "1e-07"},
        {"name": "big", "value": "1.23457e+07"}, {"name": "steps", "value": "12345678"},
        {"name": "yes", "value": "true"}, {"name": "no", "value": "false"},
        {"name": "text", "value": "warm"}, {"name": "bad", "value": "nan"}]
    many = build_body(metrics={f"m{i}": i for i in range(MAX_METRICS + 6)})["trainerStatus"]
    assert [m["name"] for m in many["metrics"]] == [f"m{i}" for i in range(MAX_METRICS)]
    assert "metrics" not in build_body(metrics={"": 1})["trainerStatus"]
    assert format_metric_value(2.5) == "2.5" and format_metric_value(-0.0) == "-0"


def test_the_time_is_utc_to_the_second() -> None:
    paris = timezone(timedelta(hours=1))
    now = datetime(2025, 1, 23, 11, 30, 45, 987654, tzinfo=paris)
    assert build_body(now=now) == {"trainerStatus": {"lastUpdatedTime": "2025-01-23T10:30:45Z"}}


def test_a_wrong_ca_fails_without_raising(endpoint: Endpoint, certs: dict[str, Path],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    r = reporter(endpoint.env(**{ENV_CA_CERT: str(certs["other"])}))
    assert r.enabled
    assert r.report(10, block=True) is False
    assert r.report(20, block=True) is False
    err = capsys.readouterr().err
    assert err.count("trainer_status: warning:") == 1 and "CERTIFICATE_VERIFY_FAILED" in err
    assert endpoint.seen.empty()


@pytest.mark.parametrize(("change", "problem"), [
    ({ENV_TOKEN: "{tmp}/absent"}, "cannot read the token file"),
    ({ENV_TOKEN: "{tmp}/empty"}, "is empty"),
    ({ENV_TOKEN: ""}, f"{ENV_TOKEN} is not"),
    ({ENV_CA_CERT: "{tmp}/absent"}, "cannot use the CA certificate"),
    ({ENV_CA_CERT: "{tmp}/empty"}, "cannot use the CA certificate"),
    ({ENV_CA_CERT: ""}, f"{ENV_CA_CERT} is not"),
    ({ENV_URL: "http://127.0.0.1:9/status"}, "is not an https URL"),
])
def test_a_bad_configuration_warns_once_and_sends_nothing(
        endpoint: Endpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        change: dict[str, str], problem: str) -> None:
    (tmp_path / "empty").write_text("\n")
    r = reporter(endpoint.env(**{k: v.format(tmp=tmp_path) for k, v in change.items()}))
    assert not r.enabled
    assert r.report(50, block=True) is False
    assert r.report(60) is False
    assert r.flush(timeout=1)
    err = capsys.readouterr().err
    assert err.count("trainer_status: warning:") == 1 and problem in err
    assert endpoint.seen.empty()


def test_no_url_no_reporter(endpoint: Endpoint) -> None:
    assert Reporter.from_env({k: v for k, v in endpoint.env().items() if k != ENV_URL}) is None
    assert Reporter.from_env(endpoint.env(**{ENV_URL: " "})) is None


def test_refusals_are_reported_once_per_kind(endpoint: Endpoint,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    r = reporter(endpoint.env())
    endpoint.answer_with(400, json.dumps({"kind": "Status", "message": "progress too high"}))
    assert r.report(10, block=True) is False
    assert r.report(11, block=True) is False
    endpoint.answer_with(302, "", Location=endpoint.url + "/elsewhere")
    assert r.report(12, block=True) is False  # not followed: the token stays at the URL
    endpoint.answer_with(429, "slow down", **{"Retry-After": "30"})
    assert r.report(13, block=True) is False
    assert [endpoint.next().status["progressPercentage"] for _ in range(4)] == [10, 11, 12, 13]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3
    assert "400 progress too high" in err[0] and "302" in err[1] and "429 slow down" in err[2]
    assert r._not_before - time.monotonic() > 20  # backing off as asked
    endpoint.answer_with(200, "{}")
    assert r.report(14)  # queued behind the back-off ...
    assert r.flush(timeout=5)  # ... which flush does not wait out
    assert endpoint.next().status["progressPercentage"] == 14
    assert endpoint.seen.empty()


def test_rank_from_env() -> None:
    assert rank_from_env({}) == 0
    assert rank_from_env({"RANK": "3", "SLURM_PROCID": "0", "PMI_RANK": "1"}) == 3
    assert rank_from_env({"SLURM_PROCID": "2", "OMPI_COMM_WORLD_RANK": "5"}) == 2
    assert rank_from_env({"OMPI_COMM_WORLD_RANK": "5", "PMI_RANK": "6"}) == 5
    assert rank_from_env({"RANK": "", "SLURM_PROCID": "x", "PMI_RANK": "1"}) == 1


@pytest.mark.parametrize("ranks", [{"RANK": "1"}, {"SLURM_PROCID": "2"},
                                   {"OMPI_COMM_WORLD_RANK": "3"}, {"PMI_RANK": "4"}])
def test_only_rank_zero_reports(endpoint: Endpoint, ranks: dict[str, str]) -> None:
    quiet = reporter(endpoint.env(**ranks))
    assert not quiet.enabled
    assert quiet.report(10, block=True) is False and quiet.report(11) is False
    assert quiet.flush(timeout=1)
    assert reporter(endpoint.env(**ranks), all_ranks=True).report(12, block=True)
    assert reporter(endpoint.env(**{**ranks, "RANK": "0"})).report(13, block=True)
    assert [endpoint.next().status["progressPercentage"] for _ in range(2)] == [12, 13]
    assert endpoint.seen.empty()


def test_background_reports_coalesce_and_flush_waits(endpoint: Endpoint) -> None:
    r = reporter(endpoint.env())
    release = endpoint.hold()
    assert r.report(1)
    assert endpoint.next().status["progressPercentage"] == 1  # in flight, held
    for progress in (2, 3, 4, 5):
        assert r.report(progress, metrics={"step": progress})
    assert r.flush(timeout=0.05) is False  # still held
    release.set()
    assert r.flush(timeout=5)
    newest = endpoint.seen.get_nowait()  # there by the time flush returns
    assert newest.status["progressPercentage"] == 5
    assert newest.status["metrics"] == [{"name": "step", "value": "5"}]
    assert endpoint.seen.empty()
    assert r.flush(timeout=0)  # nothing queued


def test_a_blocking_report_replaces_the_queued_one(endpoint: Endpoint) -> None:
    r = reporter(endpoint.env(), min_interval=60)  # the thread sends 2 only if hurried
    release = endpoint.hold()
    assert r.report(1)
    assert endpoint.next().status["progressPercentage"] == 1
    assert r.report(2)  # queued, then superseded by the blocking report
    done: queue.Queue[bool] = queue.Queue()
    sender = threading.Thread(target=lambda: done.put(r.report(3, block=True)))
    sender.start()
    release.set()
    assert done.get(timeout=5)
    sender.join(5)
    assert r.flush(timeout=5)
    assert endpoint.next().status["progressPercentage"] == 3
    assert endpoint.seen.empty()


def test_the_module_level_reporter(endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trainer_status, "_default", None)
    for name in RANKS:
        monkeypatch.delenv(name, raising=False)
    for name, value in endpoint.env().items():
        monkeypatch.setenv(name, value)
    assert trainer_status.report(70, metrics={"loss": 0.5})
    assert trainer_status.flush(timeout=5)
    assert endpoint.next().status["progressPercentage"] == 70
    assert trainer_status.default_reporter() is trainer_status.default_reporter()


def run_cli(*args: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO),
            "LANG": "C.UTF-8"}
    return subprocess.run([sys.executable, "-m", "mpi_launch.trainer_status", *args],
                          env={**base, **env}, cwd=REPO, capture_output=True, text=True,
                          timeout=30, check=False)


def test_the_command_sends_one_report(endpoint: Endpoint) -> None:
    done = run_cli("--progress", "50", "--eta", "30", "--metric", "loss=0.25",
                   "--metric", "epoch=2", env=endpoint.env())
    assert (done.returncode, done.stderr) == (0, "")
    assert endpoint.next().status["metrics"] == [{"name": "loss", "value": "0.25"},
                                                 {"name": "epoch", "value": "2"}]
    assert run_cli("--progress", "60", env=endpoint.env(RANK="1")).returncode == 0  # quiet
    assert endpoint.seen.empty()


def test_the_command_fails(endpoint: Endpoint) -> None:
    """A refusal is a warning (a `set -e` script goes on training); --strict: exit 1."""
    endpoint.answer_with(403, "forbidden")
    refused = run_cli("--strict", "--progress", "50", env=endpoint.env())
    assert refused.returncode == 1 and "403 forbidden" in refused.stderr
    assert "error: the report was not accepted" in refused.stderr
    unset = run_cli("--strict", "--progress", "50", env={})
    assert unset.returncode == 1 and ENV_URL in unset.stderr
    lenient = run_cli("--progress", "50", env={})
    assert lenient.returncode == 0 and "warning:" in lenient.stderr and ENV_URL in lenient.stderr
    for bad in (["--metric", "loss"], ["--metric", "=1"], ["--progress", "half"], ["--nope"]):
        usage = run_cli(*bad, env=endpoint.env())
        assert usage.returncode == 2 and "usage:" in usage.stderr, bad
    assert endpoint.next().status["progressPercentage"] == 50
    assert endpoint.seen.empty()


def test_progress_percent() -> None:
    assert progress_percent(25, 100) == 25.0
    assert progress_percent(150, 100) == 100.0
    assert progress_percent(1, 3) == pytest.approx(100 / 3)
    for total in (0, -5, None, math.inf, math.nan, "100", True):
        assert progress_percent(5, total) is None


def test_eta_seconds() -> None:
    assert eta_seconds(10, 100, 20.0) == 180.0  # 2 s a step, 90 to go
    assert eta_seconds(15, 100, 20.0, start_step=5) == 170.0  # resumed at 5
    assert eta_seconds(120, 100, 20.0) == 0.0
    assert eta_seconds(5, 100, 20.0, start_step=5) is None  # no step done yet
    assert eta_seconds(5, 100, None) is None
    assert eta_seconds(5, 100, -1.0) is None
    assert eta_seconds(5, math.inf, 20.0) is None


class Tensor:
    def __init__(self, *values: float) -> None:
        self.values = values

    def item(self) -> float:
        if len(self.values) != 1:
            raise ValueError("only one element tensors can be converted")
        return self.values[0]


def test_numeric_metrics() -> None:
    values = {"loss": 0.5, "step": 7, "flag": True, "name": "x", "t": Tensor(2.0),
              "many": Tensor(1.0, 2.0), "list": [1.0], "s": Tensor(3)}
    assert numeric_metrics(values) == {"loss": 0.5, "step": 7, "t": 2.0, "s": 3}


class Sink:
    """A reporter that keeps what it is given, with a clock the test sets (``now``)."""

    def __init__(self) -> None:
        self.reports: list[tuple[float | None, float | None, dict[str, object]]] = []
        self.flushes, self.now = 0, 100.0

    def report(self, progress_percentage: float | None = None,
               estimated_remaining_seconds: float | None = None,
               metrics: Mapping[str, object] | None = None, *, block: bool = False) -> bool:
        self.reports.append((progress_percentage, estimated_remaining_seconds,
                             dict(metrics or {})))
        return True

    def flush(self, timeout: float = 5.0) -> bool:
        self.flushes += 1
        return True

    def clock(self) -> float:
        return self.now


def test_the_transformers_callback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match="'transformers'"):
        kubeflow_trainer_callback()
    fake = types.ModuleType("transformers")
    fake.TrainerCallback = type("TrainerCallback", (), {})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "transformers", fake)
    sink = Sink()
    callback = kubeflow_trainer_callback(sink, every_n_steps=5)
    assert isinstance(callback, fake.TrainerCallback)
    callback.clock = sink.clock
    state = types.SimpleNamespace(global_step=0, max_steps=100, is_world_process_zero=True)
    callback.on_train_begin(None, state, None)
    state.global_step, sink.now = 5, 110.0
    callback.on_step_end(None, state, None)
    state.global_step = 7
    callback.on_step_end(None, state, None)  # not a 5th step
    sink.now = 114.0
    callback.on_log(None, state, None, logs={"loss": 0.5, "epoch": 0.07, "note": "x"})
    callback.on_train_end(None, state, None)
    assert sink.reports == [(5.0, 190.0, {}), (7.0, 186.0, {"loss": 0.5, "epoch": 0.07}),
                            (100, 0, {"loss": 0.5, "epoch": 0.07})]
    assert sink.flushes == 1
    state.is_world_process_zero = False
    callback.on_step_end(None, state, None)
    callback.on_log(None, state, None, logs={"loss": 0.1})
    callback.on_train_end(None, state, None)
    assert len(sink.reports) == 3


def test_the_lightning_callback(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("lightning", "lightning.pytorch", "pytorch_lightning"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match="'lightning'"):
        lightning_callback()
    fake = types.ModuleType("pytorch_lightning")
    fake.Callback = type("Callback", (), {})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pytorch_lightning", fake)
    sink = Sink()
    callback = lightning_callback(sink, interval=10)
    assert isinstance(callback, fake.Callback)
    callback.clock = sink.clock
    trainer = types.SimpleNamespace(global_step=0, estimated_stepping_batches=200,
                                    is_global_zero=True, sanity_checking=True,
                                    callback_metrics={"val_loss": Tensor(9.0)})
    callback.on_train_start(trainer, None)
    callback.on_validation_end(trainer, None)  # the sanity check: not reported
    trainer.global_step, sink.now = 10, 105.0
    callback.on_train_batch_end(trainer, None, None, None, 9)
    trainer.global_step, sink.now = 11, 108.0
    callback.on_train_batch_end(trainer, None, None, None, 10)  # within the interval
    trainer.global_step, sink.now = 30, 116.0
    callback.on_train_batch_end(trainer, None, None, None, 29)
    trainer.sanity_checking = False
    trainer.callback_metrics = {"val_loss": Tensor(0.25), "hist": Tensor(1.0, 2.0)}
    callback.on_validation_end(trainer, None)
    trainer.estimated_stepping_batches = math.inf
    callback.on_validation_end(trainer, None)
    callback.on_train_end(trainer, None)
    assert sink.reports == [(5.0, 95.0, {}), (15.0, 16 / 30 * 170, {}),
                            (15.0, 16 / 30 * 170, {"val_loss": 0.25}),
                            (None, None, {"val_loss": 0.25}), (100, 0, {"val_loss": 0.25})]
    assert sink.flushes == 1


def test_the_last_report_is_sent_when_the_script_exits(endpoint: Endpoint) -> None:
    """A script that reports and exits at once: the newest report still goes (atexit)."""
    script = ("from mpi_launch.trainer_status import report\n"
              "for p in (10, 50, 100):\n    report(p)\n")
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO),
            "LANG": "C.UTF-8"}
    done = subprocess.run([sys.executable, "-c", script], env={**base, **endpoint.env()},
                          cwd=REPO, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    seen = [endpoint.next().status["progressPercentage"]]
    while not endpoint.seen.empty():
        seen.append(endpoint.next().status["progressPercentage"])
    assert seen[-1] == 100, seen  # the earlier ones may coalesce away


def test_metrics_the_daemon_would_refuse_are_left_out() -> None:
    body = build_body(metrics={"empty": "", "ok": 1})
    assert body["trainerStatus"]["metrics"] == [{"name": "ok", "value": "1"}]
    many = build_body(metrics={f"m{i}": "v" * 250 for i in range(64)})
    kept = many["trainerStatus"]["metrics"]
    assert 0 < len(kept) < 64 and kept[0]["name"] == "m0"
    assert len(json.dumps(many).encode()) <= 8192
