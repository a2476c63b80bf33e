"""data_cache.malloc: once a Shard exists, a reader's process serves block-sized buffers
from the heap (no ``mmap`` each) and keeps what it frees at the heap's top for the next
block, up to the thresholds; glibc is left alone where the process's owner set
malloc's variables or opted out. Each case runs in a fresh interpreter: the setting is
process-wide. Read through ``mallinfo2`` (glibc 2.33 and later, which the daemon's
platforms have: a C library without it fails here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20


# Prints whether keep_freed_blocks set the thresholds, then (argument "sizes") how many
# of three live allocations, of 2, 24 and 40 MiB, are mmapped (mallinfo2's hblks), or
# ("keep") the free top of the heap (keepcost) once 20 blocks of 2 MiB are freed.
PROBE = """
import ctypes, sys
from data_cache.malloc import keep_freed_blocks

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
kept = keep_freed_blocks()
if sys.argv[1] == "sizes":
    out = []
    for size in (2 << 20, 24 << 20, 40 << 20):  # none freed: glibc's thresholds stay
        before = libc.mallinfo2().hblks
        libc.malloc(size)
        out.append(libc.mallinfo2().hblks - before)
else:
    blocks = [libc.malloc(2 << 20) for _ in range(20)]
    for block in reversed(blocks):
        libc.free(block)
    out = [libc.mallinfo2().keepcost]
print(kept, keep_freed_blocks(), *out)
"""


def _probe(what: str, **env: str) -> tuple[bool, list[int]]:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("MALLOC_") and k not in ("GLIBC_TUNABLES",
                                                          "HPC_BRIDGE_DATA_CACHE_MALLOC")}
    done = subprocess.run([sys.executable, "-c", PROBE, what], cwd=ROOT,
                          env={**clean, **env}, capture_output=True, text=True, check=True,
                          timeout=60)
    kept, again, *out = done.stdout.split()
    assert kept == again  # set once, the same answer after
    return kept == "True", [int(x) for x in out]


def test_blocks_come_from_the_heap_and_what_is_freed_stays() -> None:
    assert _probe("sizes") == (True, [0, 0, 1])  # up to 32 MiB from the heap
    kept, [keepcost] = _probe("keep")
    assert kept and keepcost >= 40 * MIB  # 20 freed blocks at the top: under 64 MiB


OWNERS = [
    {"HPC_BRIDGE_DATA_CACHE_MALLOC": "0"},
    {"MALLOC_MMAP_THRESHOLD_": "131072"},
    {"MALLOC_TRIM_THRESHOLD_": "131072"},
    {"MALLOC_TOP_PAD_": "0"},
    {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"},
    {"GLIBC_TUNABLES": "glibc.pthread.rseq=0:glibc.malloc.trim_threshold=131072"},
]


@pytest.mark.parametrize("env", OWNERS)
def test_the_owners_settings_stand(env: dict[str, str]) -> None:
    assert _probe("sizes", **env) == (False, [1, 1, 1])  # glibc's own 128 KiB threshold
    kept, [keepcost] = _probe("keep", **env)
    assert not kept and keepcost < 40 * MIB  # the blocks went back to the system


def test_tunables_about_something_else_do_not_stop_it() -> None:
    assert _probe("sizes", GLIBC_TUNABLES="glibc.pthread.rseq=0") == (True, [0, 0, 1])


def test_a_shard_sets_it_first() -> None:
    """Every way into the cache sets it: even a Shard refused on its arguments, before
    it connects to anything."""
    code = ("from data_cache import reader, malloc\n"
            "try:\n    reader.Shard(['grpc://127.0.0.1:1'], 't', 3, 2)\n"
            "except reader.DataCacheError as exc:\n    print(exc)\n"
            "print(malloc._done)")
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("MALLOC_") and k not in ("GLIBC_TUNABLES",
                                                          "HPC_BRIDGE_DATA_CACHE_MALLOC")}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=clean,
                          capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.splitlines() == ["rank 3 is outside world size 2", "True"]
