"""The data cache's Arrow Flight path against what it competes with, in one run.

``--rows`` rows (two int64, two float64 columns: 32 bytes a row) written as 8 Parquet
files (1 Mi-row row groups, snappy) to a temporary directory, served by cache servers
(``python -m data_cache serve``, a process each, found with ``data_cache wait``) in
``--block-rows``-row blocks. Measured, best of ``--repeat`` runs each:

1. **Flight vs the loopback limit** (goal >= 90 %): this process streaming every block
   of one server (``open_dataset(...).batches(0)``), in plain gRPC and with the mutual
   TLS jobs use (data_cache/credentials.py), against a plain TCP socket on
   127.0.0.1 (a child ``sendall``-ing as many bytes, one block's worth a call, into a
   preallocated, already-touched buffer this process ``recv_into``-s); and the CPU
   seconds per GB of each end (sender/server, receiver/reader: ``/proc/PID/stat`` and
   ``time.process_time``), the mean of the passes; and of the busiest thread of either
   end (``/proc/PID/task/TID/stat``): with a core for every thread, no pipeline moves
   a GB faster than that thread works on it.
2. **4 readers on 2 servers vs Parquet from disk**: ranks 0..3 of 4, each a process,
   released by a barrier, timing the first batch (``open_dataset`` included) and its
   share of epoch 0 as numpy (``Shard.numpy``); against 4 processes reading rows
   ``r*N//4 .. (r+1)*N//4`` (only their row groups) with ``pyarrow.parquet`` as numpy,
   from the page cache and after ``posix_fadvise(DONTNEED)``. Median first batch,
   slowest epoch, of the round whose slowest epoch was best.
3. **Zero copy and reader memory**: a child streams everything from the 2 servers as
   numpy (``zero_copy_only=True``, only the current batch kept), checks each column's
   numpy data pointer is its Arrow buffer's address, and reports each pass's peak RSS
   growth (``VmHWM`` reset through ``/proc/self/clear_refs``) in blocks (pass 1 also
   pages in library code and warms the allocator); then a fresh child keeps every batch
   of one pass: its peak RSS growth beyond the bytes it holds, in blocks.

The reader's malloc setting (data_cache/malloc.py) applies to every reader here (this
process and its reading children); ``HPC_BRIDGE_DATA_CACHE_MALLOC=0`` runs them with
glibc's defaults. So does its receive window (data_cache/credentials.py):
``HPC_BRIDGE_DATA_CACHE_WINDOW=0`` runs them with gRPC's own.

All processes share this machine's CPUs. Figures are printed; the exit status is 0.

    .venv/bin/python bench/data_cache.py [--rows 8000000] [--block-rows 65536] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

# This file is bench/data_cache.py: its folder must not shadow the data_cache package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from bench.procstat import busiest, cpu_seconds, thread_cpu_seconds  # noqa: E402
from data_cache import credentials, open_dataset  # noqa: E402
from data_cache.malloc import keep_freed_blocks  # noqa: E402
from data_cache.privatedir import PrivateDir  # noqa: E402

FILES, READERS, GOAL = 8, 4, 0.90
MP = multiprocessing.get_context("spawn")
Files = list[tuple[str, int]]  # (path, rows), in row order


def _write(directory: Path, rows: int) -> Files:
    rng, out = np.random.default_rng(0), []
    for f in range(FILES):
        lo, hi = f * rows // FILES, (f + 1) * rows // FILES
        n, path = hi - lo, str(directory / f"part-{f:02d}.parquet")
        pq.write_table(pa.table({"id": np.arange(lo, hi, dtype=np.int64),
                                 "label": rng.integers(0, 1000, n, dtype=np.int64),
                                 "x": rng.random(n), "y": rng.standard_normal(n)}),
                       path, row_group_size=1 << 20)
        out.append((path, n))
    return out


def _cpu(pid: int | None = None) -> float:
    """CPU seconds (user + system, all threads) of this process, or of process ``pid``."""
    return time.process_time() if pid is None else cpu_seconds(pid)


@contextmanager
def _servers(source: Path, count: int, block_rows: int, tls: bool = True,
             pids: list[int] | None = None) -> Iterator[list[str]]:
    """``count`` cache servers, each its own process (their output in a log file), with
    the job's credentials from this process's environment (``tls``: mutual TLS, as jobs
    run them; else plain gRPC and the token); their process ids are added to ``pids``."""
    env, cmd = dict(os.environ), [sys.executable, "-m", "data_cache"]
    if not tls:
        env.pop(credentials.CERT_ENV)
        env.pop(credentials.KEY_ENV)
    with tempfile.TemporaryDirectory(prefix="bench-data-cache-") as status, \
            open(Path(status) / "log", "w+b") as log:
        procs = [subprocess.Popen([*cmd, "serve", "--source", str(source), "--dir", status,
                                   "--index", str(k), "--count", str(count), "--block-rows",
                                   str(block_rows), "--advertise", "127.0.0.1"],
                                  cwd=_HERE.parent, env=env, stdout=log, stderr=log)
                 for k in range(count)]
        if pids is not None:
            pids.extend(p.pid for p in procs)
        try:
            done = subprocess.run([*cmd, "wait", "--dir", status, "--count", str(count),
                                   "--timeout", "300"], cwd=_HERE.parent, env=env,
                                  capture_output=True, text=True, check=False)
            if done.returncode:
                log.seek(0)
                raise SystemExit(f"{done.stderr}{log.read().decode(errors='replace')}")
            yield done.stdout.strip().split(",")
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                with suppress(subprocess.TimeoutExpired):
                    p.wait(10)
                p.kill()  # a no-op once it ended
                p.wait()


def _columns(batch: pa.RecordBatch) -> dict[str, Any]:
    return {n: batch.column(i).to_numpy(zero_copy_only=True)
            for i, n in enumerate(batch.schema.names)}


def _parquet(files: Files, lo: int, hi: int, block_rows: int) -> Iterator[dict[str, Any]]:
    """Rows ``lo..hi`` of the files as numpy, reading only the row groups holding them."""
    offset = 0
    for path, rows in files:
        if lo < offset + rows and offset < hi:
            pf, groups, pos, start = pq.ParquetFile(path), [], offset, -1
            for g in range(pf.num_row_groups):
                n = pf.metadata.row_group(g).num_rows
                if lo < pos + n and pos < hi:
                    groups.append(g)
                    start = pos if start < 0 else start
                pos += n
            for batch in pf.iter_batches(batch_size=block_rows, row_groups=groups):
                a, b = max(lo - start, 0), min(hi - start, batch.num_rows)
                if b > a:
                    yield _columns(batch.slice(a, b - a))
                start += batch.num_rows
        offset += rows


def _reader(kind: str, rank: int, where: Any, block_rows: int, repeat: int,
            barrier: Any, results: Any) -> None:
    """Child (part 2): each round's (round, first batch, epoch) for one rank's share."""
    for n in range(repeat):
        if kind == "cold":
            for path, _ in where:
                with open(path, "rb") as fh:
                    os.fsync(fh.fileno())
                    os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        barrier.wait(120)
        start, first = time.perf_counter(), 0.0
        if kind == "cache":
            with open_dataset(where, rank=rank, world_size=READERS) as shard:
                for _cols in shard.numpy(0):
                    first = first or time.perf_counter() - start
        else:
            total = sum(rows for _, rows in where)
            lo, hi = rank * total // READERS, (rank + 1) * total // READERS
            for _cols in _parquet(where, lo, hi, block_rows):
                first = first or time.perf_counter() - start
        results.put((n, first, time.perf_counter() - start))


def _status(field: str) -> int:
    lines = Path("/proc/self/status").read_text().splitlines()
    return next(int(x.split()[1]) * 1024 for x in lines if x.startswith(field + ":"))


def _memory(addresses: list[str], repeat: int, results: Any) -> None:
    """Child (part 3): (peak growth, held after) a pass, then block bytes, zero-copy counts."""
    out: list[int] = []
    block = checked = shared = 0
    with open_dataset(addresses, rank=0, world_size=1) as shard:
        for _ in range(repeat):
            gc.collect()
            base = _status("VmRSS")
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to VmRSS
            for batch in shard.batches(0):
                for i, array in enumerate(_columns(batch).values()):
                    column = batch.column(i)
                    address = column.buffers()[1].address + column.offset * array.itemsize
                    checked, shared = checked + 1, shared + (array.ctypes.data == address)
                block = max(block, batch.nbytes)
            del batch
            out += [_status("VmHWM") - base, _status("VmRSS") - base]
    results.put((*out, block, checked, shared))


def _holding(addresses: list[str], results: Any) -> None:
    """Child (part 3): a fresh reader keeping every batch of a pass: (peak RSS growth,
    bytes held)."""
    with open_dataset(addresses, rank=0, world_size=1) as shard:
        gc.collect()
        base = _status("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")
        kept = list(shard.batches(0))
        results.put((_status("VmHWM") - base, sum(b.nbytes for b in kept)))


def _sender(port: int, total: int, chunk: int, rounds: int) -> None:
    """Child (part 1's baseline): ``total`` bytes, ``chunk`` a call, on each request."""
    data = memoryview(b"\x01" * chunk)
    with socket.create_connection(("127.0.0.1", port)) as conn:
        for _ in range(rounds):
            conn.recv(1)
            for at in range(0, total, chunk):
                conn.sendall(data[:min(chunk, total - at)])


def _reap(procs: list[Any]) -> None:
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.terminate()
            p.join()


def _threads(pids: list[int]) -> dict[tuple[int, int], float]:
    """(pid, tid) -> CPU seconds, for every thread of ``pids``."""
    return {(pid, tid): t for pid in pids for tid, t in thread_cpu_seconds(pid).items()}


def _tcp(total: int, chunk: int, rounds: int) -> tuple[float, float, float, float]:
    """The best time to receive ``total`` bytes over loopback TCP from another process,
    the sender's and this process's CPU seconds a round (their mean), and the CPU
    seconds a round of the busiest thread of either."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(60)
        child = MP.Process(target=_sender, args=(server.getsockname()[1], total, chunk, rounds))
        child.start()
        assert child.pid is not None
        ends = [child.pid, os.getpid()]
        try:
            conn, _ = server.accept()
            view, best = memoryview(bytearray(total)), float("inf")
            sender, receiver = _cpu(child.pid), _cpu()
            threads = _threads(ends)
            with conn:
                for _ in range(rounds):
                    start, got = time.perf_counter(), 0
                    conn.sendall(b"g")
                    while got < total:
                        n = conn.recv_into(view[got:])
                        if not n:
                            raise SystemExit("the TCP sender closed early")
                        got += n
                    best = min(best, time.perf_counter() - start)
                # All bytes are in: the sender is done (its figures stay readable until
                # it is reaped).
                sender, receiver = _cpu(child.pid) - sender, _cpu() - receiver
                most = busiest(threads, _threads(ends))
            return best, sender / rounds, receiver / rounds, most / rounds
        finally:
            _reap([child])


def _children(target: Any, arglists: list[tuple[Any, ...]], answers: int) -> list[Any]:
    """Run ``target(*args, results)`` in spawned children; collect ``answers`` results."""
    results = MP.Queue()
    procs = [MP.Process(target=target, args=(*args, results)) for args in arglists]
    for p in procs:
        p.start()
    try:
        return [results.get(timeout=300) for _ in range(answers)]
    finally:
        _reap(procs)


def _readers(kind: str, where: Any, args: argparse.Namespace) -> tuple[float, float]:
    """(median first batch, slowest epoch) of the round whose slowest epoch was best."""
    barrier = MP.Barrier(READERS)
    got = _children(_reader, [(kind, r, where, args.block_rows, args.repeat, barrier)
                              for r in range(READERS)], READERS * args.repeat)
    rounds = [[g for g in got if g[0] == n] for n in range(args.repeat)]
    best = min(rounds, key=lambda rs: max(r[2] for r in rs))
    return statistics.median(r[1] for r in best), max(r[2] for r in best)


def _flight(source: Path, args: argparse.Namespace, creds: credentials.Credentials, tls: bool
            ) -> tuple[float, float, float, float, int]:
    """Part 1: one reader streaming every block of one server, ``args.repeat`` times:
    (best seconds, the server's and this process's CPU seconds a pass, the busiest
    thread's of either, bytes a pass)."""
    pids: list[int] = []
    best, nbytes = float("inf"), 0
    with _servers(source, 1, args.block_rows, tls, pids) as addresses, \
            open_dataset(addresses, rank=0, world_size=1, credentials=creds if tls
                         else credentials.Credentials(creds.token)) as shard:
        server, reader = _cpu(pids[0]), _cpu()
        threads = _threads([pids[0], os.getpid()])
        for _ in range(args.repeat):
            start, nbytes = time.perf_counter(), 0
            for batch in shard.batches(0):
                nbytes += batch.nbytes
            best = min(best, time.perf_counter() - start)
        server, reader = _cpu(pids[0]) - server, _cpu() - reader
        most = busiest(threads, _threads([pids[0], os.getpid()]))
    return best, server / args.repeat, reader / args.repeat, most / args.repeat, nbytes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=8_000_000)
    parser.add_argument("--block-rows", type=int, default=65536)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if args.rows < READERS * args.block_rows or args.block_rows < 1 or args.repeat < 1:
        parser.error("--rows >= 4 * --block-rows, --block-rows >= 1, --repeat >= 1")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks
    with tempfile.TemporaryDirectory(prefix="bench-data-cache-") as name:
        # The job's credentials, as `data-cache credentials` makes them, in the
        # environment every server and reader (spawned children too) inherits.
        private, _ = PrivateDir.open(Path(name) / "creds", create=True)
        creds = credentials.make(private)
        os.environ.update(creds.env())
        files = _write(Path(name), args.rows)
        print(f"dataset: {args.rows:,} rows x 4 columns = {args.rows * 32 / 1e6:,.0f} MB in "
              f"{FILES} Parquet files; blocks of {args.block_rows:,} rows = "
              f"{args.block_rows * 32 / 1e6:.2f} MB; {os.cpu_count()} CPUs")
        plain, tls = (_flight(Path(name), args, creds, t) for t in (False, True))
        nbytes = plain[4]
        tcp = _tcp(nbytes, args.block_rows * 32, args.repeat)
        with _servers(Path(name), 2, args.block_rows) as addresses:
            cache = _readers("cache", addresses, args)
            *passes, block, checked, shared = _children(
                _memory, [(addresses, args.repeat)], 1)[0]
            hold_peak, held = _children(_holding, [(addresses,)], 1)[0]
        warm, cold = _readers("warm", files, args), _readers("cold", files, args)
    tcp_s, flight_s, tls_s = tcp[0], plain[0], tls[0]
    ratio, tls_ratio = tcp_s / flight_s, tcp_s / tls_s
    gb = nbytes / 1e9
    print(f"1. one reader, one server on 127.0.0.1, {nbytes / 1e6:,.0f} MB, best of "
          f"{args.repeat}:\n   TCP socket baseline  {nbytes / tcp_s / 1e9:6.2f} GB/s  "
          f"({tcp_s * 1e3:7.1f} ms)\n   Flight, plain gRPC   {nbytes / flight_s / 1e9:6.2f} "
          f"GB/s  ({flight_s * 1e3:7.1f} ms)\n   Flight, mutual TLS   {nbytes / tls_s / 1e9:6.2f} "
          f"GB/s  ({tls_s * 1e3:7.1f} ms; what jobs run)\n"
          f"   ratio Flight / TCP   {ratio:6.1%} plain, {tls_ratio:6.1%} TLS   goal >= "
          f"{GOAL:.0%}: {'met' if ratio >= GOAL else 'NOT met'} (plain)")
    window = dict(credentials.channel_options()).get("grpc.http2.lookahead_bytes")
    shown = f"{window:,} bytes" if window else "gRPC's own"
    print(f"   CPU per GB, both ends, mean of the {args.repeat} passes (reader's malloc: "
          f"{'freed blocks kept' if keep_freed_blocks() else 'glibc defaults'}; receive "
          f"window: {shown}):")
    for label, (_, send, recv, *_rest) in (("TCP socket", tcp), ("Flight, plain gRPC", plain),
                                           ("Flight, mutual TLS", tls)):
        both = (send + recv) / gb
        print(f"   {label:<20} sender {send / gb * 1e3:5.0f} + receiver {recv / gb * 1e3:5.0f} "
              f"= {both * 1e3:5.0f} ms/GB   TCP's / this {(tcp[1] + tcp[2]) / gb / both:6.1%}")
    print(f"   the busiest thread of either end, CPU per GB (with a core for every thread, "
          f"the rate is at most 1 GB per this; {os.cpu_count()} CPUs here):")
    for label, most in (("TCP socket", tcp[3]), ("Flight, plain gRPC", plain[3]),
                        ("Flight, mutual TLS", tls[3])):
        share = f"{tcp[3] / most:6.1%}" if most else "   n/a (under a clock tick)"
        print(f"   {label:<20} {most / gb * 1e3:5.0f} ms/GB   TCP's / this {share}")
    print(f"2. {READERS} readers (world {READERS}) as numpy, best of {args.repeat} rounds "
          "(median first batch, slowest epoch):")
    for label, (first, epoch) in (("cache: 2 servers, Flight", cache),
                                  ("Parquet, page cache", warm),
                                  ("Parquet, cold (fadvise)", cold)):
        print(f"   {label:<26} first batch {first * 1e3:8.1f} ms   epoch {epoch * 1e3:8.1f} ms")
    for label, (first, epoch) in (("page cache", warm), ("cold", cold)):
        print(f"   ratio cache / Parquet {label:<10}: first batch {cache[0] / first:5.2f}  "
              f"epoch {cache[1] / epoch:5.2f}  (< 1: the cache is faster)")
    print(f"3. one reader, the whole dataset from 2 servers as numpy, {args.repeat} passes:\n"
          f"   zero copy: {shared} of {checked} numpy columns share their Arrow buffer "
          f"({'all' if shared == checked else 'NOT all'})")
    for n, (peak, kept) in enumerate(zip(passes[::2], passes[1::2], strict=True), 1):
        print(f"   pass {n}: peak RSS growth {peak / 1e6:7.2f} MB = {peak / block:5.2f} blocks "
              f"of {block / 1e6:.2f} MB; RSS after it {kept / 1e6:+7.2f} MB")
    print(f"   a fresh reader keeping a whole pass: peak RSS growth {hold_peak / 1e6:7.2f} MB "
          f"= the {held / 1e6:.2f} MB it holds + {(hold_peak - held) / block:5.2f} blocks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
