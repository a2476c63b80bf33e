"""``data-cache run``: the cache for a back end whose job is just its tasks (Flux). Every
task of the job runs ``data-cache run SERVE-OPTIONS --tasks-per-node T -- LAUNCH...``.

Contract (the task's place comes from Flux's ``FLUX_TASK_RANK``,
``FLUX_TASK_LOCAL_ID``, ``FLUX_JOB_NNODES`` and ``FLUX_JOB_ID``; node ``n`` holds tasks
``n*T .. n*T+T-1``, as Flux places them with ``per-resource: node``):

1. The first task to get there makes ``<cwd>/.hpc-bridge-cache-<job id>``; every task
   opens it once (:class:`data_cache.privatedir.PrivateDir`: 0700, this user's, a
   planted one refused) and reaches everything in it through that descriptor only. The
   maker writes the job's credentials in it (a random token, a TLS certificate and key:
   data_cache/credentials.py); every task reads them. They never leave the job's
   processes and this directory.
2. The first task of each node starts that node's server (``data-cache serve --index
   n --count N --dir DIR``) as a child process. If it ends before serving without saying
   why, the task writes that as the server's status, so no other task waits on it.
3. Every task waits until all servers serve (a server's failure, with its reason, ends
   every task with status 1 before the training starts), then runs LAUNCH with
   ``HPC_BRIDGE_DATA_CACHE`` and the credentials set, and exits with its status
   (128+signal when it was killed). SIGTERM, SIGINT and SIGHUP go to LAUNCH while it
   runs; at any other time they end the task (its server stopped first).
4. A node's server outlives the node's own training until every node's is done (other
   ranks may still read from it): the first task of each node writes ``done-n`` with its
   status and waits until every node is done or one failed, stops its server and writes
   ``left-n``; node 0 removes the directory once every node has left (at once after a
   failure: the job is ending).
"""

from __future__ import annotations

import argparse
import contextlib
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
from data_cache.rendezvous import (
    CacheStartError,
    PrivateDir,
    status_name,
    tell_peers,
    wait_for_servers,
    write_status,
)

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


def _credentials(directory: PrivateDir, made: bool) -> Credentials:
    if made:
        return credentials.make(directory)
    _poll(lambda: directory.exists(credentials.FILES["token"]), "the cache credentials",
          TOKEN_WAIT_SECONDS)
    try:
        return credentials.read(directory)
    except credentials.CredentialsError as exc:
        raise CacheStartError(str(exc)) from None


class _Stop(Exception):
    """A signal arrived while no launched command was running."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _done(directory: PrivateDir, nodes: int) -> bool:
    """Every node's training ended, or one failed."""
    codes = [directory.read(f"done-{n}", 64) for n in range(nodes)]
    return all(c is not None for c in codes) or any(c not in (None, b"0") for c in codes)


def run(args: argparse.Namespace, serve_argv: list[str], launch: list[str]) -> int:
    """Run one task (see the module docstring); ``serve_argv`` are the ``serve`` options
    (``--source`` ...) given to this node's server. Returns the exit status."""
    node, local, nodes, job = _flux_place(args.tasks_per_node)
    child: list[subprocess.Popen[bytes]] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if child and child[0].poll() is None:
            child[0].send_signal(signum)
        else:
            raise _Stop(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    directory, made = PrivateDir.open(Path.cwd() / f".hpc-bridge-cache-{job}", create=True)
    server: subprocess.Popen[bytes] | None = None
    rc = 1
    try:
        creds = _credentials(directory, made)
        env = {**os.environ, **creds.env()}
        if local == 0:
            server = subprocess.Popen(
                [sys.executable, "-m", "data_cache", "serve", *serve_argv, "--dir",
                 str(directory.path), "--index", str(node), "--count", str(nodes)], env=env)
        try:
            addresses = wait_for_servers(directory, nodes,
                                         pid=server.pid if server is not None else None)
        except CacheStartError:
            if (server is not None and server.poll() is not None
                    and not directory.exists(status_name(node))):
                write_status(directory, node, {
                    "error": f"its process ended with status {server.returncode} "
                             "before serving"})
            raise
        if server is not None:
            tell_peers(addresses, creds, only=node)
        try:
            child.append(subprocess.Popen(
                launch, env={**env, "HPC_BRIDGE_DATA_CACHE": ",".join(addresses)}))
        except OSError as exc:
            print(f"data-cache: error: cannot run {launch[0]!r}: {exc.strerror}",
                  file=sys.stderr, flush=True)
            rc = 127
        else:
            status = child[0].wait()
            rc = 128 - status if status < 0 else status
        if server is not None:
            with contextlib.suppress(OSError):  # gone: a failed node 0 removed it
                directory.write(f"done-{node}", str(rc).encode())
            if rc == 0:
                _poll(lambda: _done(directory, nodes), "every node's training ending")
        return rc
    except _Stop as stop:
        rc = 128 + stop.signum
        return rc
    finally:
        if server is not None:
            server.terminate()
            server.wait()
            with contextlib.suppress(OSError):
                directory.write(f"left-{node}", b"")
            if node == 0:
                if rc == 0:
                    _poll(lambda: all(directory.exists(f"left-{n}") for n in range(nodes)),
                          "every node's server stopping", timeout=600)
                directory.remove()
        directory.close()
