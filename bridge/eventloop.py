"""The daemon's event loop: uvloop unless the configuration says ``asyncio``.

Contract:

* :func:`run` runs a coroutine to its end on a new loop of the kind
  ``daemon.event_loop`` names (``"uvloop"``, the default, or ``"asyncio"``) and closes
  it, with :class:`asyncio.Runner` as :func:`asyncio.run` does.
* uvloop is libuv's loop behind asyncio's API. It is chosen for cost, not for
  features: the daemon's work is mostly receiving watch events and answers over TLS,
  and asyncio's own TLS transport is written in Python; uvloop's is not. With the
  Kubernetes back end running 200 TrainJobs the daemon used 14 % less CPU on it
  (``bench/k8s_admit.py --event-loop``, figures in docs/kubernetes.md).
* Where uvloop differs, the daemon does not depend on it: its transports do not derive
  from :class:`asyncio.Transport` (nothing checks that; ``bridge/gate.py``), a
  transport's ``socket`` is a stand-in that answers ``getsockopt`` (the peer
  credentials), and its ``subprocess_exec`` takes no ``umask``, ``user``, ``group`` or
  ``extra_groups``, so the daemon starts its own commands with :mod:`bridge.subproc`.
  The one child still started through the loop is a kubeconfig's credential plugin
  (``exec``; the Kubernetes client starts it), which libuv forks from the daemon.
* :func:`loop_factory` raises :class:`ValueError` naming the setting when uvloop is
  asked for and cannot be imported (it is one of the package's dependencies, so only
  a broken install lacks it): the daemon refuses to start rather than run on
  another loop than the one configured.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

__all__ = ["EventLoopKind", "loop_factory", "run"]

EventLoopKind = Literal["uvloop", "asyncio"]
T = TypeVar("T")


def loop_factory(kind: EventLoopKind) -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes a loop of ``kind`` (see the module docstring)."""
    if kind == "asyncio":
        return asyncio.new_event_loop
    try:
        import uvloop
    except ImportError as exc:
        raise ValueError(f'daemon.event_loop = "uvloop", but uvloop cannot be imported '
                         f'({exc}); install it (pip install uvloop) or set '
                         f'event_loop = "asyncio"') from exc
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T], kind: EventLoopKind) -> T:
    """``main`` run to its end on a new loop of ``kind`` (an :class:`asyncio.Runner`
    with that loop factory, which sets no loop as the thread's current one), then the
    loop closed."""
    with asyncio.Runner(loop_factory=loop_factory(kind)) as runner:
        return runner.run(main)
