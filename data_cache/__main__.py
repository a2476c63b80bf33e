"""``data-cache``: the job-side commands of the bridge's data cache.

Usage::

    data-cache serve --source URI [--format F] [--dir DIR] [--index K --count N]
                     [--iceberg-metadata FILE | --iceberg-catalog sqlite:///DB
                      [--iceberg-catalog-name NAME]]
                     [--block-rows B] [--memory-limit BYTES] [--advertise HOST]
                     [--port P] [--peers ADDR,ADDR...]
    data-cache wait --dir DIR --count N [--pid PID] [--timeout SECONDS] [--remove]
    data-cache credentials
    data-cache run --source URI [serve options] --tasks-per-node T -- LAUNCH ARGS...

``serve`` (one per cache node, e.g. a background ``srun`` step) loads its partition
(``--index``/``--count`` default to the node's place in the allocation:
``SLURM_NODEID``/``SLURM_NNODES``, ``FLUX_TASK_RANK``/``FLUX_JOB_SIZE``), then listens
on ``--port`` (default: a free one) and writes ``DIR/server-K.json`` =
``{"address": "grpc+tls://HOST:PORT"}`` (``grpc://`` without a certificate), or
``{"error": ...}`` when the dataset cannot be served (and exits 1). It serves until it
is signalled. The token comes from ``HPC_BRIDGE_DATA_CACHE_TOKEN`` (required); with
``HPC_BRIDGE_DATA_CACHE_CERT`` and ``_KEY`` it speaks mutual TLS. ``--peers`` gives
every server's address up front (where they are known in advance: a JobSet's stable
pod names), instead of ``wait`` telling them.

``credentials`` prints ``export`` lines with fresh credentials (a token, a TLS
certificate and key: data_cache/credentials.py) for the batch script to ``eval``: they
reach the job's steps through the environment and are never written to a file.

``wait`` returns once all ``N`` servers are serving: it tells each the others'
addresses and prints them, comma-separated, for ``HPC_BRIDGE_DATA_CACHE``. It exits 1
with ``data-cache: error: ...`` (the server's own reason, e.g. the path and why it
cannot be read) when a server failed, when process ``PID`` (the servers' step) ended
first, or after ``--timeout``.

``run`` is what each task of a Flux job runs: the first task of each node starts its
server, every task waits for all, then runs LAUNCH with the cache's variables set
(data_cache/run.py).

``DIR`` must be a directory only the job's user can write (the batch script makes it
with ``mktemp -d``).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
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


def serve(args: argparse.Namespace) -> None:
    from data_cache.credentials import TOKEN_ENV, from_env, location
    from data_cache.layout import block_count, server_blocks
    from data_cache.rendezvous import write_status
    from data_cache.server import CacheServer
    from data_cache.source import SourceError, open_source

    creds = from_env()
    if creds is None:
        _fail(f"{TOKEN_ENV} is not set")
    index = _place(args.index, ("SLURM_NODEID", "FLUX_TASK_RANK"), "index")
    count = _place(args.count, ("SLURM_NNODES", "FLUX_JOB_SIZE"), "count")
    if not 0 <= index < count:
        _fail(f"--index {index} is outside --count {count}")
    from data_cache.rendezvous import CacheStartError, PrivateDir

    try:  # opened once, before anything is loaded: later swaps of the path change nothing
        status = PrivateDir.open(Path(args.dir))[0] if args.dir else None
    except CacheStartError as exc:
        _fail(str(exc))
    peers = [p for p in args.peers.split(",") if p] if args.peers else None
    if peers is not None and len(peers) != count:
        _fail(f"--peers names {len(peers)} servers, not --count {count}")
    try:
        if args.source.startswith("cache://"):
            from data_cache.iceberg import open_iceberg

            source = open_iceberg(args.source, metadata_location=args.iceberg_metadata,
                                  catalog_uri=args.iceberg_catalog,
                                  catalog_name=args.iceberg_catalog_name)
        else:
            source = open_source(args.source, args.format)
        blocks = server_blocks(index, count, block_count(source.total_rows, args.block_rows))
        batches = source.load(blocks, args.block_rows, args.memory_limit)
    except SourceError as exc:
        if status is not None:
            write_status(status, index, {"error": str(exc)})
        _fail(str(exc))
    tls = creds.tls is not None
    server = CacheServer(location("0.0.0.0", args.port, tls), token=creds.token,  # noqa: S104
                         schema=source.schema, batches=batches, total_rows=source.total_rows,
                         block_rows=args.block_rows, index=index, servers=count, peers=peers,
                         tls=creds.tls)
    address = location(args.advertise or socket.gethostname(), server.port, tls)
    if status is not None:
        write_status(status, index, {"address": address})
    print(f"{PROG}: server {index} of {count} serves {sum(b.num_rows for b in batches)} rows "
          f"at {address}", file=sys.stderr, flush=True)
    server.serve()


def wait(args: argparse.Namespace) -> None:
    from data_cache.credentials import TOKEN_ENV, from_env
    from data_cache.rendezvous import CacheStartError, PrivateDir, tell_peers, wait_for_servers

    creds = from_env()
    if creds is None:
        _fail(f"{TOKEN_ENV} is not set")
    try:
        directory, _ = PrivateDir.open(Path(args.dir))
    except CacheStartError as exc:
        _fail(str(exc))
    try:
        addresses = wait_for_servers(directory, args.count, pid=args.pid,
                                     timeout=args.timeout)
        tell_peers(addresses, creds)
    except CacheStartError as exc:
        _fail(str(exc))
    finally:
        if args.remove:
            directory.remove()
    print(",".join(addresses), flush=True)


def _serve_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", required=True)
    parser.add_argument("--format", choices=("parquet", "ipc", "csv"))
    parser.add_argument("--block-rows", type=int, default=DEFAULT_BLOCK_ROWS)
    parser.add_argument("--memory-limit", type=int)
    parser.add_argument("--iceberg-metadata")
    parser.add_argument("--iceberg-catalog")
    parser.add_argument("--iceberg-catalog-name", default="default")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="load this node's partition and serve it")
    _serve_options(s)
    s.add_argument("--dir")
    s.add_argument("--port", type=int, default=0)
    s.add_argument("--peers")
    s.add_argument("--index", type=int)
    s.add_argument("--count", type=int)
    s.add_argument("--advertise")
    sub.add_parser("credentials", help="print export lines with fresh credentials (a "
                                       "token, a TLS certificate and key) for eval")
    w = sub.add_parser("wait", help="wait until every server serves; print their addresses")
    w.add_argument("--dir", required=True)
    w.add_argument("--count", type=int, required=True)
    w.add_argument("--pid", type=int)
    w.add_argument("--timeout", type=float)
    w.add_argument("--remove", action="store_true",
                   help="remove DIR (its status files) when done, whatever the outcome")
    r = sub.add_parser("run", help="a Flux task: start this node's server, wait for all, "
                                   "run the launch command")
    _serve_options(r)
    r.add_argument("--tasks-per-node", type=int, default=1)
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    launch: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, launch = argv[:cut], argv[cut + 1:]
    args = _parser().parse_args(argv)
    if args.command in ("serve", "run") and args.block_rows < 1:
        _fail("--block-rows must be >= 1")
    if args.command in ("wait", "run"):  # they connect to the servers
        from data_cache.credentials import channel_options
        try:
            channel_options()
        except ValueError as exc:
            _fail(str(exc))
    if args.command == "serve":
        serve(args)
    elif args.command == "wait":
        wait(args)
    elif args.command == "credentials":
        from data_cache.credentials import generate, shell_exports

        sys.stdout.write(shell_exports(generate()))
    else:
        from data_cache.rendezvous import CacheStartError
        from data_cache.run import run

        if not launch:
            _fail("run needs the launch command after --")
        if args.tasks_per_node < 1:
            _fail("--tasks-per-node must be >= 1")
        serve_argv = ["--source", args.source, "--block-rows", str(args.block_rows),
                      "--iceberg-catalog-name", args.iceberg_catalog_name]
        for flag, value in (("--format", args.format), ("--memory-limit", args.memory_limit),
                            ("--iceberg-metadata", args.iceberg_metadata),
                            ("--iceberg-catalog", args.iceberg_catalog)):
            if value:
                serve_argv += [flag, str(value)]
        try:
            raise SystemExit(run(args, serve_argv, launch))
        except CacheStartError as exc:
            _fail(str(exc))


if __name__ == "__main__":
    main()
