"""How long the daemon's event loop stops to start a command as a job's owner.

asyncio starts a child in the event loop's thread. With ``user=``/``group=``/
``extra_groups=`` CPython forks (the child copies the parent's page tables); without
them it uses ``vfork``, and ``setpriv`` switches in the child (bridge/runas.py). This
bench grows its own heap to ``--rss`` MB of small objects (a daemon's RSS at 10,000
jobs is ~90 MB), then starts ``/bin/true`` as alice ``--runs`` times each way, taking
turns, and prints the time spent in ``asyncio.create_subprocess_exec`` (the loop's
stall) and the whole command until its exit, median and 95th percentile, each way and
as a ratio (CPython's switch / setpriv's). Needs root and the user alice
(testbed/install.sh).

    .venv/bin/python bench/spawn.py [--rss 90] [--runs 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pwd
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.backend import Owner
from bridge.runas import SYSTEM_PATH, Switch, find_switcher

PATH = SYSTEM_PATH


def grow(mb: int) -> list[object]:
    """Small objects until this process's RSS is about ``mb`` MB (what a fork copies the
    page tables of)."""
    kept: list[object] = []
    page = os.sysconf("SC_PAGE_SIZE")
    while int(Path("/proc/self/statm").read_text().split()[1]) * page < mb * 1e6:
        kept.extend(str(i) * 4 for i in range(50_000))
    return kept


async def one(argv: list[str], **kwargs: object) -> tuple[float, float]:
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={"PATH": PATH}, cwd="/", **kwargs)  # type: ignore[arg-type]
    started = time.perf_counter()
    await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} exited {proc.returncode}")
    return started - start, time.perf_counter() - start


def row(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * len(ordered)) - 1)]
    return f"{name:<54} {statistics.median(samples) * 1e3:8.2f} {p95 * 1e3:8.2f}"


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rss", type=int, default=90, help="the process's RSS, MB")
    parser.add_argument("--runs", type=int, default=200, help="commands each way")
    args = parser.parse_args()
    switcher = find_switcher(PATH)
    if os.geteuid() != 0 or switcher.setpriv is None:
        print("needs root and a working util-linux setpriv", file=sys.stderr)
        return 2
    entry = pwd.getpwnam("alice")
    switch = Switch.to(Owner(entry.pw_uid, entry.pw_gid, "alice"))
    kept = grow(args.rss)
    rss = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    ways = {"CPython's switch (user=, fork)": (["/bin/true"], switch.popen_kwargs()),
            "setpriv's switch (vfork, bridge.runas)": switcher.spawn(switch, ["/bin/true"])}
    stall: dict[str, list[float]] = {k: [] for k in ways}
    whole: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(args.runs):
        for name, (argv, kwargs) in ways.items():
            s, w = await one(argv, **kwargs)
            stall[name].append(s)
            whole[name].append(w)
    print(f"/bin/true as alice, {args.runs} runs each way, taking turns; this process's "
          f"RSS {rss / 1e6:.0f} MB ({len(kept):,} objects kept)")
    print(f"{'ms':<54} {'median':>8} {'p95':>8}")
    for name in ways:
        print(row(f"loop stalled: {name}", stall[name]))
    for name in ways:
        print(row(f"until exit: {name}", whole[name]))
    old, new = (statistics.median(stall[k]) for k in ways)
    print(f"loop stall, CPython's switch / setpriv's: {old / new:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
