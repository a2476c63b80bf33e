"""One logging pipeline (issue 10, "structlog for every logger"): every module of the
daemon and its adapters logs through structlog, and :func:`bridge.daemon.configure_logging`
renders those events and the standard-library records of libraries alike as one JSON
object per line."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
import structlog

from bridge.daemon import configure_logging

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bridge", "slurm_adapter", "flux_adapter", "k8s_adapter")


def test_no_module_makes_a_standard_library_logger() -> None:
    offenders = [f"{path.relative_to(ROOT)}:{n}"
                 for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if re.search(r"logging\.getLogger\(\s*[^)\s]", line)]
    assert offenders == []


def test_structlog_events_and_library_records_are_json_lines(
        capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json", "INFO")
    structlog.get_logger("flux_adapter.stream").warning("back end %s: gone", "f1",
                                                        backend="f1")
    logging.getLogger("aiohttp.access").info("GET %s", "/v1/jobs", extra={"status": 200})
    structlog.get_logger("hpc_bridge.engine").debug("below the level")
    try:
        raise ZeroDivisionError("x")
    except ZeroDivisionError:
        structlog.get_logger("k8s_adapter.kube").exception("failed")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(e["logger"], e["level"], e["event"]) for e in lines] == [
        ("flux_adapter.stream", "warning", "back end f1: gone"),
        ("aiohttp.access", "info", "GET /v1/jobs"),
        ("k8s_adapter.kube", "error", "failed"),
    ]
    assert lines[0]["backend"] == "f1" and lines[1]["status"] == 200
    assert "ZeroDivisionError" in lines[2]["exception"]
