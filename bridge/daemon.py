"""``hpc-bridge``: the daemon and its admin commands.

* ``hpc-bridge serve --config FILE`` — run the daemon: open the store, start the back
  ends and the engine, serve the API; ``READY=1`` to systemd (``Type=notify``) once
  the socket accepts; SIGTERM/SIGINT stop it cleanly (jobs keep running in their
  back ends and are picked up again at the next start).
* ``hpc-bridge check-config --config FILE`` — validate the file and load the back ends.
* ``hpc-bridge runtimes`` — list the built-in training runtimes.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import io
import logging
import os
import signal
import sys
import threading
from contextlib import suppress
from pathlib import Path
from typing import Any

import structlog

from bridge import eventloop
from bridge.api import Health, make_app, serve, serve_health
from bridge.backend import Backend, load_backend
from bridge.callers import load_tokens
from bridge.config import Config, ConfigError, load_config, partition_routes
from bridge.engine import Engine, EngineSettings
from bridge.eventtasks import make_feed, start_event_tasks, stop_event_tasks
from bridge.filemodes import DAEMON_UMASK, secure_state_dir
from bridge.frontdoor import FrontDoor, load_frontdoor
from bridge.leader import Elector, load_elector, lost_lease, reset_store, stand_by, start_fence
from bridge.limits import LimitSettings
from bridge.memtrim import limit_arenas, trim_forever
from bridge.metrics import Metrics
from bridge.metrics_backend import instrument
from bridge.model import ValidationError
from bridge.runtimes import RuntimeCatalog, load_runtime_files
from bridge.service import JobService
from bridge.statelock import acquire as lock_state_dir
from bridge.status_server import StatusEndpoint, report_settings
from bridge.store import Store
from bridge.systemd import listen_fds, sd_notify, watchdog_interval, watchdog_pings

#: Seconds between two returns of freed heap memory to the system (bridge/memtrim.py).
TRIM_INTERVAL = 20.0
#: glibc malloc arenas at most (bridge/memtrim.py), as MALLOC_ARENA_MAX would set.
MALLOC_ARENAS = 2

log = structlog.get_logger("hpc_bridge.daemon")


def configure_logging(fmt: str, level: str) -> None:
    """structlog to stderr: JSON lines (for journald/collectors) or console.

    One pipeline: every logger of the daemon and its adapters is a structlog logger whose
    events go through the standard ``logging`` module to one handler, which renders them
    with :class:`structlog.stdlib.ProcessorFormatter`; records of libraries' standard
    loggers go through the same renderer (with the logger's name and the record's
    ``extra`` fields as keys). One JSON object per line, never plain text inside a JSON
    log."""
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, structlog.stdlib.ExtraAdder(),
                           *shared],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, renderer],
    ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    structlog.configure(
        processors=[
            structlog.stdlib.add_logger_name,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )


def build_backends(config: Config) -> dict[str, Backend]:
    return {name: load_backend(section.kind, name, section.settings())
            for name, section in config.backends.items()}


def build_frontdoors(config: Config) -> dict[str, FrontDoor]:
    return {name: load_frontdoor(section.kind, name, section.settings())
            for name, section in config.frontdoors.items()}


async def run_daemon(config: Config) -> None:
    """Serve until SIGTERM/SIGINT.

    Refuses (ValueError) to start on a state directory another daemon holds
    (:mod:`bridge.statelock`) or a store written by a newer version; serves on the
    socket systemd passed if it did (:func:`bridge.systemd.listen_fds`)."""
    state_dir = config.daemon.state_dir
    os.umask(DAEMON_UMASK)
    for fix in secure_state_dir(state_dir):
        log.warning("state file was open to other users; fixed", change=fix)
    lock = lock_state_dir(state_dir)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, dump_tasks)
    elector: Elector | None = None
    health = Health("single")
    health_runner = None
    hold: asyncio.Task[None] | None = None
    fence: threading.Event | None = None
    try:
        if config.leader_election is not None:  # replicas: bridge/leader.py
            elector = load_elector(config.leader_election.kind,
                                   config.leader_election.settings())
            health.role = "standby"
        if config.daemon.health:
            health_runner = await serve_health(health, config.daemon.health)
        if elector is not None:
            if not await stand_by(elector, stop):
                return
            hold = asyncio.create_task(elector.hold(), name="leader-hold")
            fence = start_fence(elector)
            reset_store(state_dir / "bridge.sqlite")
            health.role = "leader"
        await _serve_locked(config, state_dir, stop, health, hold)
    finally:
        if fence is not None:
            fence.set()  # from here on, not holding the lease is on purpose
        if hold is not None:
            hold.cancel()
        if elector is not None:
            await elector.release()  # a standby takes over at its next attempt
        if health_runner is not None:
            await health_runner.cleanup()
        lock.release()


async def _serve_locked(config: Config, state_dir: Path, stop: asyncio.Event,
                        health: Health, hold: asyncio.Task[None] | None = None) -> None:
    inherited = listen_fds()
    store = Store.open(state_dir / "bridge.sqlite", durable=config.daemon.durable)
    metrics = Metrics(store) if config.metrics.listen else None
    backends = build_backends(config)
    if metrics is not None:  # time the back ends' calls (bridge/metrics_backend.py)
        backends = instrument(backends, metrics.registry)
    frontdoors = build_frontdoors(config)
    e = config.engine
    assert e.default_backend is not None
    catalog = RuntimeCatalog(load_runtime_files(config.runtimes.paths))
    engine = Engine(store, backends, catalog, EngineSettings(
        default_backend=e.default_backend, poll_interval=e.poll_interval,
        submit_timeout=e.submit_timeout, max_parallel_submits=e.max_parallel_submits,
        retry_base=e.retry_base, retry_cap=e.retry_cap,
        lost_after_seconds=e.lost_after_seconds, default_namespace=e.default_namespace,
        placement={name: section.placement for name, section in config.backends.items()},
        placement_max_age=e.placement_max_age, placement_min_reread=e.placement_min_reread,
        partition_routes=partition_routes(config),
        status_reports=(reports := report_settings(config.trainer_status, state_dir)),
    ))
    tokens = load_tokens(config.daemon.token_file) if config.daemon.token_file else {}
    health.ready = engine.ready.is_set
    lim = config.limits
    feed = make_feed(store, metrics)
    service = JobService(engine, feed)
    app = make_app(service, tokens, LimitSettings(
        max_active_jobs=lim.max_active_jobs, submit_rate=lim.submit_rate,
        submit_burst=lim.submit_burst, max_concurrent_requests=lim.max_concurrent_requests,
        request_rate=lim.request_rate, request_burst=lim.request_burst,
        log_interval=lim.log_interval,
        max_request_bytes=lim.max_request_bytes, max_script_bytes=lim.max_script_bytes),
        health)
    # Before the app is served (it adds the events route; aiohttp freezes the app).
    events = await start_event_tasks(config, feed, app, metrics)
    progress = (StatusEndpoint(config.trainer_status, store, reports)
                if reports is not None else None)
    try:  # the socket first: a refused one (another daemon answers) must submit nothing
        runner = await serve(app, config.daemon.socket, config.daemon.tcp, inherited)
        if progress is not None:
            await progress.start()
    except BaseException:
        if progress is not None:
            await progress.stop()
        await stop_event_tasks(events)
        store.close()
        raise
    # Pings from the start: adopting many jobs may take longer than WatchdogSec.
    interval = watchdog_interval()
    pings = asyncio.create_task(watchdog_pings(interval)) if interval else None
    engine_task = asyncio.create_task(engine.run(), name="engine")
    trim = asyncio.create_task(trim_forever(TRIM_INTERVAL), name="malloc-trim")
    stopped = asyncio.create_task(stop.wait())
    watched: set[asyncio.Task[Any]] = {stopped, engine_task}
    if hold is not None:
        watched.add(hold)
    door_tasks: list[asyncio.Task[None]] = []
    if await until_ready(engine.ready, watched):
        door_tasks = [asyncio.create_task(door.run(service), name=f"frontdoor-{name}")
                      for name, door in frontdoors.items()]
        sd_notify("READY=1")
        log.info("serving", socket=config.daemon.socket, inherited_sockets=len(inherited),
                 tcp=config.daemon.tcp, backends=sorted(backends),
                 frontdoors=sorted(frontdoors), store=str(state_dir / "bridge.sqlite"))
        for task in door_tasks:  # a door that ends (refused to start) says so; the rest serves
            task.add_done_callback(_door_ended)
    done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
    if hold is not None and hold in done:
        lost_lease("the lease was lost")  # ends the process: no cleanup that writes
    sd_notify("STOPPING=1")
    log.info("shutting down")
    if pings is not None:
        pings.cancel()
    trim.cancel()
    for task in door_tasks:
        task.cancel()
    await asyncio.gather(*door_tasks, return_exceptions=True)
    for door in frontdoors.values():
        with suppress(Exception):
            await door.close()
    await engine.stop()
    if not engine.ready.is_set():  # still starting its back ends: not waited for
        engine_task.cancel()
    await asyncio.wait({engine_task})  # its error, if any, is raised below
    await stop_event_tasks(events)
    if progress is not None:
        await progress.stop()
    stopped.cancel()
    await runner.cleanup()
    store.close()
    if not engine_task.cancelled() and engine_task.exception() is not None:
        raise engine_task.exception()  # type: ignore[misc]


async def until_ready(ready: asyncio.Event, watched: set[asyncio.Task[Any]]) -> bool:
    """Wait until ``ready`` is set or one of ``watched`` ends (the engine failing while it
    starts its back ends, SIGTERM while it adopts jobs): True when ready came first, so
    that the daemon never waits on a readiness that will not come."""
    waiter = asyncio.create_task(ready.wait())
    try:
        done, _ = await asyncio.wait({waiter, *watched}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    return not done & watched


def _door_ended(task: asyncio.Task[None]) -> None:
    """Log a front door's end other than by shutdown: its TrainJobs (or requests) wait
    until the daemon is restarted; the back ends and other doors serve on."""
    if task.cancelled():
        return
    exc = task.exception()
    log.error("front door stopped", task=task.get_name(),
              error=f"{type(exc).__name__}: {exc}" if exc else "returned")


def dump_tasks() -> None:
    """``kill -USR1`` while the loop runs: every asyncio task's stack, as one log event
    (``asyncio tasks``), to see what a daemon that will not stop, or is slow, waits for.
    ``kill -USR2`` (:func:`_dump_signals`) gives every thread's stack even when the loop
    itself is stuck, or gone (interpreter exit waiting for a thread)."""
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    stacks = io.StringIO()
    for task in tasks:
        task.print_stack(limit=12, file=stacks)
    log.warning("asyncio tasks", count=len(tasks), stacks=stacks.getvalue())


def _dump_signals() -> None:
    """USR1 and USR2 must never end the daemon (their default action): USR1 is ignored
    outside the loop's life (:func:`dump_tasks` while it runs); USR2 dumps every thread's
    stack at C level (faulthandler, to standard error), or is ignored where standard
    error is no file (``serve`` inside a test's capture, or closed)."""
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    try:
        faulthandler.register(signal.SIGUSR2, all_threads=True)
    except (ValueError, OSError, AttributeError, RuntimeError):
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hpc-bridge", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_serve = sub.add_parser("serve", help="run the daemon")
    p_serve.add_argument("--config", "-c", required=True, help="TOML configuration file")
    p_check = sub.add_parser("check-config", help="validate a configuration file")
    p_check.add_argument("--config", "-c", required=True)
    p_rt = sub.add_parser("runtimes", help="list the training runtimes (built-in, and the "
                                           "configuration's with --config)")
    p_rt.add_argument("--config", "-c")
    p_rt.add_argument("--yaml", action="store_true",
                      help="print the built-in ones as ClusterTrainingRuntime YAML "
                           "(the Helm chart's files/runtimes.yaml)")
    p_crds = sub.add_parser("crds", help="print the TrainJob, TrainingRuntime and "
                                         "ClusterTrainingRuntime CRDs (YAML)")
    p_crds.add_argument("--output", "-o", metavar="DIR",
                        help="write one file per CRD into DIR instead (charts/hpc-bridge/crds)")
    p_crds.add_argument("--group", help="API group (default trainer.kubeflow.org; another "
                                        "lets them sit beside Kubeflow Trainer's)")
    args = parser.parse_args(argv)

    if args.command == "crds":
        from bridge import crds  # YAML and the JSON schemas: only this command needs them
        from bridge.model import GROUP

        group = args.group or GROUP
        if args.output:
            crds.write_crds(args.output, group, log=print)
        else:
            sys.stdout.write(crds.render_crds(group))
        return 0
    if args.command == "runtimes" and args.yaml:
        from bridge.runtimes import runtimes_yaml

        sys.stdout.write(runtimes_yaml())
        return 0
    if args.command == "runtimes":
        try:
            extra = load_runtime_files(load_config(args.config).runtimes.paths) if (
                args.config) else []
        except (ConfigError, ValidationError) as exc:
            print(f"hpc-bridge: error: {exc}", file=sys.stderr)
            return 2
        for name in RuntimeCatalog(extra).names():
            print(name)
        return 0
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"hpc-bridge: error: {exc}", file=sys.stderr)
        return 2
    if args.command == "check-config":
        try:
            load_runtime_files(config.runtimes.paths)
            eventloop.loop_factory(config.daemon.event_loop)
            build_backends(config)
            build_frontdoors(config)
            if config.leader_election is not None:
                load_elector(config.leader_election.kind, config.leader_election.settings())
        except ValueError as exc:
            print(f"hpc-bridge: error: {exc}", file=sys.stderr)
            return 2
        doors = f"; front doors: {', '.join(config.frontdoors)}" if config.frontdoors else ""
        print(f"{args.config}: OK ({', '.join(config.backends)}{doors})")
        return 0
    configure_logging(config.daemon.log_format, config.daemon.log_level)
    _dump_signals()
    limit_arenas(MALLOC_ARENAS)  # before any worker thread
    try:
        eventloop.run(run_daemon(config), config.daemon.event_loop)
    except ValueError as exc:  # InsecureFile is one
        log.error("cannot start", error=str(exc))
        print(f"hpc-bridge: error: {exc}", file=sys.stderr)
        return 2
    finally:
        # The loop's close put USR1 back to its default (terminate); the interpreter may
        # still wait for worker threads.
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    return 0


if __name__ == "__main__":
    sys.exit(main())
