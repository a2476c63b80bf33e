"""Fixtures for tests against the Kubernetes test bed (``testbed/k8s/k8s.sh up``).

Imported by tests/integration/conftest.py, so every integration test may ask for
``k8s`` (session: the running bed, a ``K8sBed``), ``k8s_namespace`` (a fresh
namespace ``hpcb-<6 hex>``, deleted afterwards without waiting) and ``k8s_alice`` (a
started daemon whose Kubernetes back end maps alice to that namespace as its service
account ``alice``, lets the scheduler place pods and runs ``busybox:1.36`` for jobs that
name no image and whose runtime names none: the built-in runtimes name one). As in
conftest_slurm.py, each fixture function is named ``*_fixture`` and registered
under the short name. Under ``CI=true`` a missing bed FAILS the tests; elsewhere
they skip with the reason. The helpers live in ``tests/integration/k8sbed.py``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.integration.bed import Daemon, cleanup
from tests.integration.k8s_users import start_bridge, users_namespace
from tests.integration.k8sbed import K8S_ENV, K8sBed, read_k8s_env
from tests.requirements import require

_START = "start it with: bash testbed/k8s/k8s.sh up"


@pytest.fixture(scope="session", name="k8s")
def k8s_fixture() -> K8sBed:
    env = read_k8s_env()
    require(env is not None, f"the Kubernetes test bed is not up ({K8S_ENV} missing); {_START}")
    assert env is not None
    require("KUBECONFIG" in env and "K8S_BIN_DIR" in env,
            f"{K8S_ENV} lacks KUBECONFIG or K8S_BIN_DIR; {_START}")
    bed = K8sBed.from_env(env)
    require(os.access(bed.kubectl_path, os.X_OK), f"no {bed.kubectl_path}; {_START}")
    require(bed.apiserver_ready(),
            f"the Kubernetes test bed's apiserver ({env.get('K8S_APISERVER', '?')}) is not "
            f"ready; {_START}")
    return bed


@pytest.fixture(name="k8s_namespace")
def k8s_namespace_fixture(k8s: K8sBed) -> Iterator[str]:
    name = k8s.new_namespace()
    yield name
    k8s.delete_namespace(name)


@pytest.fixture(name="k8s_alice")
def k8s_alice_fixture(k8s: K8sBed, k8s_namespace: str) -> Iterator[Daemon]:
    users_namespace(k8s, k8s_namespace)
    daemon = start_bridge(k8s, k8s_namespace, placement="constraints", **{
        "users.alice.namespace": k8s_namespace, "users.alice.service_account": "alice",
        "default_image": "busybox:1.36"})
    yield daemon
    daemon.stop()
    cleanup(daemon.workdir)
