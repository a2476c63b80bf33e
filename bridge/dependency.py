"""``--dependency``: when a job may start, by the states of other bridge jobs.

sbatch's syntax, with the bridge's job ids (the ids ``tbatch`` prints)::

    after:ID[+MIN][:ID[+MIN]...]   afterany:ID[:ID...]   afterok:ID[:ID...]
    afternotok:ID[:ID...]          aftercorr:ID[:ID...]  singleton

joined by ``,`` (all must be met) or ``?`` (any one), never both. Each job id is one
condition (``afterok:1:2`` is ``afterok:1,afterok:2``, and with ``?`` either one), as
Slurm reads them. The bridge holds the job itself, on every back end, so a Slurm job may
wait for a Flux or Kubernetes one (bridge/engine_dependency.py does the holding).

Meanings, as Slurm's:

* ``after``: the job started (plus MIN minutes) or ended (a job cancelled before it
  started counts);
* ``afterany``: it ended; ``afterok``: it succeeded; ``afternotok``: it failed or was
  cancelled; ``aftercorr``: the task of the same index of the array it names
  succeeded (for a job that is not a task of an array: as ``afterok``);
* ``singleton``: no earlier unfinished job of the same user with the same job name.

A job array (bridge/arrays.py) is named by its job id ``A`` (every task: it started
when all have, it ended when all have, and succeeded when all did) or one task by
``A_I``. The caller gives :func:`evaluate` the :class:`Facts` under each condition's
:attr:`Condition.key`. A job no longer known (purged) counts as met, as Slurm's.
A condition that can never be met (``afterok`` on a failed job) makes the dependency
:attr:`Verdict.NEVER` when the others cannot save it; the engine then shows
``DependencyNeverSatisfied`` (and ends the job with ``--kill-on-invalid-dep=yes``), as
Slurm does.

Contract: :func:`parse` returns a :class:`Dependency` or raises :class:`ValueError`
with sbatch-like words; :meth:`Dependency.text` is its normal form; :func:`evaluate` is
pure.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

__all__ = ["KINDS", "Condition", "Dependency", "Facts", "Verdict", "combine", "evaluate",
           "parse", "unmet"]

KINDS = ("after", "afterany", "afterok", "afternotok", "aftercorr", "singleton")
#: The most job ids one dependency may name (a bound on what one evaluation reads).
MAX_CONDITIONS = 256
#: The longest ``--dependency`` text read (its normal form fits too: 256 conditions of
#: at most 48 characters).
MAX_TEXT = 16384

_TERMINAL = frozenset({"Succeeded", "Failed", "Cancelled"})
_NOT_OK = frozenset({"Failed", "Cancelled"})
_ID = re.compile(r"([1-9][0-9]{0,17})(?:_([0-9]{1,9}))?")


class Verdict(Enum):
    READY = "ready"
    WAIT = "wait"
    NEVER = "never"


@dataclass(frozen=True)
class Condition:
    """One job id under one kind (``singleton`` has none: ``job_id`` 0)."""

    kind: str
    job_id: int = 0
    delay_minutes: int = 0
    #: ``A_I``: task I of array ``job_id``; None: the job (or every task of the array).
    task: int | None = None

    def text(self) -> str:
        if self.kind == "singleton":
            return "singleton"
        ident = f"{self.job_id}" if self.task is None else f"{self.job_id}_{self.task}"
        return f"{self.kind}:{ident}" + (f"+{self.delay_minutes}"
                                         if self.delay_minutes else "")

    @property
    def key(self) -> Hashable:
        """Where :func:`evaluate` reads this condition's facts: the job id; ``(A, I)``
        for a task; ``("corr", A)`` for ``aftercorr`` (the facts of the dependent
        task's counterpart, which only the caller knows)."""
        if self.kind == "aftercorr":
            return ("corr", self.job_id)
        return self.job_id if self.task is None else (self.job_id, self.task)


@dataclass(frozen=True)
class Dependency:
    conditions: tuple[Condition, ...]
    #: ``?``: any one condition; otherwise all of them.
    any_of: bool = False

    def text(self) -> str:
        """The normal form (one condition per job id)."""
        return ("?" if self.any_of else ",").join(c.text() for c in self.conditions)

    def job_ids(self) -> frozenset[int]:
        return frozenset(c.job_id for c in self.conditions if c.kind != "singleton")

    @property
    def singleton(self) -> bool:
        return any(c.kind == "singleton" for c in self.conditions)


@dataclass(frozen=True)
class Facts:
    """What a condition needs to know of the job it names."""

    state: str
    started_at: float | None = None


def combine(parts: Sequence[Facts]) -> Facts | None:
    """The facts of a job array from its tasks' (None for none): unfinished while any
    task is (Running when one is), started when every task has started or ended (at the
    last start),
    and when all have ended Failed if one failed, else Cancelled if one was, else
    Succeeded."""
    if not parts:
        return None
    states = {f.state for f in parts}
    starts = [f.started_at for f in parts if f.started_at is not None]
    # Started when each task has started or ended without (a task cancelled before it
    # started counts as started for ``after``, as a plain job does).
    started = max(starts) if starts and all(
        f.started_at is not None or f.state in _TERMINAL for f in parts) else None
    if not states <= _TERMINAL:
        live = states - _TERMINAL
        state = "Running" if "Running" in live else sorted(live)[0]
    else:
        state = next(s for s in ("Failed", "Cancelled", "Succeeded") if s in states)
    return Facts(state, started)


def parse(text: str) -> Dependency:
    """``text`` as sbatch reads ``--dependency``; :class:`ValueError` naming what is wrong."""
    if "," in text and "?" in text:
        raise ValueError("',' (all of) and '?' (any of) cannot be mixed")
    any_of = "?" in text
    conditions: list[Condition] = []
    words = 0  # conditions as written (the same one twice counts twice)
    for term in text.split("?" if any_of else ","):
        kind, colon, rest = term.partition(":")
        if kind not in KINDS:
            known = ", ".join(KINDS)
            raise ValueError(f"unknown dependency type {kind!r} (tbatch knows {known})"
                             if kind else "empty dependency")
        if kind == "singleton":
            if colon:
                raise ValueError("singleton takes no job id")
            words += 1
            if Condition("singleton") not in conditions:
                conditions.append(Condition("singleton"))
            if words > MAX_CONDITIONS:
                raise ValueError(f"more than {MAX_CONDITIONS} conditions")
            continue
        if not rest:
            raise ValueError(f"{kind} needs a job id ({kind}:ID)")
        for word in rest.split(":"):
            words += 1
            ident, plus, delay = word.partition("+")
            m = _ID.fullmatch(ident) if ident.isascii() else None
            if m is None:
                raise ValueError(f"job id {ident!r} is not a job id (ID or ARRAYID_TASK)")
            if m.group(2) is not None and kind == "aftercorr":
                raise ValueError(f"aftercorr names a whole array, not a task ({ident!r})")
            minutes = 0
            if plus:
                if kind != "after":
                    raise ValueError(f"+TIME is only for 'after' (in {word!r})")
                if not delay.isdigit() or len(delay) > 7:
                    raise ValueError(f"+TIME must be minutes (in {word!r})")
                minutes = int(delay)
            task = int(m.group(2)) if m.group(2) is not None else None
            cond = Condition(kind, int(m.group(1)), minutes, task)
            if cond not in conditions:  # the same condition twice is once
                conditions.append(cond)
        if words > MAX_CONDITIONS:
            raise ValueError(f"more than {MAX_CONDITIONS} conditions")
    return Dependency(tuple(conditions), any_of)


def _one(c: Condition, facts: Mapping[Hashable, Facts], now: float,
         blockers: Sequence[int]) -> tuple[Verdict, float | None]:
    """A condition's verdict, and when a waiting ``after:ID+MIN`` is met."""
    if c.kind == "singleton":
        return (Verdict.WAIT if blockers else Verdict.READY), None
    f = facts.get(c.key)
    if f is None:
        return Verdict.READY, None  # gone (purged): met, as Slurm has it
    if c.kind == "after":
        if f.state in _TERMINAL and f.started_at is None:
            return Verdict.READY, None
        if f.started_at is not None:
            at = f.started_at + 60 * c.delay_minutes
            return (Verdict.READY, None) if now >= at else (Verdict.WAIT, at)
        return Verdict.WAIT, None
    if f.state not in _TERMINAL:
        return Verdict.WAIT, None
    if c.kind == "afterany":
        return Verdict.READY, None
    if c.kind == "afternotok":
        return (Verdict.READY if f.state in _NOT_OK else Verdict.NEVER), None
    return (Verdict.READY if f.state == "Succeeded" else Verdict.NEVER), None


def evaluate(dep: Dependency, facts: Mapping[Hashable, Facts], now: float,
             blockers: Sequence[int] = ()) -> tuple[Verdict, float | None]:
    """The dependency's verdict given ``facts`` of the jobs it names (missing: purged)
    and ``blockers`` (earlier unfinished jobs with this one's user and name, for
    ``singleton``); with :attr:`Verdict.WAIT`, the time it is met by the clock alone
    (an ``after:ID+MIN``), if any."""
    verdicts = [_one(c, facts, now, blockers) for c in dep.conditions]
    kinds = {v for v, _ in verdicts}
    times = [at for v, at in verdicts if v is Verdict.WAIT and at is not None]
    if dep.any_of:
        if Verdict.READY in kinds:
            return Verdict.READY, None
        if kinds == {Verdict.NEVER}:
            return Verdict.NEVER, None
    else:
        if Verdict.NEVER in kinds:
            return Verdict.NEVER, None
        if kinds <= {Verdict.READY}:
            return Verdict.READY, None
    return Verdict.WAIT, (min(times) if times else None)


def unmet(dep: Dependency, facts: Mapping[Hashable, Facts], now: float,
          blockers: Sequence[int] = ()) -> tuple[Verdict, tuple[Condition, ...]]:
    """The dependency's verdict (:func:`evaluate`) and, unless it is met, the conditions
    a back end would still have to wait for: with ``,`` every condition not met yet;
    with ``?`` those that may still be met (the never-met ones drop out), or all of
    them when none may. What the engine hands to Slurm as a native dependency."""
    verdict, _ = evaluate(dep, facts, now, blockers)
    if verdict is Verdict.READY:
        return verdict, ()
    verdicts = [(c, _one(c, facts, now, blockers)[0]) for c in dep.conditions]
    left = tuple(c for c, v in verdicts if v is not Verdict.READY)
    if dep.any_of and verdict is Verdict.WAIT:
        left = tuple(c for c, v in verdicts if v is Verdict.WAIT)
    return verdict, left
