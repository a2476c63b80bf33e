"""data_cache.malloc: a reader's process serves block-sized buffers from the heap (no
``mmap`` per block) once a Shard exists, and leaves glibc alone where the process's
owner set malloc's variables or opted out. Each case runs in a fresh interpreter: the
setting is process-wide."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Allocates one block-sized buffer (2 MiB) and prints whether keep_freed_blocks set the
# thresholds and how many mmapped chunks malloc holds meanwhile (mallinfo2's hblks).
PROBE = """
import ctypes
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
before = libc.mallinfo2().hblks
block = libc.malloc(2 << 20)
during = libc.mallinfo2().hblks
libc.free(block)
print(kept, during - before, keep_freed_blocks())
"""


def _probe(**env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("MALLOC_") and k not in ("GLIBC_TUNABLES",
                                                          "HPC_BRIDGE_DATA_CACHE_MALLOC")}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env={**clean, **env},
                          capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.split()


def test_block_sized_buffers_come_from_the_heap_once_set() -> None:
    kept, mmapped, again = _probe()
    assert kept == "True" and again == "True"
    assert mmapped == "0"  # glibc's default threshold (128 KiB) would mmap it


@pytest.mark.parametrize("env", [
    {"HPC_BRIDGE_DATA_CACHE_MALLOC": "0"},
    {"MALLOC_MMAP_THRESHOLD_": "131072"},
    {"MALLOC_TRIM_THRESHOLD_": "131072"},
    {"MALLOC_TOP_PAD_": "0"},
    {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"},
])
def test_the_owners_settings_stand(env: dict[str, str]) -> None:
    kept, mmapped, _ = _probe(**env)
    assert kept == "False"
    assert mmapped == "1"  # glibc's own threshold, as the owner left or set it


def test_a_shard_sets_it() -> None:
    """The reader calls it before it connects: a Shard that fails on its arguments has
    already set it (so every path into the cache does)."""
    code = ("from data_cache import reader, malloc\n"
            "try:\n    reader.Shard(['grpc://127.0.0.1:1'], 't', 0, 1, timeout=0.1)\n"
            "except reader.DataCacheError:\n    pass\n"
            "print(malloc._done)")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    clean.pop("HPC_BRIDGE_DATA_CACHE_MALLOC", None)
    clean.pop("GLIBC_TUNABLES", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=clean,
                          capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.split()[-1] == "True"
