"""``data-cache run``: the cache for a back end whose job is just its tasks (Flux). Every
task of the job runs ``data-cache run SERVE-OPTIONS --tasks-per-node T -- LAUNCH...``.

Contract (the task's place comes from Flux's ``FLUX_TASK_RANK``,
``FLUX_TASK_LOCAL_ID``, ``FLUX_JOB_NNODES`` and ``FLUX_JOB_ID``; node ``n`` holds tasks
``n*T .. n*T+T-1``, as Flux places them with ``per-resource: node``):

1. The first task to get there makes ``<cwd>/.hpc-bridge-cache-<job id>``
   (:func:`data_cache.rendezvous.private_dir`: 0700, checked by every task so that a
   directory someone else planted is refused) and makes the job's credentials in it
   (a random token, a TLS certificate and key: data_cache/credentials.py); every task
   reads them. They never leave the job's processes and this directory.
2. The first task of each node starts that node's server (``data-cache serve --index
   n --count N --dir DIR``) as a child process.
3. Every task waits until all servers serve (a server's failure, with its reason, ends
   every task with status 1 before the training starts), then runs LAUNCH with
   ``HPC_BRIDGE_DATA_CACHE`` and the credentials set, passing on SIGTERM, SIGINT and SIGHUP,
   and exits with its status (128+signal when it was killed).
4. A node's server outlives the node's own training until every node's is done (other
   ranks may still read from it): the first task of each node marks ``done-n``, waits
   for all, stops its server and marks ``left-n``; node 0 removes the directory once
   every node has left.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from data_cache import credentials
from data_cache.credentials import Credentials
from data_cache.rendezvous import CacheStartError, private_dir, tell_peers, wait_for_servers

__all__ = ["run"]

#: How long a task waits for the token the directory's maker writes.
TOKEN_WAIT_SECONDS = 120.0


def _flux_place(tasks_per_node: int) -> tuple[int, int, int, str]:
    env = os.environ
    try:
        rank, local = int(env["FLUX_TASK_RANK"]), int(env["FLUX_TASK_LOCAL_ID"])
        nodes, job = int(env["FLUX_JOB_NNODES"]), env["FLUX_JOB_ID"]
    except (KeyError, ValueError):
        raise CacheStartError("data-cache run needs a Flux task's FLUX_TASK_RANK, "
                              "FLUX_TASK_LOCAL_ID, FLUX_JOB_NNODES and FLUX_JOB_ID") from None
    if not job.replace("ƒ", "f").isalnum():
        raise CacheStartError(f"unexpected FLUX_JOB_ID {job!r}")
    return rank // tasks_per_node, local, nodes, job


def _poll(ready: Callable[[], bool], what: str, timeout: float | None = None) -> None:
    """Wait until ``ready()`` (files written on other nodes: polled with a back-off)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = 0.01
    while not ready():
        if deadline is not None and time.monotonic() > deadline:
            raise CacheStartError(f"{what} did not happen within {timeout} s")
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def _credentials(directory: Path, made: bool) -> Credentials:
    if made:
        try:
            return credentials.make(directory)
        except credentials.CredentialsError as exc:
            raise CacheStartError(str(exc)) from None
    _poll((directory / "token").exists, "the cache credentials", TOKEN_WAIT_SECONDS)
    try:
        return credentials.read(directory)
    except credentials.CredentialsError as exc:
        raise CacheStartError(str(exc)) from None


def _launch(argv: list[str], env: dict[str, str]) -> int:
    try:
        proc = subprocess.Popen(argv, env=env)
    except OSError as exc:
        print(f"data-cache: error: cannot run {argv[0]!r}: {exc.strerror}", file=sys.stderr,
              flush=True)
        return 127

    def forward(signum: int, frame: FrameType | None) -> None:
        proc.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    rc = proc.wait()
    return 128 - rc if rc < 0 else rc


def run(args: argparse.Namespace, serve_argv: list[str], launch: list[str]) -> int:
    """Run one task (see the module docstring); ``serve_argv`` are the ``serve`` options
    (``--source`` ...) given to this node's server. Returns the exit status."""
    node, local, nodes, job = _flux_place(args.tasks_per_node)
    directory = Path.cwd() / f".hpc-bridge-cache-{job}"
    made = private_dir(directory)
    creds = _credentials(directory, made)
    env = {**os.environ, **creds.env()}
    server: subprocess.Popen[bytes] | None = None
    if local == 0:
        server = subprocess.Popen(
            [sys.executable, "-m", "data_cache", "serve", *serve_argv, "--dir", str(directory),
             "--index", str(node), "--count", str(nodes)], env=env)
    try:
        addresses = wait_for_servers(directory, nodes,
                                     pid=server.pid if server is not None else None)
        if server is not None:
            tell_peers(addresses, creds, only=node)
        rc = _launch(launch, {**env, "HPC_BRIDGE_DATA_CACHE": ",".join(addresses)})
        if server is not None:
            (directory / f"done-{node}").touch(mode=0o600)
            _poll(lambda: all((directory / f"done-{n}").exists() for n in range(nodes)),
                  "every node's training ending")
        return rc
    finally:
        if server is not None:
            server.terminate()
            server.wait()
            (directory / f"left-{node}").touch(mode=0o600)
            if node == 0:
                _poll(lambda: all((directory / f"left-{n}").exists() for n in range(nodes)),
                      "every node's server stopping", timeout=600)
                for entry in directory.iterdir():
                    entry.unlink()
                directory.rmdir()
