"""Retry delays: full-jitter exponential backoff (AWS Architecture Blog, "Exponential
Backoff And Jitter").

Written here rather than taken from a retry library because the engine persists each
job's next attempt (``next_attempt_at``) so that it survives a restart; retry libraries
wrap a call in-process.
"""

from __future__ import annotations

import random


def backoff_delay(attempt: int, base: float = 1.0, cap: float = 60.0) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based): full-jitter exponential.

    Written here rather than taken from a retry library because the delay is persisted
    per job (``next_attempt_at``) and must survive a restart; retry libraries wrap a
    call in-process.
    """
    ceiling = min(cap, base * 2.0 ** max(0, attempt - 1))
    jitter: float = random.uniform(0, ceiling / 2)  # noqa: S311 - jitter, not crypto
    return ceiling / 2 + jitter
