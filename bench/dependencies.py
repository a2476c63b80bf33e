"""What jobs held for ``--dependency`` cost the engine's pass (bridge/engine_dependency.py).

One process, a real store in a temporary directory, no back end. For N held jobs it
times, against the baseline of the same pass over N due jobs with no dependency:

(a) ``afterok`` — N jobs each waiting for one running job: the first pass (every one
    checked and held), a pass where nothing changed, and the pass after the job ends;
(b) ``singleton`` — N jobs of one user and name behind one running job (the shape an
    attacker's review measured at 199 s for N=1,000 before singleton was read once per
    user per pass);
(c) fan-in — N jobs each ``afterany`` on the same 256 jobs of another user: one state
    change of one of those (not a start or an end: nothing is woken) and one end.

The pass checks at most CHECKS_PER_PASS held jobs; the figures are for the passes it
takes until every job has been looked at.

    .venv/bin/python bench/dependencies.py [--jobs 1000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# bench/hostlist.py would shadow the python-hostlist package: not the script's folder.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from bridge.backend import Owner  # noqa: E402
from bridge.engine_dependency import DependencyGate  # noqa: E402
from bridge.job_summary import job_summary  # noqa: E402
from bridge.states import JobState  # noqa: E402
from bridge.store import Store  # noqa: E402
from tests.unit.builders import scheduled_trainjob  # noqa: E402

ALICE = Owner(1000, 1000, "alice")
BOB = Owner(1001, 1001, "bob")


def add(store: Store, owner: Owner = ALICE, **options: object) -> int:
    job = scheduled_trainjob(nodes=1, **options)
    return store.add(job, owner, "slurm", summary=job_summary(job)).id


def run_job(store: Store, job_id: int) -> None:
    store.transition(job_id, JobState.SUBMITTED, "Submitted", backend_id=str(job_id))
    store.transition(job_id, JobState.RUNNING, "Running", started_at=time.time())


def passes(store: Store, gate: DependencyGate) -> tuple[float, int]:
    """Engine passes (wake, read what is due, split) until nothing is due: (seconds in
    all, passes). What a pass lets through is marked submitted (outside the timing), as
    the engine's submission would."""
    spent, count = 0.0, 0
    while True:
        start = time.perf_counter()
        now = time.time()
        gate.wake(now)
        due = store.list_jobs([JobState.PENDING], due_by=now)
        ready = gate.split(due, now)
        spent += time.perf_counter() - start
        count += 1
        for rec in ready:
            store.transition(rec.id, JobState.SUBMITTED, "Submitted", attempts=1,
                             backend_id=str(rec.id))
        if not store.list_jobs([JobState.PENDING], due_by=time.time()) or count > 1000:
            return spent, count


def scenario(title: str, n: int, make: Callable[[Store], list[Callable[[Store], None]]],
             baseline: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp) / "s.sqlite")
        steps = make(store)
        gate = DependencyGate(store)
        first, count = passes(store, gate)
        print(f"{title}, N={n}: first look {first * 1000:,.0f} ms in {count} passes "
              f"({first / baseline:.1f}x the baseline pass)")
        for label, step in zip(("nothing changed", *[f"step {i}" for i in range(1, 9)]),
                               [lambda s: None, *steps], strict=False):
            step(store)
            spent, count = passes(store, gate)
            print(f"  {label}: {spent * 1000:,.1f} ms in {count} pass(es) "
                  f"({spent / baseline:.2f}x)")
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    n = parser.parse_args().jobs

    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp) / "s.sqlite")
        for _ in range(n):
            add(store)
        baseline, _ = passes(store, DependencyGate(store))
        store.close()
    print(f"baseline: one pass over {n} due jobs without a dependency: "
          f"{baseline * 1000:,.1f} ms")

    def afterok(store: Store) -> list[Callable[[Store], None]]:
        first = add(store)
        run_job(store, first)
        for _ in range(n):
            add(store, dependency=f"afterok:{first}")
        return [lambda s: s.transition(first, JobState.SUCCEEDED, "Succeeded")]

    def singleton(store: Store) -> list[Callable[[Store], None]]:
        first = add(store, job_name="N")
        run_job(store, first)
        for _ in range(n):
            add(store, job_name="N", dependency="singleton")
        return [lambda s: s.transition(first, JobState.SUCCEEDED, "Succeeded")]

    def fan_in(store: Store) -> list[Callable[[Store], None]]:
        targets = [add(store, BOB) for _ in range(256)]
        dep = ",".join(f"afterany:{i}" for i in targets)
        for _ in range(n):
            add(store, dependency=dep)
        return [lambda s: s.transition(targets[0], JobState.SUBMITTED, "Submitted",
                                       backend_id="1"),
                lambda s: s.transition(targets[1], JobState.CANCELLED, "Cancelled")]

    scenario("afterok on one running job", n, afterok, baseline)
    scenario("singleton behind one running job", n, singleton, baseline)
    scenario("afterany on the same 256 jobs of another user", n, fan_in, baseline)


if __name__ == "__main__":
    main()
