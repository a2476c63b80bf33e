"""glibc's malloc set for a process that streams blocks from the cache (the reader).

Each block arrives as one gRPC message of megabytes. gRPC receives it into 64 KiB
buffers, joins them into one buffer the batch's columns point into, and frees it all
once the batch is dropped. With glibc's defaults the first such buffer is ``mmap``-ed;
freeing it raises glibc's dynamic thresholds to its size (the trim threshold to twice
that, about 4 MiB for 2 MiB blocks), so the heap is then trimmed whenever more than
that lies free at its top — after almost every block. The next block is received
into pages the kernel must fault in and zero again: ``perf`` on the reader of
``bench/data_cache.py`` showed page faults and page clearing as the largest share of
its CPU, beside the copies themselves.

:func:`keep_freed_blocks` sets ``M_TRIM_THRESHOLD`` to :data:`TRIM_THRESHOLD` and
``M_MMAP_THRESHOLD`` to :data:`MMAP_THRESHOLD` (``mallopt``; glibc's dynamic
thresholds for 32 MiB buffers, fixed from the start). The reader's CPU per GB falls by
about a third (26 to 44 % in the bench). What it changes, process-wide:

* every allocation of the process up to 32 MiB (numpy arrays and CPU tensors too)
  comes from a heap, not from an ``mmap`` of its own;
* up to 64 MiB free at the top of each arena (a main one, and one per thread that
  allocates, up to glibc's arena limit) stays there for reuse; beyond that the arena
  is trimmed, as before. Free memory below a live allocation is never trimmed, with or
  without this.

It is skipped where the process's owner chose: the environment sets
``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or ``MALLOC_TOP_PAD_``, or
``GLIBC_TUNABLES`` names ``glibc.malloc.mmap_threshold``, ``trim_threshold`` or
``top_pad``; or :data:`OPT_OUT_ENV` is ``0``. Where the C library has no ``mallopt``
(musl, macOS) nothing happens; under a preloaded allocator (jemalloc, tcmalloc) its
``mallopt`` decides. It never raises.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["MMAP_THRESHOLD", "OPT_OUT_ENV", "TRIM_THRESHOLD", "keep_freed_blocks"]

#: Allocations up to this many bytes come from the heap (glibc's largest dynamic value).
MMAP_THRESHOLD = 32 << 20
#: Free memory at the heap's top kept for reuse (twice the above, as glibc's dynamic
#: threshold would set it).
TRIM_THRESHOLD = 64 << 20
#: ``0`` leaves glibc's settings alone.
OPT_OUT_ENV = "HPC_BRIDGE_DATA_CACHE_MALLOC"

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_OWNERS_VARS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")
_OWNERS_TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold",
                    "glibc.malloc.top_pad")
#: Whether this process set them (None: not tried yet). No lock: setting the same
#: values twice is harmless, and a lock held across a fork would hang the child.
_done: bool | None = None


def keep_freed_blocks() -> bool:
    """Set the thresholds once per process (see the module docstring); whether they
    are set (False: the owner's settings stand, or there is no glibc ``mallopt``)."""
    global _done
    if _done is None:
        _done = _set()
    return _done


def _owner_chose() -> bool:
    if os.environ.get(OPT_OUT_ENV) == "0" or any(v in os.environ for v in _OWNERS_VARS):
        return True
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    names = {item.split("=", 1)[0].strip() for item in tunables.split(":")}
    return any(name in names for name in _OWNERS_TUNABLES)


def _set() -> bool:
    if _owner_chose():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):  # TypeError: CDLL(None) on Windows
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # The trim threshold first: alone, the mmap threshold would trim every block.
    return bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
