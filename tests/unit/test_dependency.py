"""--dependency: sbatch's syntax and meanings (bridge/dependency.py), and tbatch's options."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.dependency import (
    KINDS,
    Condition,
    Dependency,
    Facts,
    Verdict,
    combine,
    evaluate,
    parse,
    unmet,
)
from bridge.sbatch import SbatchError, parse_tbatch
from bridge.sbatch.scheduling import scheduling_options
from bridge.scheduling import SchedulingOptions

NOW = 10_000.0


@pytest.mark.parametrize(("text", "normal"), [
    ("afterok:12", "afterok:12"),
    ("afterok:1:2", "afterok:1,afterok:2"),
    ("afterok:1?afternotok:2:3", "afterok:1?afternotok:2?afternotok:3"),
    ("after:4+10:5,afterany:6,singleton", "after:4+10,after:5,afterany:6,singleton"),
    ("aftercorr:7", "aftercorr:7"),
])
def test_parse_normal_form(text: str, normal: str) -> None:
    assert parse(text).text() == normal
    assert parse(normal) == parse(text)


@pytest.mark.parametrize(("text", "words"), [
    ("", "empty dependency"),
    ("afterok", "needs a job id"),
    ("afterok:", "needs a job id"),
    ("afterok:x", "'x' is not a job id"),
    ("afterok:0", "'0' is not a job id"),
    ("aftercorr:12_3", "aftercorr names a whole array"),
    ("afterok:12_", "is not a job id"), ("afterok:_3", "is not a job id"),
    ("afterok:1+5", r"\+TIME is only for 'after'"),
    ("after:1+x", r"\+TIME must be minutes"),
    ("before:1", "unknown dependency type 'before'"),
    ("afterok:1,afterok:2?afterok:3", "cannot be mixed"),
    ("singleton:3", "singleton takes no job id"),
    ("afterok:1,", "empty dependency"),
    ("afterok:" + ":".join(["1"] * 300), "more than 256"),
])
def test_parse_errors(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse(text)


_CONDITIONS = st.builds(
    Condition, st.sampled_from([k for k in KINDS if k != "singleton"]),
    st.integers(1, 10**6), st.just(0)) | st.just(Condition("singleton"))


@given(st.lists(_CONDITIONS, min_size=1, max_size=8, unique=True), st.booleans())
def test_the_normal_form_reads_back(conditions: list[Condition], any_of: bool) -> None:
    dep = Dependency(tuple(conditions), any_of and len(conditions) > 1)
    assert parse(dep.text()) == dep


def verdict(text: str, facts: dict[int, Facts], blockers: tuple[int, ...] = ()) -> Verdict:
    return evaluate(parse(text), facts, NOW, blockers)[0]


OK, FAILED, CANCELLED = Facts("Succeeded", 1.0), Facts("Failed", 1.0), Facts("Cancelled")
RUNNING, PENDING = Facts("Running", NOW - 30), Facts("Pending")


@pytest.mark.parametrize(("kind", "facts", "expected"), [
    ("afterok", OK, Verdict.READY), ("afterok", FAILED, Verdict.NEVER),
    ("afterok", CANCELLED, Verdict.NEVER), ("afterok", RUNNING, Verdict.WAIT),
    ("afternotok", FAILED, Verdict.READY), ("afternotok", CANCELLED, Verdict.READY),
    ("afternotok", OK, Verdict.NEVER), ("afternotok", PENDING, Verdict.WAIT),
    ("afterany", OK, Verdict.READY), ("afterany", FAILED, Verdict.READY),
    ("afterany", RUNNING, Verdict.WAIT),
    ("after", RUNNING, Verdict.READY), ("after", PENDING, Verdict.WAIT),
    ("after", CANCELLED, Verdict.READY),  # cancelled before it started
    ("aftercorr", OK, Verdict.READY), ("aftercorr", FAILED, Verdict.NEVER),
])
def test_each_kind(kind: str, facts: Facts, expected: Verdict) -> None:
    key = parse(f"{kind}:5").conditions[0].key  # aftercorr: the caller's counterpart
    assert evaluate(parse(f"{kind}:5"), {key: facts}, NOW)[0] is expected


def test_the_same_condition_twice_is_once() -> None:
    assert parse("afterany:5:5:6,afterany:5").text() == "afterany:5,afterany:6"


def test_a_task_of_an_array_is_named_a_i() -> None:
    dep = parse("afterok:12_3:12,after:7_0+5")
    assert [(c.job_id, c.task) for c in dep.conditions] == [(12, 3), (12, None), (7, 0)]
    assert dep.text() == "afterok:12_3,afterok:12,after:7_0+5"
    assert [c.key for c in dep.conditions] == [(12, 3), 12, (7, 0)]
    assert evaluate(dep, {(12, 3): OK, 12: RUNNING, (7, 0): RUNNING}, NOW)[0] is Verdict.WAIT
    assert evaluate(dep, {(12, 3): OK, 12: OK, (7, 0): Facts("Running", NOW - 600)},
                    NOW)[0] is Verdict.READY


@pytest.mark.parametrize(("tasks", "expected"), [
    ([OK, OK], Facts("Succeeded", 1.0)),
    ([OK, FAILED, CANCELLED], Facts("Failed", 1.0)),  # ended without a start: started
    ([OK, CANCELLED], Facts("Cancelled", 1.0)),
    ([CANCELLED, RUNNING], Facts("Running", NOW - 30)),  # after:A is met at the start
    ([CANCELLED], Facts("Cancelled", None)),
    ([OK, RUNNING], Facts("Running", NOW - 30)),
    ([PENDING, OK], Facts("Pending", None)),
    ([], None),
])
def test_an_arrays_facts_combine_its_tasks(tasks: list[Facts], expected: Facts | None
                                           ) -> None:
    assert combine(tasks) == expected


def test_a_purged_job_counts_as_met() -> None:
    assert verdict("afterok:5", {}) is Verdict.READY


def test_after_with_a_delay_says_when() -> None:
    dep = parse("after:5+2")
    assert evaluate(dep, {5: RUNNING}, NOW) == (Verdict.WAIT, RUNNING.started_at + 120)
    assert evaluate(dep, {5: RUNNING}, NOW + 90)[0] is Verdict.READY


def test_all_of_and_any_of() -> None:
    facts = {1: OK, 2: FAILED, 3: PENDING}
    assert verdict("afterok:1,afterok:3", facts) is Verdict.WAIT
    assert verdict("afterok:1,afterok:2", facts) is Verdict.NEVER
    assert verdict("afterok:1,afternotok:2", facts) is Verdict.READY
    assert verdict("afterok:2?afterok:3", facts) is Verdict.WAIT
    assert verdict("afterok:2?afterok:1", facts) is Verdict.READY
    assert verdict("afterok:2?afternotok:1", facts) is Verdict.NEVER


def test_unmet_leaves_out_what_is_decided() -> None:
    """What a back end would still wait for (a native dependency): with ``,`` the
    conditions not met; with ``?`` those that may still be met."""
    facts = {1: OK, 2: FAILED, 3: PENDING, 4: PENDING}

    def left(text: str) -> tuple[Verdict, list[str]]:
        v, conds = unmet(parse(text), facts, NOW)
        return v, [c.text() for c in conds]

    assert left("afterok:1,afterok:3,afterany:4") == (Verdict.WAIT, ["afterok:3", "afterany:4"])
    assert left("afterok:2?afterok:3?afterok:4") == (Verdict.WAIT, ["afterok:3", "afterok:4"])
    assert left("afterok:1,afternotok:2") == (Verdict.READY, [])
    assert left("afterok:2?afterok:1") == (Verdict.READY, [])
    assert left("afterok:1,afterok:2,afterok:3") == (Verdict.NEVER, ["afterok:2", "afterok:3"])
    assert left("afterok:2?afternotok:1") == (Verdict.NEVER, ["afterok:2", "afternotok:1"])


def test_singleton_waits_for_blockers() -> None:
    assert verdict("singleton", {}, blockers=(3,)) is Verdict.WAIT
    assert verdict("singleton", {}) is Verdict.READY


# ------------------------------------------------------------------ tbatch and the model


def test_tbatch_reads_dependency_and_kill_on_invalid_dep() -> None:
    request = parse_tbatch(["-d", "afterok:3:4", "--kill-on-invalid-dep=yes", "job.sh"],
                           "#!/bin/sh\n#SBATCH --dependency=afterany:1\n")
    assert request.options.dependency == "afterok:3,afterok:4"  # command line wins
    assert request.options.kill_on_invalid_dep is True
    options = scheduling_options(request, "/home/alice")
    assert (options.dependency, options.kill_on_invalid_dep) == ("afterok:3,afterok:4", True)
    script = parse_tbatch(["job.sh"], "#!/bin/sh\n#SBATCH -d singleton\n")
    assert script.options.dependency == "singleton"


@pytest.mark.parametrize(("argv", "words"), [
    (["-d", "afterok:x"], "invalid --dependency value 'afterok:x': job id 'x' is not a job id"),
    (["--kill-on-invalid-dep=maybe"], "must be yes or no"),
])
def test_tbatch_names_a_bad_value(argv: list[str], words: str) -> None:
    with pytest.raises(SbatchError, match=words):
        parse_tbatch([*argv, "job.sh"], "#!/bin/sh\n")


def test_the_annotation_keeps_the_normal_form_and_refuses_bad_text() -> None:
    assert SchedulingOptions(dependency="afterok:1:2").dependency == "afterok:1,afterok:2"
    with pytest.raises(ValueError, match="unknown dependency type"):
        SchedulingOptions(dependency="sometime:1")


def test_a_long_dependency_fits_in_its_normal_form() -> None:
    text = "afterok:" + ":".join(str(10**9 + i) for i in range(256))
    assert len(SchedulingOptions(dependency=text).dependency or "") > 4096
