"""glibc's malloc set for a process that streams blocks from the cache (the reader).

Each block arrives as one gRPC message of megabytes. gRPC receives it into buffers it
allocates, joins them into one buffer the batch's columns point into, and frees it all
once the batch is dropped. With glibc's defaults those allocations keep going back to
the kernel (an ``mmap`` per buffer, or a heap trimmed each time its free top passes
twice the last such size), so every block is received into fresh pages the kernel
must fault in and zero. ``perf`` on the reader of ``bench/data_cache.py`` showed page
faults and page clearing as the largest share of its CPU, beside the copies themselves.

:func:`keep_freed_blocks` makes allocations up to :data:`MMAP_THRESHOLD` come from the
heap and lets up to :data:`TRIM_THRESHOLD` of freed memory stay there for the next
block (``mallopt(M_MMAP_THRESHOLD)``, ``mallopt(M_TRIM_THRESHOLD)``: the values glibc's
own dynamic threshold would reach for 32 MiB buffers, fixed from the start). The
reader's CPU per block about halves. The memory kept is what gRPC had in flight at
once (its flow-control window, a few blocks), reused from block to block; it is not
given back to the system while the process lives.

It is process-wide, so it is skipped where the process's owner chose: the environment
sets ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_`` or
``GLIBC_TUNABLES``, or :data:`OPT_OUT_ENV` is ``0``. Where the C library has no
``mallopt`` (musl, macOS) nothing happens. It never raises.
"""

from __future__ import annotations

import ctypes
import os
import threading

__all__ = ["MMAP_THRESHOLD", "OPT_OUT_ENV", "TRIM_THRESHOLD", "keep_freed_blocks"]

#: Allocations up to this many bytes come from the heap (glibc's largest dynamic value).
MMAP_THRESHOLD = 32 << 20
#: Free memory at the heap's top kept for reuse (twice the above, as glibc's dynamic
#: threshold would set it).
TRIM_THRESHOLD = 64 << 20
#: ``0`` leaves glibc's settings alone.
OPT_OUT_ENV = "HPC_BRIDGE_DATA_CACHE_MALLOC"

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_OWNERS_VARS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                "GLIBC_TUNABLES")
_lock = threading.Lock()
_done: bool | None = None


def keep_freed_blocks() -> bool:
    """Set the thresholds once per process (see the module docstring); whether they
    are set (False: the owner's settings stand, or this is not glibc)."""
    global _done
    with _lock:
        if _done is None:
            _done = _set()
        return _done


def _set() -> bool:
    if os.environ.get(OPT_OUT_ENV) == "0" or any(v in os.environ for v in _OWNERS_VARS):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
