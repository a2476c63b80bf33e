"""One error root: every exception class our packages define derives from
:class:`bridge.errors.BridgeError`; ``mpi_launch`` (standalone, it may not import
``bridge``) from its own root :class:`mpi_launch.errors.MpiLaunchError`."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

from bridge.errors import BridgeError, Conflict, EngineError, InvalidRequest, PermissionDenied
from mpi_launch.errors import MpiLaunchError

#: package -> the root its exception classes derive from.
ROOTS: dict[str, type[Exception]] = {
    "bridge": BridgeError,
    "slurm_adapter": BridgeError,
    "flux_adapter": BridgeError,
    "k8s_adapter": BridgeError,
    "mpi_launch": MpiLaunchError,
}


def _modules(package: str) -> list[ModuleType]:
    root = importlib.import_module(package)
    found = [root]
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        found.append(importlib.import_module(info.name))
    return found


def _defined_exceptions(module: ModuleType) -> list[type[BaseException]]:
    return [obj for _, obj in inspect.getmembers(module, inspect.isclass)
            if issubclass(obj, BaseException) and obj.__module__ == module.__name__]


@pytest.mark.parametrize("package", sorted(ROOTS))
def test_every_exception_class_derives_from_the_packages_root(package: str) -> None:
    defined = [cls for module in _modules(package) for cls in _defined_exceptions(module)]
    assert defined, f"no exception classes found in {package}: the walk is broken"
    strays = [f"{cls.__module__}.{cls.__qualname__}" for cls in defined
              if not issubclass(cls, ROOTS[package])]
    assert strays == [], f"derive these from {ROOTS[package].__name__}"


def test_mpi_launch_errors_are_not_bridge_errors() -> None:
    """The standalone root really is separate (mpi_launch never imports bridge)."""
    assert not issubclass(MpiLaunchError, BridgeError)


def test_the_engines_meanings_share_engine_error() -> None:
    """Code that catches EngineError (the TrainJob front door) catches every meaning."""
    for cls in (InvalidRequest, PermissionDenied, Conflict):
        assert issubclass(cls, EngineError) and issubclass(cls, BridgeError)
    from bridge.engine import EngineError as reexported
    assert reexported is EngineError


def test_builtin_second_bases_are_kept() -> None:
    """Callers catch these as the built-in too."""
    from bridge.model import ValidationError
    from bridge.refs import AmbiguousJob
    from bridge.store import DuplicateJob, JobNotFound
    from mpi_launch.hostlist import HostlistError
    assert issubclass(ValidationError, ValueError) and issubclass(DuplicateJob, ValueError)
    assert issubclass(JobNotFound, KeyError) and issubclass(AmbiguousJob, LookupError)
    assert issubclass(HostlistError, ValueError)
