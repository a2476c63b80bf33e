"""Kubeflow Trainer progress reports from Hugging Face Transformers and PyTorch Lightning.

Optional integrations over :mod:`mpi_launch.trainer_status`. Importing this module needs
neither framework: each factory imports its framework when called and raises ImportError,
naming the package, when it is absent::

    trainer = transformers.Trainer(..., callbacks=[kubeflow_trainer_callback()])
    trainer = lightning.pytorch.Trainer(..., callbacks=[lightning_callback()])

Only the main process reports (``state.is_world_process_zero``, ``trainer.is_global_zero``),
through :func:`~mpi_launch.trainer_status.default_reporter` unless a reporter is given; with
none (no status URL) the callbacks do nothing. Every report carries progress, ETA and the
numeric metrics seen so far (the newest value of each): a report is a whole ``trainerStatus``,
so one with progress only would drop the metrics shown before. The final report (100 %, ETA 0)
is flushed before training returns; it is sent when training ends however it ends (early
stopping too: the trainer is done). The callbacks never raise into the training loop.

The arithmetic is in pure functions: :func:`progress_percent`, :func:`eta_seconds`,
:func:`numeric_metrics`.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import numbers
import sys
import time
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, Protocol, cast

from mpi_launch.trainer_status import default_reporter

__all__ = ["LightningProgress", "StatusSink", "TransformersProgress", "eta_seconds",
           "kubeflow_trainer_callback", "lightning_callback", "numeric_metrics",
           "progress_percent"]


class StatusSink(Protocol):
    """What the callbacks report to: a :class:`~mpi_launch.trainer_status.Reporter`."""

    def report(self, progress_percentage: float | None = None,
               estimated_remaining_seconds: float | None = None,
               metrics: Mapping[str, object] | None = None, *, block: bool = False) -> bool: ...

    def flush(self, timeout: float = 5.0) -> bool: ...


def _positive_finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    number = float(value)
    return number if math.isfinite(number) and number > 0 else None


def progress_percent(step: float, total: object) -> float | None:
    """``step / total * 100`` clamped to 0..100; None when ``total`` (max steps, estimated
    stepping batches) is not a positive finite number (unknown, or ``inf`` for endless data)."""
    total_steps = _positive_finite(total)
    if total_steps is None:
        return None
    return min(max(step * 100.0 / total_steps, 0.0), 100.0)


def eta_seconds(step: float, total: object, elapsed: float | None,
                start_step: float = 0) -> float | None:
    """Seconds still to go at the pace so far: ``elapsed / (step - start_step)`` per step times
    ``total - step`` steps (0 once ``step`` reaches ``total``). ``start_step`` is the step the
    clock started at (a resumed run does not start at 0). None when the total is unknown, no
    step was done since the start, or ``elapsed`` is None or negative."""
    total_steps = _positive_finite(total)
    done = step - start_step
    if total_steps is None or elapsed is None or elapsed < 0 or done <= 0:
        return None
    return elapsed / done * max(total_steps - step, 0.0)


def numeric_metrics(values: Mapping[str, object]) -> dict[str, int | float]:
    """The numeric entries of ``values``: ints and floats (not bools) as they are, and what a
    one-element tensor's (or numpy scalar's) ``.item()`` gives when that is a number. Other
    entries (strings, lists, many-element tensors) are left out."""
    found: dict[str, int | float] = {}
    for name, value in values.items():
        item: object = value
        if not isinstance(value, numbers.Real) and callable(getattr(value, "item", None)):
            with contextlib.suppress(Exception):
                item = value.item()  # type: ignore[attr-defined]
        if isinstance(item, bool) or not isinstance(item, numbers.Real):
            continue
        found[str(name)] = int(item) if isinstance(item, numbers.Integral) else float(item)
    return found


class _Progress:
    """What both callbacks share: the reporter, the clock's start, the metrics seen so far."""

    def __init__(self, reporter: StatusSink | None, flush_timeout: float,
                 clock: Callable[[], float]) -> None:
        self.reporter: StatusSink | None = reporter if reporter is not None else default_reporter()
        self.flush_timeout, self.clock = flush_timeout, clock
        self.metrics: dict[str, int | float] = {}
        self._start: tuple[float, float] | None = None  # (clock, step) when training began
        self._failed = False

    def _begin(self, step: float) -> None:
        self._start = (self.clock(), step)

    def _send(self, step: float, total: object, *, done: bool = False) -> None:
        """Report progress at ``step`` of ``total`` (everything when ``done``) and the metrics."""
        if self.reporter is None:
            return
        try:
            if done:
                self.reporter.report(100, 0, self.metrics)
                self.reporter.flush(self.flush_timeout)
                return
            if self._start is None:  # added to a run under way: the clock starts now
                self._begin(step)
            began, start_step = self._start or (self.clock(), step)
            eta = eta_seconds(step, total, self.clock() - began, start_step)
            self.reporter.report(progress_percent(step, total), eta, self.metrics)
        except Exception as exc:  # never into the training loop
            if not self._failed:
                self._failed = True
                with contextlib.suppress(Exception):
                    print(f"trainer_status: warning: progress callback failed: {exc!r}",
                          file=sys.stderr)


