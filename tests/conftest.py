"""Session-wide test set-up: the hostile-input suite's profile and seed in the header,
so a CI log always says how to replay a failing run (tests/hostile.py)."""

from __future__ import annotations

from tests import hostile


def pytest_report_header() -> list[str]:
    profile = hostile.PROFILE.removeprefix("hostile-")
    return [f"hostile-input suite: profile {hostile.PROFILE}, seed {hostile.SEED} "
            f"(replay: HOSTILE_SEED={hostile.SEED} HOSTILE_PROFILE={profile} pytest ...)"]
