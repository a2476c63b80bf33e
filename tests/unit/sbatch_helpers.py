"""Shared helpers for the tbatch parser's unit tests: options, errors and the TrainJob
that a command line and script make."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge.model import ANN_SCHEDULING
from bridge.sbatch import (
    BatchOptions,
    SbatchError,
    parse_tbatch,
    to_trainjob,
)

SH = "#!/bin/sh\n"


def opts(argv: list[str], script: str = SH) -> BatchOptions:
    return parse_tbatch([*argv, "job.sh"], script).options


def error_of(argv: list[str], script: str | None = SH) -> str:
    with pytest.raises(SbatchError) as info:
        parse_tbatch(argv, script)
    return str(info.value)


def job_of(
    argv: list[str],
    script: str | None = SH,
    *,
    cwd: str = "/home/alice",
    environ: dict[str, str] | None = None,
) -> dict[str, Any]:
    request = parse_tbatch(argv, script)
    return to_trainjob(request, cwd=cwd, environ=environ or {}).to_dict()


def sched(doc: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(doc["metadata"]["annotations"][ANN_SCHEDULING])
    return result