class TransformersProgress(_Progress):
    """The Transformers callback's hooks (:func:`kubeflow_trainer_callback` mixes them into a
    ``transformers.TrainerCallback`` subclass): a report every ``every_n_steps`` optimizer
    steps, on each log (with its numeric values) and at the end (100 %)."""

    def __init__(self, reporter: StatusSink | None = None, *, every_n_steps: int = 10,
                 flush_timeout: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(reporter, flush_timeout, clock)
        self.every_n_steps = max(int(every_n_steps), 1)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._begin(getattr(state, "global_step", 0) or 0)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        step = getattr(state, "global_step", 0) or 0
        if getattr(state, "is_world_process_zero", False) and step % self.every_n_steps == 0:
            self._send(step, getattr(state, "max_steps", None))

    def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, object] | None = None,
               **kwargs: Any) -> None:
        if getattr(state, "is_world_process_zero", False):
            self.metrics.update(numeric_metrics(logs or {}))
            self._send(getattr(state, "global_step", 0) or 0, getattr(state, "max_steps", None))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if getattr(state, "is_world_process_zero", False):
            self._send(0, None, done=True)


class LightningProgress(_Progress):
    """The Lightning callback's hooks (:func:`lightning_callback` mixes them into a
    ``Callback`` subclass): a report after a training batch at most every ``interval``
    seconds, after validation (with ``trainer.callback_metrics``; not for the sanity check) and
    at the end (100 %)."""

    def __init__(self, reporter: StatusSink | None = None, *, interval: float = 10.0,
                 flush_timeout: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(reporter, flush_timeout, clock)
        self.interval = interval
        self._last: float | None = None

    @staticmethod
    def _where(trainer: Any) -> tuple[float, object]:
        """(global step, estimated stepping batches or None when Lightning cannot tell)."""
        total: object = None
        with contextlib.suppress(Exception):
            total = trainer.estimated_stepping_batches
        return getattr(trainer, "global_step", 0) or 0, total

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._begin(self._where(trainer)[0])

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        now = self.clock()
        if not getattr(trainer, "is_global_zero", False) or (
                self._last is not None and now - self._last < self.interval):
            return
        self._last = now
        self._send(*self._where(trainer))

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if not getattr(trainer, "is_global_zero", False) or getattr(trainer, "sanity_checking",
                                                                     False):
            return
        self.metrics.update(numeric_metrics(getattr(trainer, "callback_metrics", None) or {}))
        self._send(*self._where(trainer))

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if getattr(trainer, "is_global_zero", False):
            self._send(0, None, done=True)


_classes: dict[tuple[type, type], type] = {}


def _subclass(mixin: type, base: type, name: str) -> type:
    """``class name(mixin, base)``, made once per (mixin, base)."""
    if (mixin, base) not in _classes:
        _classes[mixin, base] = type(name, (mixin, base), {"__module__": __name__})
    return _classes[mixin, base]


def _import_first(names: tuple[str, ...], what: str) -> ModuleType:
    """The first of ``names`` that imports; ImportError saying ``what`` needs it otherwise."""
    failures: list[str] = []
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            failures.append(f"{name}: {exc}")
    raise ImportError(f"{what} needs the {names[0].partition('.')[0]!r} package, which cannot "
                      f"be imported ({'; '.join(failures)}); install it in this environment")


def kubeflow_trainer_callback(reporter: StatusSink | None = None, *, every_n_steps: int = 10,
                              flush_timeout: float = 5.0) -> TransformersProgress:
    """A ``transformers.TrainerCallback`` reporting progress (:class:`TransformersProgress`);
    ImportError naming ``transformers`` when it is not installed."""
    base = _import_first(("transformers",), "kubeflow_trainer_callback()").TrainerCallback
    cls = _subclass(TransformersProgress, base, "KubeflowTrainerCallback")
    return cast(TransformersProgress,
                cls(reporter, every_n_steps=every_n_steps, flush_timeout=flush_timeout))


def lightning_callback(reporter: StatusSink | None = None, *, interval: float = 10.0,
                       flush_timeout: float = 5.0) -> LightningProgress:
    """A PyTorch Lightning ``Callback`` (of ``lightning.pytorch``, else ``pytorch_lightning``)
    reporting progress (:class:`LightningProgress`); ImportError naming ``lightning`` when
    neither is installed."""
    module = _import_first(("lightning.pytorch", "pytorch_lightning"), "lightning_callback()")
    cls = _subclass(LightningProgress, module.Callback, "KubeflowLightningCallback")
    return cast(LightningProgress, cls(reporter, interval=interval, flush_timeout=flush_timeout))
