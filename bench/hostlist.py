"""Expand and compress 100,000-node hostlists: mpi_launch.hostlist vs python-hostlist vs Slurm.

Run with ``.venv/bin/python bench/hostlist.py [--repeat N]``. For each expression it
times, in this process, ``mpi_launch.hostlist.expand``/``compress`` and python-hostlist's
``expand_hostlist``/``collect_hostlist``, and as the baseline ``scontrol show hostnames
EXPR`` and ``scontrol show hostlist FILE`` (whole processes, measured in the same run).
Best of N runs; ``ratio = baseline / ours``. It also checks that everyone's answers
expand back to the same hosts (and says so when Slurm's do not).

Slurm 22.05 refuses one range of more than 65,536 hosts ("Too many hosts in range"), so
the contiguous list is given to everyone as ``n[000001-065536,065537-100000]``, the form
``mpi_launch.hostlist.compress`` produces.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

# This script is named hostlist.py: drop its own folder from the path so that
# ``import hostlist`` finds python-hostlist, and put the repository first.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from mpi_launch.hostlist import compress, expand  # noqa: E402

python_hostlist: Any
try:
    python_hostlist = importlib.import_module("hostlist")  # python-hostlist, not this file
except ImportError:  # pragma: no cover - python-hostlist is a project dependency
    python_hostlist = None

NODES = 100_000


def contiguous() -> list[str]:
    return [f"n{i:06d}" for i in range(1, NODES + 1)]


def fragmented() -> list[str]:
    """100,000 hosts over four racks, with gaps (drained nodes) every few dozen."""
    hosts: list[str] = []
    i = 0
    while len(hosts) < NODES:
        rack = "abcd"[min(i // 27_000, 3)]
        if i % 37 not in (5, 6) and i % 101 != 50:
            hosts.append(f"rack-{rack}{i:06d}")
        i += 1
    return hosts


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times = []
    result: Any = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def scontrol(*args: str) -> list[str]:
    done = subprocess.run(["scontrol", *args], capture_output=True, text=True, check=False,
                          timeout=120)
    if done.returncode != 0 or done.stderr or "Invalid" in done.stdout:
        raise RuntimeError(f"scontrol {args[:2]}: {(done.stderr or done.stdout).strip()}")
    return done.stdout.split()


def fmt(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:9.1f} ms"


def ratio(baseline: float | None, ours: float) -> str:
    return "n/a" if baseline is None else f"{baseline / ours:7.1f}x"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (best of)")
    args = parser.parse_args()
    have_scontrol = shutil.which("scontrol") is not None
    print(f"hosts: {NODES}; best of {args.repeat}; python {sys.version.split()[0]}; "
          f"scontrol: {'yes' if have_scontrol else 'not found (baseline n/a)'}")
    if have_scontrol:
        try:
            scontrol("show", "hostnames", f"n[000001-{NODES:06d}]")
        except RuntimeError as e:
            print(f"note: Slurm rejects the single range n[000001-{NODES:06d}]: {e}")
        startup, _ = best(lambda: scontrol("show", "hostnames", "n1"), args.repeat)
        print(f"scontrol process start-up alone (show hostnames n1): {fmt(startup)}")
    print()
    header = (f"{'case':<11} {'op':<9} {'mpi_launch':>12} {'python-hostlist':>16} "
              f"{'scontrol':>12} {'scontrol/ours':>14} {'py-hostlist/ours':>17}")
    print(header)
    print("-" * len(header))
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, hosts in (("contiguous", contiguous()), ("fragmented", fragmented())):
            expr = compress(hosts)
            hostfile = os.path.join(tmp, f"{name}.hosts")
            Path(hostfile).write_text("\n".join(hosts) + "\n")

            ours_x, ours_hosts = best(partial(expand, expr), args.repeat)
            py_x: float | None = None
            if python_hostlist is not None:
                py_x, py_hosts = best(partial(python_hostlist.expand_hostlist, expr),
                                      args.repeat)
                failures += py_hosts != hosts
            sc_x: float | None = None
            if have_scontrol:
                sc_x, sc_hosts = best(partial(scontrol, "show", "hostnames", expr),
                                      args.repeat)
                failures += sc_hosts != hosts
            failures += ours_hosts != hosts
            print(f"{name:<11} {'expand':<9} {fmt(ours_x):>12} {fmt(py_x):>16} {fmt(sc_x):>12} "
                  f"{ratio(sc_x, ours_x):>14} {ratio(py_x, ours_x):>17}")

            ours_c, ours_expr = best(partial(compress, hosts), args.repeat)
            py_c: float | None = None
            if python_hostlist is not None:
                py_c, py_expr = best(partial(python_hostlist.collect_hostlist, hosts),
                                     args.repeat)
                failures += python_hostlist.expand_hostlist(py_expr) != hosts
            sc_c: float | None = None
            sc_note = ""
            if have_scontrol:
                sc_c, sc_expr = best(partial(scontrol, "show", "hostlist", hostfile),
                                     args.repeat)
                sc_hosts = expand(sc_expr[0])
                if sc_hosts != hosts:  # Slurm's own problem: reported, not counted
                    sc_note = (f"scontrol show hostlist is WRONG here: its {len(sc_expr[0])}-"
                               f"character answer names {len(sc_hosts)} of {len(hosts)} hosts")
            failures += expand(ours_expr) != hosts
            print(f"{'':<11} {'compress':<9} {fmt(ours_c):>12} {fmt(py_c):>16} {fmt(sc_c):>12} "
                  f"{ratio(sc_c, ours_c):>14} {ratio(py_c, ours_c):>17}")
            print(f"{'':<11} expression: {len(expr)} characters, "
                  f"{expr[:60]}{'...' if len(expr) > 60 else ''}")
            if sc_note:
                print(f"{'':<11} {sc_note}")
    print()
    print("mpi_launch and python-hostlist give back every host list, and agree with "
          "scontrol show hostnames" if failures == 0 else f"DISAGREEMENTS: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
