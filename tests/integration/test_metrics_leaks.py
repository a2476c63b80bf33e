"""The metrics listener as a hostile local user sees it: bob's requests cannot add label
values (memory that grows with every new one, kept for the daemon's life) and the
scrape names no user or job (docs/security.md)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.bed import Daemon, cleanup, fresh_daemon_dir
from tests.integration.conftest import rest_settings
from tests.integration.mqtt import free_port
from tests.integration.test_events_mqtt import _submit
from tests.integration.test_multiuser_safety import api_as

pytestmark = pytest.mark.integration


def test_bobs_unusual_methods_add_no_metric_labels_and_no_user_is_named(
        testbed: dict[str, str], outdir: Path) -> None:
    port = free_port()
    workdir = fresh_daemon_dir("metrics-leaks")
    d = Daemon(workdir, rest_settings(testbed),
               extra_toml=f'\n[metrics]\nlisten = "127.0.0.1:{port}"\n')
    d.start()
    try:
        job_id = _submit(d, "alice", outdir, "true")
        d.wait_state(job_id, ["Succeeded", "Failed"])
        # The C parser refuses made-up methods (400, never counted) but takes the 30-odd
        # WebDAV and other registered ones; each would be a label value of its own.
        for method in ("PROPFIND", "MKCOL", "UNLOCK"):
            status, body = api_as(d, "bob", method, "/v1/jobs")
            assert status == 405, body
        text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        methods = {s.labels["method"] for fam in text_string_to_metric_families(text)
                   for s in fam.samples if "method" in s.labels}
        assert methods <= {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS",
                           "other"}, methods
        assert "other" in methods
        job = d.job(job_id)
        for secret in ("alice", "bob", job["name"], job["uid"]):
            assert secret not in text, secret
    finally:
        d.stop()
        cleanup(workdir)
