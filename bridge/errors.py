"""The root of every error hpc-bridge defines, and what a refused request means.

Standard library only: the client side (``bridge/client.py``, ``bridge/cli/``) imports
it too and must stay quick to start.

* :class:`BridgeError` — every exception class defined in ``bridge/`` and the adapters
  derives from it (``tests/unit/test_error_root.py`` checks), so ``except BridgeError``
  catches any error of ours and nothing else. A class that callers also catch as a
  built-in keeps that second base (``class JobNotFound(BridgeError, KeyError)``).
  ``mpi_launch`` runs alone on compute nodes and never imports ``bridge``: its root is
  :class:`mpi_launch.errors.MpiLaunchError`.
* :class:`EngineError` and its meaning-classes — a request the engine refuses, by
  *what it means*, never by HTTP status: :class:`InvalidRequest`,
  :class:`PermissionDenied`, :class:`Conflict`. Only ``bridge/api.py`` turns them into
  HTTP statuses (its ``ERROR_STATUS`` table); front doors that are not HTTP (TrainJob CRs)
  catch :class:`EngineError` and report the message their own way.
"""

from __future__ import annotations

__all__ = ["BridgeError", "Conflict", "EngineError", "InvalidRequest", "PermissionDenied"]


class BridgeError(Exception):
    """The root of every error hpc-bridge (``bridge`` and the adapters) defines."""


class EngineError(BridgeError):
    """A request the engine refuses; the message says why and is shown to the caller.
    Raise one of the subclasses; the base itself means a bad request."""


class InvalidRequest(EngineError):
    """The request itself is wrong (answered like a validation error)."""


class PermissionDenied(EngineError):
    """The caller may not do this (not the job's owner; the back end's admission
    refused them)."""


class Conflict(EngineError):
    """The request clashes with what exists (a duplicate name or idempotency key; the
    job's state does not allow it)."""
