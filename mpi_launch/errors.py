"""The root of every error ``mpi_launch`` defines.

``mpi_launch`` runs alone on compute nodes and imports nothing of ours (import-linter
checks), so it cannot derive from :class:`bridge.errors.BridgeError`; its errors derive
from :class:`MpiLaunchError` instead (``tests/unit/test_error_root.py`` checks both).
"""

from __future__ import annotations

__all__ = ["MpiLaunchError"]


class MpiLaunchError(Exception):
    """The root of every error ``mpi_launch`` defines."""
