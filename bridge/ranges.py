"""Sets of integers written as ranges, ``0-2,5``: a job array's indexes (sbatch's
``--array``, squeue's ``A_[4-31]``) and a Flux idset of ranks (RFC 22) are written so.
Standard library only (the t* commands import it; their start time counts)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["compress"]


def compress(values: Iterable[int]) -> str:
    """``values`` (any order, repeats allowed) as sorted ranges of consecutive
    integers: ``[5, 0, 1, 2]`` -> ``0-2,5``; empty -> ``""``."""
    parts: list[tuple[int, int]] = []
    for i in sorted(set(values)):
        if parts and parts[-1][1] == i - 1:
            parts[-1] = (parts[-1][0], i)
        else:
            parts.append((i, i))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in parts)
