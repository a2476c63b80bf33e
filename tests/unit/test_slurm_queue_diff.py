"""slurm_adapter/queue_diff.py: which jobs changed, from squeue's text — never a guess
when a user's comment could pass a line off as another job's."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_adapter.queue_diff import FORMAT, changed, parse, squeue_argv

PREFIX = "hpc-bridge:"


def line(job_id: int | str, state: str = "PENDING", comment: str = "", reason: str = "None",
         nodes: str = "") -> str:
    return f"{job_id}|{state}|{reason}|{nodes}|debug|1001|n/a|{job_id}|N/A|{comment}"


def test_the_format_has_the_comment_last_and_lists_every_job() -> None:
    assert FORMAT.endswith("|%k") and FORMAT.startswith("%A|")
    argv = squeue_argv()
    assert argv[0] == "squeue" and "--states=all" in argv and "--all" in argv
    assert f"--format={FORMAT}" in argv and "--noheader" in argv
    assert line(7).count("|") == FORMAT.count("|")


def test_a_parsed_text_knows_each_line_and_the_bridges_jobs() -> None:
    text = "\n".join([line(1, comment=f"{PREFIX}u1 note"), line(2, comment="mine|with|bars"),
                      line(3, comment=PREFIX)]) + "\n"
    parsed = parse(text, PREFIX)
    assert parsed is not None
    assert set(parsed.lines) == {1, 2, 3} and parsed.bridge == {1, 3}


def test_changes_are_the_bridges_new_or_different_lines_and_the_known_ones() -> None:
    before = parse("\n".join([line(1, comment=PREFIX + "a"), line(2, comment=PREFIX + "b"),
                              line(3, comment="other"), line(4, comment=PREFIX + "d")]), PREFIX)
    now = parse("\n".join([line(1, comment=PREFIX + "a"),  # as it was
                           line(2, "RUNNING", comment=PREFIX + "b", nodes="node1"),
                           line(3, "RUNNING", comment="other"),  # not the bridge's
                           line(5, comment=PREFIX + "e")]), PREFIX)  # 4 gone, 5 new
    assert before is not None and now is not None
    assert changed(before, now, known={1, 2, 4}) == ({2, 5}, {4})
    # A known job whose comment lost the prefix is read (the reading tells it went).
    lost = parse("\n".join([line(1, comment="renamed"), line(2, comment=PREFIX + "b")]), PREFIX)
    assert lost is not None
    assert changed(before, lost, known={1, 2}) == ({1}, set())


def test_a_newline_in_a_comment_cannot_pass_a_line_off_as_another_jobs() -> None:
    """Bob's comment holds a newline and a line that looks like alice's job 1 as it
    was: the real line of job 1 (changed) and the forged one make the id appear twice,
    and the text is refused: the caller lists the whole table, missing nothing."""
    forged = line(1, comment=PREFIX + "a")
    bob = line(9, comment="x\n" + forged)
    text = "\n".join([line(1, "CANCELLED", comment=PREFIX + "a"), bob])
    assert parse(text, PREFIX) is None
    # A continuation that is not a whole line, or not a number first, is refused too.
    assert parse(line(9, comment="x\nhello"), PREFIX) is None
    assert parse(line(9, comment="x\n12|PENDING"), PREFIX) is None
    assert parse("١٢|" + line(9)[2:], PREFIX) is None  # digits, but not ASCII ones


def test_a_comment_with_bars_does_not_move_the_fields() -> None:
    one = parse(line(1, comment=f"{PREFIX}a|b|c"), PREFIX)
    two = parse(line(1, comment=f"{PREFIX}a|b|d"), PREFIX)
    assert one is not None and two is not None and one.bridge == {1}
    assert changed(one, two, known={1}) == ({1}, set())


_lines = st.dictionaries(
    st.integers(1, 40),
    st.tuples(st.sampled_from(["PENDING", "RUNNING", "COMPLETED"]),
              st.sampled_from(["", PREFIX + "a", PREFIX + "b", "x|y", "\n" + PREFIX])),
    max_size=12)


@settings(max_examples=200, deadline=None)
@given(_lines, _lines, st.sets(st.integers(1, 40)))
def test_every_bridge_job_that_changed_is_read_or_the_text_is_refused(
        old: dict[int, tuple[str, str]], new: dict[int, tuple[str, str]],
        known: set[int]) -> None:
    def text(jobs: dict[int, tuple[str, str]]) -> str:
        return "\n".join(line(i, state, comment) for i, (state, comment) in jobs.items())

    before, now = parse(text(old), PREFIX), parse(text(new), PREFIX)
    if any("\n" in c for _, c in new.values()):
        # A newline then a comment is no line of its own: refused, never guessed.
        assert now is None
        return
    assert now is not None
    if before is None:
        return
    to_read, gone = changed(before, now, known)
    for job_id, (state, comment) in new.items():
        if comment.startswith(PREFIX) and old.get(job_id) != (state, comment):
            assert job_id in to_read
        if job_id in known and old.get(job_id) != (state, comment):
            assert job_id in to_read
    assert gone == {i for i in known if i not in new}
    assert all(i in new for i in to_read)


def test_an_id_longer_than_slurms_is_a_forged_line() -> None:
    assert parse(line("9" * 11), PREFIX) is None
    assert parse(line("9" * 5000), PREFIX) is None  # int() would refuse it: never asked
    assert parse(line("4294967295"), PREFIX) is not None
