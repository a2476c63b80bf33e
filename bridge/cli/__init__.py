"""The client side: the Slurm-like commands researchers run, one module each.

========================  ==========================================================
:mod:`bridge.cli.tbatch`   ``tbatch``: submit a batch script, ``--wrap`` or TrainJob file
:mod:`bridge.cli.tqueue`   ``tqueue``: list jobs (squeue's table, ``--json``)
:mod:`bridge.cli.tshow`    ``tshow``: one job in detail (``scontrol show job``-like)
:mod:`bridge.cli.tcancel`  ``tcancel``: cancel jobs
:mod:`bridge.cli.tcontrol` ``tcontrol``: hold, release, suspend, resume jobs
:mod:`bridge.cli.tlog`     ``tlog``: a job's output (``-f`` follows)
:mod:`bridge.cli.twatch`   ``twatch``: follow job events
:mod:`bridge.cli.common`   what they share: errors, exit statuses, the client
========================  ==========================================================

Each entry point is ``<command>_main(argv: list[str] | None = None) -> int``
(``None``: ``sys.argv``) and returns the exit status; the console scripts in
pyproject.toml name the command's own module. User errors print ``<prog>: error:
<message>`` on stderr and return 1 -- never a traceback; Ctrl-C returns 130 (see
:mod:`bridge.cli.common`). A request refused by a per-user limit of the daemon (429) is
asked again after its ``Retry-After`` when that is at most 10 s, at most 3 times
(:class:`bridge.client.BridgeClient`); then the daemon's message is printed.

They talk to the daemon only through :mod:`bridge.client` (an import-linter contract
keeps the engine, store and API out of this package). Start-up time matters (these
commands run hundreds of times a day, in loops and ``watch``): a command module imports
the standard library, :mod:`bridge.client` and :mod:`bridge.slurmtime` at module level,
nothing else; only ``tbatch`` imports the TrainJob model (pydantic) and the sbatch
parser, ``tshow --yaml`` PyYAML, ``--version`` importlib.metadata, ``tqueue``/``tshow``
python-hostlist -- each when it runs. This package's own import loads no command: the
names below (``from bridge.cli import format_queue``) are imported from their module
when first asked for, so ``tqueue`` does not pay for ``tshow``.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs every command ~2 ms of start-up (bridge.client_types)

if TYPE_CHECKING:
    from typing import Any

    from bridge.cli.tbatch import tbatch_main as tbatch_main
    from bridge.cli.tcancel import tcancel_main as tcancel_main
    from bridge.cli.tcontrol import tcontrol_main as tcontrol_main
    from bridge.cli.tlog import tlog_main as tlog_main
    from bridge.cli.tqueue import COMPACT_STATES as COMPACT_STATES
    from bridge.cli.tqueue import format_queue as format_queue
    from bridge.cli.tqueue import tqueue_main as tqueue_main
    from bridge.cli.tshow import format_show as format_show
    from bridge.cli.tshow import tshow_main as tshow_main
    from bridge.cli.twatch import format_event as format_event
    from bridge.cli.twatch import twatch_main as twatch_main

#: Public name -> the module that defines it.
_EXPORTS = {
    "COMPACT_STATES": "tqueue",
    "format_event": "twatch",
    "format_queue": "tqueue",
    "format_show": "tshow",
    "tbatch_main": "tbatch",
    "tcancel_main": "tcancel",
    "tcontrol_main": "tcontrol",
    "tlog_main": "tlog",
    "tqueue_main": "tqueue",
    "tshow_main": "tshow",
    "twatch_main": "twatch",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import a public name's module when the name is first asked for (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # __import__, not importlib.import_module: importing importlib costs every command
    # ~0.4 ms of its start (with warnings).
    value = getattr(__import__(f"{__name__}.{module}", fromlist=[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
