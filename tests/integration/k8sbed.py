"""Helpers for tests against the Kubernetes test bed (``testbed/k8s/k8s.sh up``).

The bed (etcd, kube-apiserver, controller-manager, scheduler, kwok nodes, the JobSet
controller, the Kubeflow Trainer CRDs) writes its facts to
``/run/hpc-bridge-testbed/k8s/k8s.env``. Tests drive it with the bed's own kubectl
(``$K8S_BIN_DIR/kubectl``, the version the bed was built at), never the one on PATH.
The fixtures themselves are in ``conftest_k8s.py``.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.bed import read_env_file

K8S_ENV = Path("/run/hpc-bridge-testbed/k8s/k8s.env")
#: What the bridge writes in ``spec.managedBy``; the bed's TrainJob CRD admits it.
MANAGED_BY = "hpc-bridge.io/controller"
#: Every namespace ``new_namespace`` makes carries this label (to find leftovers).
TEST_NAMESPACE_LABEL = "hpc-bridge.io/test"


def read_k8s_env(path: Path = K8S_ENV) -> dict[str, str] | None:
    """The bed's facts (``KEY=VALUE`` lines), or None when it is not up."""
    return read_env_file(path)


def wait_for(predicate: Callable[[], object], timeout: float, what: str,
             interval: float = 0.2) -> None:
    """Poll ``predicate`` every ``interval`` s until it is truthy; fail the test with
    ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


class KubectlError(subprocess.CalledProcessError):
    """A failed kubectl call; unlike its base class, it shows kubectl's stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstderr: {(self.stderr or '').strip()}"


@dataclass(frozen=True)
class K8sBed:
    """The running Kubernetes test bed, driven through its kubectl."""

    env: dict[str, str]
    kubeconfig: str
    bin_dir: str

    @classmethod
    def from_env(cls, env: dict[str, str]) -> K8sBed:
        return cls(env=env, kubeconfig=env["KUBECONFIG"], bin_dir=env["K8S_BIN_DIR"])

    @property
    def kubectl_path(self) -> str:
        return str(Path(self.bin_dir) / "kubectl")

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run ``$K8S_BIN_DIR/kubectl --kubeconfig KUBECONFIG ARGS``; text output captured.
        With ``check``, a non-zero exit raises ``KubectlError`` (with kubectl's stderr)."""
        cmd = [self.kubectl_path, "--kubeconfig", self.kubeconfig, *args]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True,
                              timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, cmd, proc.stdout, proc.stderr)
        return proc

    def get_json(self, *args: str) -> dict[str, Any]:
        """``kubectl get ARGS -o json``, parsed (an object, or a ``List`` with ``items``)."""
        data = json.loads(self.kubectl("get", *args, "-o", "json").stdout)
        assert isinstance(data, dict)
        return data

    def wait_for(self, predicate: Callable[[], object], timeout: float, what: str) -> None:
        """Poll every 0.2 s; fail the test with ``what`` on timeout."""
        wait_for(predicate, timeout, what)

    def apiserver_ready(self) -> bool:
        try:
            proc = self.kubectl("get", "--raw", "/readyz", check=False, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return proc.returncode == 0 and proc.stdout.strip() == "ok"

    def new_namespace(self, prefix: str = "hpcb-") -> str:
        """Create a namespace ``PREFIX<6 hex>`` and wait for its default
        ServiceAccount (pods cannot be created before it exists)."""
        name = f"{prefix}{secrets.token_hex(3)}"
        manifest = json.dumps({"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": name,
                                            "labels": {TEST_NAMESPACE_LABEL: "true"}}})
        self.kubectl("create", "-f", "-", input=manifest)
        self.wait_for(lambda: self.kubectl("-n", name, "get", "serviceaccount", "default",
                                           check=False).returncode == 0,
                      30, f"the default ServiceAccount of namespace {name}")
        return name

    def delete_namespace(self, name: str) -> None:
        """Delete without waiting (the namespace controller finishes it)."""
        self.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found",
                     check=False)
