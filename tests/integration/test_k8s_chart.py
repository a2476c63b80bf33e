"""The Helm chart (charts/hpc-bridge) with the real tools on the real bed: ``helm lint``,
``helm template | kubeconform -strict`` against schemas generated from the bed's
apiserver and CRDs (testbed/k8s/schemas.sh), ``hpc-bridge check-config`` on the TOML
each documented set-up renders, and ``helm install`` / ``helm upgrade`` on the bed.
kwok runs no containers, so the test runs the daemon itself, as the pod would: with
the ServiceAccount the chart made (a token of it) and the ConfigMap the chart rendered,
and that daemon completes a TrainJob."""

from __future__ import annotations

import base64
import json
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.bed import BIN, REPO, cleanup, fresh_daemon_dir, wait_for
from tests.integration.k8s_bridge import (
    TRAINJOBS,
    all_trainjobs,
    apply,
    conditions,
    is_true,
    trainjob,
)
from tests.integration.k8sbed import K8sBed
from tests.integration.mqtt import Subscriber, bed_broker
from tests.integration.test_k8s_leader import Replica, _free_port
from tests.integration.test_k8s_rbac import service_account_kubeconfig
from tests.requirements import require

pytestmark = pytest.mark.integration

CHART = REPO / "charts" / "hpc-bridge"
SETUPS = sorted((CHART / "ci").glob("*.yaml"))


def _tool(k8s: K8sBed, name: str) -> str:
    path = Path(k8s.env["K8S_BIN_DIR"]) / name
    require(path.exists(), f"{path} is missing: bash testbed/k8s/build.sh")
    return str(path)


def _run(*argv: str, input: str | None = None, timeout: float = 180
         ) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout,
                         check=False)
    assert res.returncode == 0, f"{' '.join(argv[:3])} …: {res.stdout[-2000:]}{res.stderr[-3000:]}"
    return res


