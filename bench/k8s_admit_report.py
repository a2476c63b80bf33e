"""How ``bench/k8s_admit.py`` prints its results: one line (or a few) per
:class:`~bench.k8s_admit_phases.Batch` and :class:`~bench.k8s_admit_phases.Single`,
and the controller-CPU line shared by the bridge daemon's and Trainer's rows.
"""

from __future__ import annotations

import statistics

from bench.k8s_admit_phases import Batch, Single, pct


def fmt_batch(b: Batch) -> str:
    lat = b.latencies
    line = (f"{b.label:<40} apply {b.apply_s:6.2f}s  all seen {b.total_s:6.2f}s  "
            f"{b.n / b.total_s:6.1f} jobs/s  latency p50 {pct(lat, .5):6.2f} "
            f"p95 {pct(lat, .95):6.2f} max {max(lat):6.2f}s")
    if b.lags:
        line += (f"\n{'':<40} lag TrainJob seen -> JobSet seen: p50 {pct(b.lags, .5):5.2f} "
                 f"p95 {pct(b.lags, .95):5.2f} max {max(b.lags):5.2f}s")
    if b.status_s is not None:
        line += f"; all statuses written {b.status_s:6.2f}s"
    if b.status_lags:
        line += (f"\n{'':<40} lag TrainJob seen -> first status seen: p50 "
                 f"{pct(b.status_lags, .5):5.2f} p95 {pct(b.status_lags, .95):5.2f} max "
                 f"{max(b.status_lags):5.2f}s")
    if b.complete_s is not None:
        line += f", all Complete {b.complete_s:6.2f}s"
    if b.notes:
        line += f"\n{'':<40} {b.notes}"
    return line


def fmt_single(s: Single) -> str:
    lat = s.latencies
    return (f"{s.label:<40} kubectl apply {statistics.mean(s.apply_s) * 1e3:5.0f} ms  "
            f"latency p50 {pct(lat, .5) * 1e3:6.0f} p95 {pct(lat, .95) * 1e3:6.0f} "
            f"max {max(lat) * 1e3:6.0f} ms")


def fmt_cpu(b: Batch, who: str) -> str:
    assert b.cpu is not None
    wall = b.complete_s or b.status_s or b.total_s
    return (f"{'':<40} CPU s until all Complete: {who} {b.cpu[0]:.2f}, bench "
            f"{b.cpu[1]:.1f} (of {wall:.1f}s wall)")
