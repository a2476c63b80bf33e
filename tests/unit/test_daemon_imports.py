"""What the daemon loads: every back end and front door it can start (their entry
points), and nothing of the training side's heavy libraries with them. pyarrow (and the
numpy it loads) cost the daemon about 44 MB of RSS and OpenBLAS's spinning threads while
``k8s_adapter.data_cache``, which needs only the data cache's credentials, pulled them in
through ``data_cache/__init__.py``. Each case runs in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LOAD_ALL = """
import importlib.metadata as metadata, sys
groups = ("hpc_bridge.backends", "hpc_bridge.frontdoors")
loaded = [e.load() for g in groups for e in metadata.entry_points(group=g)]
heavy = sorted(m for m in ("pyarrow", "numpy", "pyiceberg", "torch") if m in sys.modules)
print(len(loaded), *heavy)
"""


def test_the_daemons_plugins_load_no_training_libraries() -> None:
    done = subprocess.run([sys.executable, "-c", LOAD_ALL], cwd=ROOT, capture_output=True,
                          text=True, check=True, timeout=120)
    count, *heavy = done.stdout.split()
    assert int(count) >= 4  # slurm, flux, kubernetes, k8s-on-slurm, the front doors
    assert heavy == []


def test_training_code_still_imports_the_reader_from_the_package() -> None:
    code = ("import data_cache\nfrom data_cache import DataCacheError, Shard, open_dataset\n"
            "from data_cache import reader\n"
            "assert (open_dataset, Shard, DataCacheError) == "
            "(reader.open_dataset, reader.Shard, reader.DataCacheError)\n"
            "try:\n    data_cache.nothing_here\nexcept AttributeError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=True, timeout=120)
    assert done.stdout.strip() == "module 'data_cache' has no attribute 'nothing_here'"
