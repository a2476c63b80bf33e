"""Helpers for tests against the real test bed: the daemon as a process, the CLI as a user.

The bed itself (munge, slurmctld, 4 slurmd, slurmrestd) is started by
``testbed/slurm.sh up``, which writes ``/run/hpc-bridge-testbed/testbed.env``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

TESTBED_ENV = Path("/run/hpc-bridge-testbed/testbed.env")
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def read_env_file(path: Path) -> dict[str, str] | None:
    """``KEY=VALUE`` lines of a bed's env file (quotes stripped), or None when absent."""
    if not path.exists():
        return None
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip().strip('"').strip("'")
    return env


def read_testbed_env() -> dict[str, str] | None:
    """The bed's facts, or None when it is not up."""
    return read_env_file(TESTBED_ENV)


def shared_dir(prefix: str) -> Path:
    """A fresh directory every test user may write to (job output goes here)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o1777)
    return path


def wait_for(predicate: Callable[[], Any], timeout: float, what: str,
             interval: float = 0.5) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail with ``what``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


@dataclass
class Daemon:
    """An ``hpc-bridge serve`` process with its own state dir and socket."""

    workdir: Path
    backend_settings: dict[str, Any]
    engine_settings: dict[str, Any] = field(default_factory=dict)
    daemon_settings: dict[str, Any] = field(default_factory=dict)
    runtime_paths: list[str] = field(default_factory=list)
    #: The one back end configured: ``[backends.<backend_name>] kind = <backend_kind>``.
    backend_name: str = "slurm"
    backend_kind: str = "slurm"
    extra_env: dict[str, str] = field(default_factory=dict)
    #: More TOML appended to the configuration (other back ends, front doors).
    extra_toml: str = ""
    proc: subprocess.Popen[bytes] | None = None
    _client: httpx.Client | None = None

    @property
    def socket(self) -> Path:
        return self.workdir / "run" / "bridge.sock"

    @property
    def config(self) -> Path:
        return self.workdir / "bridge.toml"

    @property
    def log(self) -> Path:
        return self.workdir / "daemon.log"

    def write_config(self) -> None:
        def toml(v: Any) -> str:
            return json.dumps(v) if not isinstance(v, bool) else str(v).lower()

        lines = ["[daemon]", f"state_dir = {toml(str(self.workdir / 'state'))}",
                 f"socket = {toml(str(self.socket))}", 'log_format = "json"',
                 'log_level = "info"']
        lines += [f"{k} = {toml(v)}" for k, v in self.daemon_settings.items()]
        lines += ["", "[runtimes]", f"paths = {toml(self.runtime_paths)}"]
        lines += ["", "[engine]", f"default_backend = {toml(self.backend_name)}"]
        engine = {"poll_interval": 1.0, "submit_timeout": 10.0, "retry_cap": 5.0,
                  **self.engine_settings}
        lines += [f"{k} = {toml(v)}" for k, v in engine.items()]
        lines += ["", f"[backends.{self.backend_name}]", f"kind = {toml(self.backend_kind)}"]
        lines += [f"{k} = {toml(v)}" for k, v in self.backend_settings.items()]
        self.config.write_text("\n".join(lines) + "\n\n" + self.extra_toml)

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.workdir.chmod(0o755)
        self.write_config()
        logf = self.log.open("ab")
        self.proc = subprocess.Popen([str(BIN / "hpc-bridge"), "serve", "--config",
                                      str(self.config)], stdout=logf, stderr=logf,
                                     stdin=subprocess.DEVNULL,
                                     env={**os.environ, **self.extra_env})
        wait_for(self._healthy, 30, f"the daemon to serve (log: {self.log})", 0.2)
        self.socket.parent.chmod(0o755)

    def _healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"daemon exited with {self.proc.returncode}:\n"
                                 + self.log.read_text()[-3000:])
        try:
            return bool(self.api("GET", "/v1/healthz").json().get("ready"))
        except (httpx.HTTPError, OSError):
            return False

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, as in a crash."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.terminate()
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            # What it waits for, in its log (bridge.daemon.dump_tasks), then make way.
            for sig in (signal.SIGUSR2, signal.SIGUSR1):
                self.proc.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(3)
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError("the daemon did not stop within 30 s of SIGTERM; its "
                                 "tasks and threads:\n" + self.log.read_text()[-12000:]
                                 ) from None

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request to the daemon's API as the test process's user (root).

        One client for the daemon's life (building an httpx client costs tens of ms:
        it loads the CA bundle); ``Connection: close`` so that a killed and restarted
        daemon never meets a stale pooled connection."""
        if self._client is None:
            self._client = httpx.Client(transport=httpx.HTTPTransport(uds=str(self.socket)),
                                        base_url="http://bridge", timeout=30,
                                        headers={"Connection": "close"})
        return self._client.request(method, path, **kwargs)

    def job(self, ref: str | int) -> dict[str, Any]:
        resp = self.api("GET", f"/v1/jobs/{ref}")
        resp.raise_for_status()
        data: dict[str, Any] = resp.json()
        return data

    def wait_state(self, ref: str | int, states: Sequence[str], timeout: float = 90) -> dict[
            str, Any]:
        def check() -> dict[str, Any] | None:
            job = self.job(ref)
            return job if job["state"] in states else None

        try:
            result: dict[str, Any] = wait_for(check, timeout, f"job {ref} to reach {states}")
        except AssertionError:
            raise AssertionError(f"job {ref}: {json.dumps(self.job(ref), indent=1)[:3000]}"
                                 ) from None
        return result

    def cli(self, user: str, tool: str, *args: str, cwd: Path | None = None,
            env: dict[str, str] | None = None, stdin: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a CLI tool (``tbatch`` …) as ``user`` through runuser, like a real login."""
        base_env = {"PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",
                    "HPC_BRIDGE_SOCKET": str(self.socket), "LANG": "C.UTF-8",
                    "HOME": f"/home/{user}" if user != "root" else "/root"}
        if os.environ.get("PYTHONPATH"):  # a worktree's code, not main's editable install
            base_env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        base_env.update(env or {})
        argv = [str(BIN / tool), *args]
        if user != "root":
            argv = ["runuser", "-u", user, "--", "env", "-i",
                    *[f"{k}={v}" for k, v in base_env.items()], *argv]
            run_env = None
        else:
            run_env = base_env
        return subprocess.run(argv, cwd=cwd, env=run_env, input=stdin, capture_output=True,
                              text=True, timeout=timeout, check=False)


def trainjob_doc(outdir: Path, name: str, runtime: str, command: list[str], *,
                 nodes: int = 1, procs: int = 1) -> dict[str, Any]:
    """A TrainJob document running ``command`` in ``outdir`` (output ``NAME-%j.out``)."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "annotations": {
            "hpc-bridge.io/scheduling": json.dumps({"chdir": str(outdir),
                                                    "output": f"{name}-%j.out",
                                                    "time_limit_minutes": 10})}},
        "spec": {"runtimeRef": {"name": runtime},
                 "trainer": {"numNodes": nodes, "numProcPerNode": procs,
                             "command": command}},
    }


def squeue_bridge_jobs(root: str | None = None) -> list[dict[str, Any]]:
    """Every job slurmctld knows whose comment marks it as the bridge's (the cluster
    whose commands live in the chroot ``root``, if given; else the host's)."""
    argv = ["squeue", "--json", "--states=all"]
    out = subprocess.run(["chroot", root, *argv] if root else argv, capture_output=True,
                         text=True, check=True, timeout=60).stdout
    jobs = json.loads(out)["jobs"]
    return [j for j in jobs if str(j.get("comment") or "").startswith("hpc-bridge:")]


def slurm_bed_script(*args: str) -> None:
    subprocess.run(["bash", str(REPO / "testbed" / "slurm.sh"), *args], check=True,
                   timeout=180)


def fresh_daemon_dir(name: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=f"hpcb-{name}-", dir="/tmp"))
    path.chmod(0o755)
    return path


def cleanup(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def in_ci() -> bool:
    return os.environ.get("CI") == "true"
