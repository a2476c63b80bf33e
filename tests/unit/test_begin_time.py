"""``--begin`` read as Slurm reads it (bridge/begin_time.py), and the bridge's hold on a
job whose back end reads none (bridge/engine_dependency.py)."""

from __future__ import annotations

import contextlib
import json
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.begin_time import ANN_BEGIN_AT, begin_epoch
from bridge.engine_admission import prepare
from bridge.engine_dependency import DependencyGate
from bridge.engine_settings import EngineSettings
from bridge.model import ANN_SCHEDULING, ValidationError
from bridge.runtimes import RuntimeCatalog
from bridge.states import JobState
from bridge.store import Store
from flux_adapter.options import SUPPORT as FLUX
from slurm_adapter.options import SUPPORT as SLURM
from tests.unit.builders import ALICE, trainjob

NOW = datetime(2026, 12, 7, 10, 30, 0).timestamp()  # a Monday, local time


def at(*fields: int) -> float:
    return datetime(*fields).timestamp()  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "when"), [
    ("now", NOW), ("now+60", NOW + 60), ("now+1hour", NOW + 3600), ("NOW+2m", NOW + 120),
    ("now+1d", NOW + 86400), ("now+1week", NOW + 604800),
    ("11:00", at(2026, 12, 7, 11, 0)), ("10:00", at(2026, 12, 8, 10, 0)),  # passed: tomorrow
    ("1:15:30pm", at(2026, 12, 7, 13, 15, 30)), ("12:00am", at(2026, 12, 8, 0, 0)),
    ("noon", at(2026, 12, 7, 12, 0)), ("midnight", at(2026, 12, 8, 0, 0)),
    ("teatime", at(2026, 12, 7, 16, 0)), ("fika", at(2026, 12, 7, 15, 0)),
    ("elevenses", at(2026, 12, 7, 11, 0)),
    ("today", at(2026, 12, 7)), ("tomorrow", at(2026, 12, 8)),
    ("2027-01-02", at(2027, 1, 2)), ("2027-01-02T03:04:05", at(2027, 1, 2, 3, 4, 5)),
    ("12/24", at(2026, 12, 24)), ("12/24/27", at(2027, 12, 24)), ("1224", at(2026, 12, 24)),
    ("12.24.27", at(2027, 12, 24)), ("12/24-18:30", at(2026, 12, 24, 18, 30)),
])
def test_the_forms_sbatch_reads(text: str, when: float) -> None:
    assert begin_epoch(text, NOW) == when


@pytest.mark.parametrize("text", ["later", "now+1fortnight", "25:00", "13:00pm",
                                  "2027-13-01", "12/24-x", "now-5", ""])
def test_anything_else_is_refused_naming_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"--begin=.*forms: now\[\+COUNT"):
        begin_epoch(text, NOW)


@given(st.text(max_size=40))
def test_any_text_is_a_time_or_a_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        assert isinstance(begin_epoch(text, NOW), float)


def test_a_job_is_held_until_its_begin_where_the_back_end_reads_none(tmp_path: Path
                                                                     ) -> None:
    """Admission pins the time in the bridge's annotation (a client's dropped; Slurm
    gets none: it reads --begin itself); the gate holds the job, reason BeginTime, not
    due until then, and lets it go after."""
    store = Store.open(tmp_path / "s.sqlite")
    settings = EngineSettings(default_backend="flux")
    job = trainjob(command=["true"], annotations={
        ANN_SCHEDULING: json.dumps({"begin": "now+600"}), ANN_BEGIN_AT: "1"})
    slurm = prepare(job.model_copy(deep=True), ALICE, "api", catalog=RuntimeCatalog(),
                    backends={"flux": SimpleNamespace(native_begin=True,
                                                      option_support=SLURM)},
                    settings=settings)
    assert ANN_BEGIN_AT not in slurm.job.metadata.annotations
    flux = prepare(job, ALICE, "api", catalog=RuntimeCatalog(),
                   backends={"flux": SimpleNamespace(option_support=FLUX)}, settings=settings)
    begin = flux.summary["beginAt"]
    assert float(flux.job.metadata.annotations[ANN_BEGIN_AT]) == begin
    record = store.add(flux.job, ALICE, "flux", summary=flux.summary)
    gate = DependencyGate(store)
    assert gate.split([record], begin - 1) == []
    held = store.get(record.id)
    assert (held.state, held.reason, held.next_attempt_at) == (
        JobState.PENDING, "BeginTime", begin)
    assert "(--begin)" in held.message
    assert [r.id for r in gate.split([held], begin + 1)] == [record.id]


def test_a_time_past_the_year_9999_is_refused_and_a_stored_one_stops_no_pass(
        tmp_path: Path) -> None:
    for text in ("now+3000000d", "now+999999999w"):
        with pytest.raises(ValueError, match="later than the year 9999"):
            begin_epoch(text, NOW)
    store = Store.open(tmp_path / "s.sqlite")
    job = trainjob(command=["true"], annotations={ANN_BEGIN_AT: "6e14"})
    far = store.add(job, ALICE, "flux", summary={"beginAt": 6.0e14})
    near = store.add(trainjob(command=["true"], name="near",
                              uid="00000000-0000-4000-8000-000000000002"), ALICE, "flux",
                     summary={})
    assert [r.id for r in DependencyGate(store).split([far, near], NOW)] == [near.id]
    assert store.get(far.id).reason == "BeginTime"


def test_a_bad_begin_on_a_back_end_whose_table_reads_none_is_a_400_naming_it() -> None:
    """A back end that neither reads --begin nor checks it in its table (a third
    party's): refused naming the field, never a ValueError (a 500)."""
    job = trainjob(command=["true"], annotations={ANN_SCHEDULING: json.dumps(
        {"begin": "bogus"})})
    with pytest.raises(ValidationError, match=r"scheduling\]\.begin: --begin=bogus"):
        prepare(job, ALICE, "api", catalog=RuntimeCatalog(),
                backends={"flux": SimpleNamespace(option_support=SLURM)},
                settings=EngineSettings(default_backend="flux"))