def _helm(k8s: K8sBed, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return _run(_tool(k8s, "helm"), "--kubeconfig", k8s.kubeconfig, *args, timeout=timeout)


def _kube_version(k8s: K8sBed) -> str:
    return k8s.env.get("K8S_VERSION", "v1.34.4").lstrip("v")


@pytest.fixture(scope="module")
def schemas(k8s: K8sBed) -> list[str]:
    """kubeconform ``-schema-location`` arguments: the chart's own CRDs first (what the
    chart installs), then the apiserver's kinds and CRDs."""
    res = _run("bash", str(REPO / "testbed" / "k8s" / "schemas.sh"), timeout=600)
    chart, bed = res.stdout.strip().splitlines()[-2:]
    return ["-schema-location", chart, "-schema-location", bed]


@pytest.mark.parametrize("setup", SETUPS, ids=[p.stem for p in SETUPS])
def test_each_setup_lints_validates_strictly_and_renders_a_valid_config(
        k8s: K8sBed, schemas: list[str], setup: Path, tmp_path: Path) -> None:
    version = _kube_version(k8s)
    _helm(k8s, "lint", "--strict", "--kube-version", version, str(CHART), "-f", str(setup))
    rendered = _helm(k8s, "template", "hpcb", str(CHART), "--namespace", "hpc-bridge-system",
                     "--kube-version", version, "-f", str(setup)).stdout
    check = _run(_tool(k8s, "kubeconform"), "-strict", "-summary", "-kubernetes-version",
                 version, *schemas, input=rendered)
    assert "Invalid: 0, Errors: 0, Skipped: 0" in check.stdout, check.stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap",
            "Service", "ClusterTrainingRuntime"} <= kinds
    # The ClusterRoles are those of files/rbac.yaml, the file the RBAC test runs; the
    # bridge's own is bound to the chart's ServiceAccount.
    shipped = {d["metadata"]["name"]: d["rules"]
               for d in yaml.safe_load_all((CHART / "files" / "rbac.yaml").read_text())
               if d and d["kind"] == "ClusterRole"}
    roles = {d["metadata"]["labels"]["hpc-bridge.io/role"]: d for d in docs
             if d["kind"] == "ClusterRole"}
    assert {name: role["rules"] for name, role in roles.items()} == shipped
    binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == roles["hpc-bridge"]["metadata"]["name"]
    # The daemon accepts the configuration the chart renders.
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["bridge.toml"]
    toml = tomllib.loads(config)
    for backend in toml["backends"].values():
        if "jwt_key" in backend:  # the Secret's mount point: a file here
            key = tmp_path / "jwt.key"
            key.write_bytes(b"\0" * 32)
            config = config.replace(backend["jwt_key"], str(key))
    path = tmp_path / "bridge.toml"
    path.write_text(config)
    _run(str(BIN / "hpc-bridge"), "check-config", "--config", str(path))
    deploy = next(d for d in docs if d["kind"] == "Deployment")
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v1/healthz?ready=1"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v1/healthz"
    assert toml["leader_election"]["kind"] == "kubernetes"
    # Metrics, where a set-up enables them: the listener, the container port and the
    # Service port agree.
    service = next(d for d in docs if d["kind"] == "Service")
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    if "metrics" in toml:
        port = int(toml["metrics"]["listen"].rpartition(":")[2])
        assert toml["metrics"]["listen"] == f"0.0.0.0:{port}"
        assert container_ports["metrics"] == port
        assert ports["metrics"]["port"] == port and ports["metrics"]["targetPort"] == "metrics"
    else:
        assert "metrics" not in ports and "metrics" not in container_ports
    if "trainer_status" in toml:  # progress reports: listener, ports and URL agree
        port = int(toml["trainer_status"]["listen"].rpartition(":")[2])
        assert container_ports["trainer-status"] == port
        assert ports["trainer-status"]["port"] == port
        assert toml["trainer_status"]["url"] == (
            f"https://hpcb-hpc-bridge.hpc-bridge-system.svc:{port}")
    else:
        assert "trainer-status" not in ports
    door = toml.get("frontdoors", {}).get("kubernetes", {})
    hooks = [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    if "webhook_listen" in door:  # the topology webhook: listener, ports and hook agree
        port = int(door["webhook_listen"].rpartition(":")[2])
        assert container_ports["topology-hook"] == port and ports["topology-hook"]["port"] == port
        [hook] = hooks[0]["webhooks"]
        assert hook["clientConfig"]["service"] == {
            "name": "hpcb-hpc-bridge", "namespace": "hpc-bridge-system", "port": port,
            "path": "/mutate-trainjob"}
        assert hook["failurePolicy"] == "Ignore" and hook["rules"][0]["operations"] == ["CREATE"]
    else:
        assert "topology-hook" not in ports and not hooks
    assert "ServiceMonitor" not in kinds
    _files_are_mounted(toml, deploy)


def _files_are_mounted(toml: dict[str, Any], deploy: dict[str, Any]) -> None:
    """Each file ``[events.mqtt]``, ``[trainer_status]`` and the door's webhook name is
    an item of a Secret volume mounted where the TOML looks; the password and keys with
    mode 0400."""
    mqtt = toml.get("events", {}).get("mqtt", {})
    spec = deploy["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounted: dict[str, tuple[dict[str, Any], str]] = {}
    for mount in spec["containers"][0]["volumeMounts"]:
        secret = volumes[mount["name"]].get("secret")
        for item in (secret or {}).get("items", []):
            mounted[f"{mount['mountPath']}/{item['path']}"] = (secret, item["key"])
    for key in ("password_file", "ca_file", "cert_file", "key_file"):
        if key in mqtt:
            secret, _ = mounted[mqtt[key]]
            if key in ("password_file", "key_file"):
                assert secret["defaultMode"] == 0o400, (key, secret)
    door = toml.get("frontdoors", {}).get("kubernetes", {})
    for key in ("webhook_tls_cert", "webhook_tls_key"):
        if key in door:
            secret, _ = mounted[door[key]]
            assert secret["defaultMode"] == 0o400, (key, secret)
    progress = toml.get("trainer_status", {})
    for key in ("tls_cert", "tls_key", "ca_cert", "secret_file"):
        if key in progress:
            secret, _ = mounted[progress[key]]
            if key in ("tls_key", "secret_file"):
                assert secret["defaultMode"] == 0o400, (key, secret)


def test_values_the_schema_refuses(k8s: K8sBed) -> None:
    helm = _tool(k8s, "helm")
    for bad in (["--set", "backends.slurm.enabled=true"],         # no restUrl
                ["--set", "frontdoor.backend=pbs"],
                ["--set", "leaderElection.leaseDuration=0"],
                ["--set", "unknownKey=1"],
                ["--set", "metrics.port=0"],
                ["--set", "metrics.enabled=yes"],
                ["--set", "serviceMonitor.interval=soon"],
                ["--set", "serviceMonitor.extra=1"],
                ["--set", "events.mqtt.enabled=true"],                  # no host
                ["--set", "events.mqtt.passwordSecret.name=login"],     # no username
                ["--set", "events.mqtt.prefix=a/#"],
                ["--set", "events.mqtt.prefix=a//b"],
                ["--set", "events.mqtt.tls.caSecret=ca"],               # tls off
                ["--set", "trainerStatus.enabled=true"],                # no Secrets
                ["--set", "trainerStatus.url=http://x"],                # https only
                ["--set", "frontdoor.topologyWebhook.port=0"],
                ["--set", "frontdoor.topologyWebhook.extra=1"],
                ["--set", "events.mqtt.passwordSecret.name=Not_A_Name,events.mqtt.username=u"],
                # the pool policy's CEL is built from these: names only
                ["--set", "slurmPool.admissionPolicy.taintKey=a\" || true || \"b"],
                ["--set", "slurmPool.admissionPolicy.nodes={node1,Node_2}"],
                ["--set", "slurmPool.admissionPolicy.exemptNamespaces={kube-system,a.b}"]):
        res = subprocess.run([helm, "template", "x", str(CHART), "--kube-version",
                              _kube_version(k8s), *bad], capture_output=True, text=True,
                             timeout=60, check=False)
        assert res.returncode != 0 and "values don't meet the specifications" in res.stderr, (
            bad, res.stderr)


def test_the_pool_policy_needs_its_nodes_and_a_cluster_that_has_the_api(k8s: K8sBed) -> None:
    helm = _tool(k8s, "helm")
    for version, extra, message in (
            (_kube_version(k8s), [], "slurmPool.admissionPolicy.nodes: list the pool's"),
            ("1.29.0", ["--set", "slurmPool.admissionPolicy.nodes={node1}"],
             "needs Kubernetes 1.30 or later")):
        res = subprocess.run([helm, "template", "x", str(CHART), "--kube-version", version,
                              "--set", "slurmPool.admissionPolicy.enabled=true", *extra],
                             capture_output=True, text=True, timeout=60, check=False)
        assert res.returncode != 0 and message in res.stderr, (version, res.stderr)


def test_the_service_monitor_scrapes_the_services_metrics_port(
        k8s: K8sBed, schemas: list[str]) -> None:
    """The ServiceMonitor (no schema on the bed: the Prometheus Operator is not installed)
    selects the chart's Service and names its ``metrics`` port; everything else in the
    same render passes kubeconform -strict."""
    version = _kube_version(k8s)
    values = ["--set", "metrics.enabled=true", "--set", "metrics.port=9470",
              "--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.interval=15s",
              "--set", "serviceMonitor.labels.release=prometheus"]
    _helm(k8s, "lint", "--strict", "--kube-version", version, str(CHART), *values)
    rendered = _helm(k8s, "template", "hpcb", str(CHART), "--namespace", "monitoring-test",
                     "--kube-version", version, *values).stdout
    check = _run(_tool(k8s, "kubeconform"), "-strict", "-summary", "-kubernetes-version",
                 version, "-skip", "ServiceMonitor", *schemas, input=rendered)
    assert "Invalid: 0, Errors: 0, Skipped: 1" in check.stdout, check.stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")
    service = next(d for d in docs if d["kind"] == "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == "monitoring-test"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector and selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["monitoring-test"]}
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics",
                                             "interval": "15s"}]
    metrics = next(p for p in service["spec"]["ports"] if p["name"] == "metrics")
    assert metrics["port"] == 9470
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["bridge.toml"]
    assert tomllib.loads(config)["metrics"] == {"listen": "0.0.0.0:9470"}


def test_render_refuses_a_service_monitor_without_metrics_and_a_port_clash(
        k8s: K8sBed) -> None:
    for bad, message in (
            (["--set", "serviceMonitor.enabled=true"],
             "serviceMonitor.enabled needs metrics.enabled=true"),
            (["--set", "metrics.enabled=true", "--set", "metrics.port=8081"],
             "metrics.port 8081 is already health.port or api.port"),
            (["--set", "metrics.enabled=true", "--set", "metrics.port=8765",
              "--set", "api.existingSecret=tokens"],
             "metrics.port 8765 is already health.port or api.port"),
            (["--set", "frontdoor.topologyWebhook.enabled=true"],
             "frontdoor.topologyWebhook.tlsSecret"),
            (["--set", "frontdoor.topologyWebhook.enabled=true",
              "--set", "frontdoor.topologyWebhook.tlsSecret=tls"],
             "frontdoor.topologyWebhook.caBundle"),
            (["--set", "frontdoor.topologyWebhook.enabled=true",
              "--set", "frontdoor.topologyWebhook.tlsSecret=tls",
              "--set", "frontdoor.topologyWebhook.caBundle=eA==",
              "--set", "frontdoor.topologyWebhook.port=8081"],
             "frontdoor.topologyWebhook.port 8081 is already another port")):
        res = subprocess.run([_tool(k8s, "helm"), "template", "x", str(CHART),
                              "--kube-version", _kube_version(k8s), *bad],
                             capture_output=True, text=True, timeout=60, check=False)
        assert res.returncode != 0 and message in res.stderr, (bad, res.stderr)


@pytest.fixture
def release(k8s: K8sBed, k8s_namespace: str) -> Iterator[str]:
    name = f"hpc-bridge-{k8s_namespace}"  # contains the chart's name: the full name
    yield name
    k8s.kubectl("-n", k8s_namespace, "delete", TRAINJOBS, "--all", "--wait=false", check=False)
    subprocess.run([_tool(k8s, "helm"), "--kubeconfig", k8s.kubeconfig, "uninstall", name,
                    "--namespace", k8s_namespace, "--wait=false"], capture_output=True,
                   timeout=120, check=False)


def test_install_upgrade_and_a_trainjob_run_by_the_charts_objects(
        k8s: K8sBed, k8s_namespace: str, release: str, tmp_path: Path) -> None:
    ns = k8s_namespace
    broker = bed_broker()
    require(broker is not None, "the bed's mosquitto is not up: bash testbed/mosquitto.sh up")
    assert broker is not None
    # The broker password as the chart takes it: a key of an existing Secret.
    k8s.kubectl("-n", ns, "create", "secret", "generic", "broker-login",
                "--from-literal=pw=chart-test-password")
    prefix = f"hpcb-chart/{ns}"
    values = ["--set", f"frontdoor.namespaces={{{ns}}}", "--set", "frontdoor.runAs=alice",
              "--set", "runtimes.install=false",  # cluster-wide: other runs may hold them
              "--set", "leaderElection.leaseDuration=4", "--set",
              "leaderElection.renewDeadline=3", "--set", "leaderElection.retryPeriod=1",
              "--set", "metrics.enabled=true",
              "--set", "events.mqtt.enabled=true", "--set", f"events.mqtt.host={broker[0]}",
              "--set", f"events.mqtt.port={broker[1]}", "--set", f"events.mqtt.prefix={prefix}",
              "--set", "events.mqtt.username=bridge",
              "--set", "events.mqtt.passwordSecret.name=broker-login",
              "--set", "events.mqtt.passwordSecret.key=pw"]
    _helm(k8s, "install", release, str(CHART), "--namespace", ns, "--wait=false", *values)
    deploy = k8s.get_json("-n", ns, "deployment", release)
    assert deploy["spec"]["replicas"] == 2
    service = k8s.get_json("-n", ns, "service", release)
    assert {"name": "metrics", "port": 9464, "protocol": "TCP", "targetPort": "metrics"} in (
        service["spec"]["ports"])
    # A change of values rolls the pods (the config checksum) and keeps the release.
    _helm(k8s, "upgrade", release, str(CHART), "--namespace", ns, "--wait=false", *values,
          "--set", "engine.maxParallelSubmits=4")
    history = json.loads(_helm(k8s, "history", release, "--namespace", ns, "-o",
                               "json").stdout)
    assert [h["status"] for h in history][-1] == "deployed" and len(history) == 2
    config = k8s.get_json("-n", ns, "configmap", release)["data"]["bridge.toml"]
    assert "max_parallel_submits = 4" in config
    # The pod, as kwok cannot run it: the chart's ConfigMap and ServiceAccount.
    kubeconfig = tmp_path / "sa.kubeconfig"
    service_account_kubeconfig(k8s, ns, kubeconfig, account=release)
    daemon = _as_the_pod(config, kubeconfig)
    _mount_the_password(k8s, ns, deploy, tomllib.loads(config), Path(tomllib.loads(
        daemon.daemon.config.read_text())["events"]["mqtt"]["password_file"]))
    states = Subscriber(*broker, f"{prefix}/jobs/+/state", f"chart-test-{ns}")
    daemon.start()
    try:
        k8s.wait_for(lambda: daemon.is_("leader", True), 60, "the chart's daemon to lead")
        # The chart's [metrics] listener serves the Prometheus text format (the job
        # gauge once the TrainJob below is known).
        listen = tomllib.loads(daemon.daemon.config.read_text())["metrics"]["listen"]
        metrics_url = f"http://{listen}/metrics"
        lease = k8s.get_json("-n", ns, "lease", "hpc-bridge")
        assert lease["spec"]["holderIdentity"].startswith("chart-pod")
        apply(k8s, ns, trainjob("via-chart", runtime="torch-distributed", nodes=2))
        k8s.wait_for(lambda: is_true(conditions(k8s, ns, "via-chart"), "Complete"), 120,
                     "the TrainJob to complete under the chart's objects")
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for fam in text_string_to_metric_families(httpx.get(metrics_url).text)
                   for s in fam.samples}
        assert samples[("hpcbridge_jobs", (("backend", "kubernetes"),
                                           ("state", "Succeeded")))] == 1, samples
        refused = [line for line in daemon.daemon.log.read_text().splitlines()
                   if "(403)" in line or "forbidden" in line.lower()]
        assert not refused, "\n".join(refused[:5])
        # [events.mqtt] as rendered, with the password file as the Secret's volume
        # mounts it (mode 0400): the job's states reach the broker under the prefix.
        wait_for(lambda: any(e["name"] == "via-chart" and e["state"] == "Succeeded"
                             for e in states.events()), 30, "the Succeeded event on MQTT")
        k8s.kubectl("-n", ns, "delete", TRAINJOBS, "via-chart", "--timeout=90s")
        assert not all_trainjobs(k8s, ns)
    finally:
        states.close()
        daemon.stop()
        cleanup(daemon.daemon.workdir)


