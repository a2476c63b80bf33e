"""One rule for tests that need something of the machine: under ``CI=true`` a missing
requirement FAILS the test (CI must provide it); elsewhere the test skips with the reason."""

from __future__ import annotations

import os

import pytest


def require(condition: bool, reason: str) -> None:
    """Fail (in CI) or skip (elsewhere) with ``reason`` unless ``condition`` holds."""
    if condition:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must provide this: {reason}")
    pytest.skip(reason)
