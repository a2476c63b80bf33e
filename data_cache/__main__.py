"""``data-cache``: the job-side commands of the bridge's data cache.

Usage::

    data-cache serve --source URI [--format F] [--dir DIR] [--index K --count N]
                     [--block-rows B] [--memory-limit BYTES] [--advertise HOST]
                     [--port P] [--peers ADDR,ADDR...]
    data-cache wait --dir DIR --count N [--pid PID] [--timeout SECONDS]

``serve`` (one per cache node, e.g. a background ``srun`` step) loads its partition
(``--index``/``--count`` default to the node's place in the allocation:
``SLURM_NODEID``/``SLURM_NNODES``, ``FLUX_TASK_RANK``/``FLUX_JOB_SIZE``), then listens
on ``--port`` (default: a free one) and writes ``DIR/server-K.json`` =
``{"address": "grpc://HOST:PORT"}`` (or ``{"error": ...}`` when the dataset cannot be
served, and exits 1). It serves until it is signalled. The token comes from
``HPC_BRIDGE_DATA_CACHE_TOKEN`` (required). ``--peers`` gives every server's address
up front (where they are known in advance: a JobSet's stable pod names), instead of
``wait`` telling them.

``wait`` returns once all ``N`` servers are serving: it tells each the others'
addresses and prints them, comma-separated, for ``HPC_BRIDGE_DATA_CACHE``. It exits 1
with ``data-cache: error: ...`` (the server's own reason, e.g. the path and why it
cannot be read) when a server failed, when process ``PID`` (the servers' step) ended
first, or after ``--timeout``.

``DIR`` must be a directory only the job's user can write (the batch script makes it
with ``mktemp -d``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import NoReturn

PROG = "data-cache"
#: Rows per block when a job names none: 64 Ki rows (a few MB for typical rows).
DEFAULT_BLOCK_ROWS = 65536


def _fail(message: str) -> NoReturn:
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def _place(given: int | None, names: tuple[str, ...], what: str) -> int:
    if given is not None:
        return given
    for name in names:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    _fail(f"--{what} is required outside a Slurm or Flux step ({'/'.join(names)} unset)")


def _write(path: Path, doc: dict[str, str]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh)
    os.replace(tmp, path)


def serve(args: argparse.Namespace) -> None:
    from data_cache.layout import block_count, server_blocks
    from data_cache.server import TOKEN_ENV, CacheServer
    from data_cache.source import SourceError, open_source

    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        _fail(f"{TOKEN_ENV} is not set")
    index = _place(args.index, ("SLURM_NODEID", "FLUX_TASK_RANK"), "index")
    count = _place(args.count, ("SLURM_NNODES", "FLUX_JOB_SIZE"), "count")
    if not 0 <= index < count:
        _fail(f"--index {index} is outside --count {count}")
    status = Path(args.dir) / f"server-{index}.json" if args.dir else None
    peers = [p for p in args.peers.split(",") if p] if args.peers else None
    if peers is not None and len(peers) != count:
        _fail(f"--peers names {len(peers)} servers, not --count {count}")
    try:
        source = open_source(args.source, args.format)
        blocks = server_blocks(index, count, block_count(source.total_rows, args.block_rows))
        batches = source.load(blocks, args.block_rows, args.memory_limit)
    except SourceError as exc:
        if status is not None:
            _write(status, {"error": str(exc)})
        _fail(str(exc))
    server = CacheServer(f"grpc://0.0.0.0:{args.port}", token=token, schema=source.schema,
                         batches=batches, total_rows=source.total_rows,
                         block_rows=args.block_rows, index=index, servers=count, peers=peers)
    host = args.advertise or socket.gethostname()
    if status is not None:
        _write(status, {"address": f"grpc://{host}:{server.port}"})
    print(f"{PROG}: server {index} of {count} serves {sum(b.num_rows for b in batches)} rows "
          f"at grpc://{host}:{server.port}", file=sys.stderr, flush=True)
    server.serve()


def wait(args: argparse.Namespace) -> None:
    import pyarrow.flight as flight

    from data_cache.server import TOKEN_ENV, auth_header

    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        _fail(f"{TOKEN_ENV} is not set")
    directory = Path(args.dir)
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    addresses: dict[int, str] = {}
    delay = 0.01
    while len(addresses) < args.count:
        for k in range(args.count):
            if k in addresses:
                continue
            try:
                doc = json.loads((directory / f"server-{k}.json").read_text())
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                _fail(f"cache server {k}: unreadable status: {exc}")
            if "error" in doc:
                _fail(f"cache server {k}: {doc['error']}")
            addresses[k] = str(doc["address"])
        if len(addresses) == args.count:
            break
        if args.pid is not None and not _alive(args.pid):
            _fail(f"the cache servers ended before {args.count - len(addresses)} of them "
                  "were serving (see the job's output for their messages)")
        if deadline is not None and time.monotonic() > deadline:
            _fail(f"{args.count - len(addresses)} cache servers were not serving after "
                  f"{args.timeout} s")
        # A status file appears once, written by a process on another node: polled,
        # with a back-off (no file-system notification reaches across nodes).
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
    ordered = [addresses[k] for k in range(args.count)]
    options = flight.FlightCallOptions(headers=[auth_header(token)], timeout=30)
    body = json.dumps(ordered).encode()
    for k, address in enumerate(ordered):
        try:
            with flight.FlightClient(address) as client:
                list(client.do_action(flight.Action("peers", body), options))
        except flight.FlightError as exc:
            _fail(f"cache server {k} ({address}): {exc}")
    print(",".join(ordered), flush=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A child that ended but was not reaped yet is a zombie: gone for our purpose.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="load this node's partition and serve it")
    s.add_argument("--source", required=True)
    s.add_argument("--format", choices=("parquet", "ipc", "csv"))
    s.add_argument("--dir")
    s.add_argument("--port", type=int, default=0)
    s.add_argument("--peers")
    s.add_argument("--index", type=int)
    s.add_argument("--count", type=int)
    s.add_argument("--block-rows", type=int, default=DEFAULT_BLOCK_ROWS)
    s.add_argument("--memory-limit", type=int)
    s.add_argument("--advertise")
    w = sub.add_parser("wait", help="wait until every server serves; print their addresses")
    w.add_argument("--dir", required=True)
    w.add_argument("--count", type=int, required=True)
    w.add_argument("--pid", type=int)
    w.add_argument("--timeout", type=float)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        if args.block_rows < 1:
            _fail("--block-rows must be >= 1")
        serve(args)
    else:
        wait(args)


if __name__ == "__main__":
    main()