def _mount_the_password(k8s: K8sBed, ns: str, deploy: dict[str, Any],
                        config: dict[str, Any], path: Path) -> None:
    """What the kubelet would do for the MQTT password: the key the Deployment's
    ``mqtt-password`` volume names, read from the Secret on the apiserver, written to
    ``path`` (the pod's ``password_file``, moved) with the volume's ``defaultMode``."""
    volume = next(v for v in deploy["spec"]["template"]["spec"]["volumes"]
                  if v["name"] == "mqtt-password")["secret"]
    assert volume["defaultMode"] == 0o400
    item = volume["items"][0]
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "mqtt-password")
    assert config["events"]["mqtt"]["password_file"] == f"{mount['mountPath']}/{item['path']}"
    secret = k8s.get_json("-n", ns, "secret", volume["secretName"])
    path.write_bytes(base64.b64decode(secret["data"][item["key"]]))
    path.chmod(volume["defaultMode"])


def _as_the_pod(config_text: str, kubeconfig: Path) -> Replica:
    """A replica run from the chart's TOML: its paths and listeners moved to a scratch
    directory and loopback ports, and a
    kubeconfig with the chart's ServiceAccount token where the pod would use the mounted
    one (kubernetes_asyncio reads the in-cluster token from a fixed path)."""
    from tests.integration.bed import Daemon

    workdir = fresh_daemon_dir("chart")
    config: dict[str, Any] = tomllib.loads(config_text)
    port = _free_port()
    config["daemon"].update({"state_dir": str(workdir / "state"),
                             "socket": str(workdir / "run" / "bridge.sock"),
                             "health": f"127.0.0.1:{port}", "log_format": "json"})
    sections = [config["leader_election"], *config["backends"].values(),
                *config.get("frontdoors", {}).values()]
    for section in sections:
        if section.get("kind") == "kubernetes":
            section["kubeconfig"] = str(kubeconfig)
    config["leader_election"]["identity"] = "chart-pod-0"
    mqtt = config.get("events", {}).get("mqtt", {})
    if "password_file" in mqtt:  # the Secret's mount point: a file here
        mqtt["password_file"] = str(workdir / "mqtt-password")
    if "metrics" in config:  # the pod's 0.0.0.0:PORT: a free port on loopback here
        config["metrics"]["listen"] = f"127.0.0.1:{_free_port()}"
    daemon = Daemon(workdir, {})
    daemon.config.write_text(_toml(config))
    replica = Replica(daemon, port)
    replica.daemon.write_config = lambda: None  # type: ignore[method-assign]
    return replica


def _toml(data: dict[str, Any], prefix: str = "") -> str:
    """A small TOML writer for the nested tables of the daemon's configuration."""
    lines: list[str] = []
    tables: list[tuple[str, dict[str, Any]]] = []
    for key, value in data.items():
        if isinstance(value, dict):
            tables.append((f"{prefix}{key}", value))
        else:
            lines.append(f"{json.dumps(key)} = {json.dumps(value)}")
    out = "\n".join(lines) + "\n"
    for name, table in tables:
        out += f"\n[{name}]\n" + _toml(table, f"{name}.")
    return out
