"""Session-wide test set-up: the hostile-input suite's profile and seed in the header,
so a CI log always says how to replay a failing run (tests/hostile.py); and logging as
each test found it (a test that runs the daemon's ``main`` configures structlog and the
root logger for streams pytest closes after that test, and the process umask to 077)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
import structlog
from hypothesis import HealthCheck, settings

from tests import hostile

# Property tests check what is computed, not how fast: a per-example deadline (hypothesis'
# default 200 ms) only measures how busy the machine is (a test bed daemon, a GC pause)
# and made tests fail at random on 2 loaded cores. Time is bounded by the tests' own
# timeouts; the hostile-input suite has its own profiles (tests/hostile.py).
settings.register_profile("bridge", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("bridge")

# As in the daemon (bridge.daemon.configure_logging), structlog's events go through the
# standard logging module, so pytest's log capture (``caplog``) sees every logger's.
structlog.configure(
    processors=[structlog.stdlib.add_logger_name, structlog.processors.add_log_level,
                structlog.dev.ConsoleRenderer(colors=False)],
    wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
    logger_factory=structlog.stdlib.LoggerFactory(),
    cache_logger_on_first_use=False,
)


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    umask = os.umask(0o022)  # read it (the only way is to set it) ...
    os.umask(umask)  # ... and put it back
    yield
    os.umask(umask)  # run_daemon sets the daemon's 077 for the whole process
    structlog.configure(**saved)
    root.handlers[:] = handlers
    root.setLevel(level)


def pytest_report_header() -> list[str]:
    profile = hostile.PROFILE.removeprefix("hostile-")
    return [f"hostile-input suite: profile {hostile.PROFILE}, seed {hostile.SEED} "
            f"(replay: HOSTILE_SEED={hostile.SEED} HOSTILE_PROFILE={profile} pytest ...)"]
