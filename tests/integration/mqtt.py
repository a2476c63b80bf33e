"""MQTT helpers for the event-stream tests: the bed's broker, a broker of a test's own
(to stop and restart without disturbing anyone) and a recording subscriber (paho-mqtt,
which aiomqtt is built on)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt

from tests.integration.bed import read_env_file, wait_for

MOSQUITTO_ENV = Path("/run/hpc-bridge-testbed/mosquitto.env")


def bed_broker() -> tuple[str, int] | None:
    """The bed's broker (``testbed/mosquitto.sh up``), or None when it is not up."""
    env = read_env_file(MOSQUITTO_ENV)
    if env is None:
        return None
    return env["MQTT_HOST"], int(env["MQTT_PORT"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OwnBroker:
    """A mosquitto of this test only, on a free port, with persistence (a persistent
    subscriber session survives its restart, as in production)."""

    def __init__(self, workdir: Path, extra_conf: str = "") -> None:
        self.port = free_port()
        self.workdir = workdir
        self.conf = workdir / "mosquitto.conf"
        anonymous = "false" if "password_file" in extra_conf else "true"
        self.conf.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous {anonymous}\nuser root\n"
            f"persistence true\npersistence_location {workdir}/\n"
            f"max_queued_messages 0\nlog_dest stderr\n{extra_conf}")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = (self.workdir / "mosquitto.log").open("ab")
        self.proc = subprocess.Popen(["mosquitto", "-c", str(self.conf)], stdout=log,
                                     stderr=log, stdin=subprocess.DEVNULL)
        wait_for(self._accepts, 20, f"mosquitto on port {self.port}", 0.1)

    def _accepts(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError((self.workdir / "mosquitto.log").read_text()[-2000:])
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # saves the persistent sessions
            self.proc.wait(20)
        self.proc = None


class Subscriber:
    """Records every message on ``topic`` (QoS 1) in arrival order; a persistent
    session (``clean_session=False``) with a fixed client id, so messages published
    while it is away are kept for it by a broker with persistence."""

    def __init__(self, host: str, port: int, topic: str, client_id: str, *,
                 ca_file: Path | None = None, auth: tuple[str, str] | None = None) -> None:
        self.topic = topic
        self.messages: list[tuple[str, dict[str, Any], bool]] = []
        self._lock = threading.Lock()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                                  clean_session=False)
        if ca_file is not None:
            self.client.tls_set(ca_certs=str(ca_file))
        if auth is not None:
            self.client.username_pw_set(*auth)
        self.client.reconnect_delay_set(1, 1)
        self.client.on_connect = self._connected
        self.client.on_message = self._message
        self._subscribed = threading.Event()
        self.client.connect(host, port, keepalive=10)
        self.client.loop_start()
        assert self._subscribed.wait(20), f"no subscription on {host}:{port}"

    def _connected(self, client: mqtt.Client, *_: Any) -> None:
        client.subscribe(self.topic, qos=1)
        self._subscribed.set()

    def _message(self, _client: mqtt.Client, _userdata: Any, msg: mqtt.MQTTMessage) -> None:
        with self._lock:
            self.messages.append((msg.topic, json.loads(msg.payload), bool(msg.retain)))

    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return [payload for _, payload, _ in self.messages]

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def mqtt_toml(host: str, port: int, prefix: str, **extra: Any) -> str:
    """An ``[events.mqtt]`` table for the test daemon (fast reconnects)."""
    lines = ["[events.mqtt]", f'host = "{host}"', f"port = {port}", f'prefix = "{prefix}"',
             "retry_base = 0.2", "retry_cap = 1.0", "publish_timeout = 3.0"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def make_tls_files(workdir: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 (openssl); returns (ca, cert, key)."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=workdir, check=True, capture_output=True,
                       timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.crt", "-days", "1", "-subj", "/CN=hpc-bridge test CA")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out",
            "server.csr", "-subj", "/CN=127.0.0.1")
    (workdir / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.crt", "-days", "1", "-extfile", "san.ext")
    return workdir / "ca.crt", workdir / "server.crt", workdir / "server.key"
