"""slurm_adapter/listing.py: Slurm's job listing decoded with only the fields the bridge
reads, and converted by change — each answer the same as a whole ``json.loads`` and
:func:`~slurm_adapter.records.convert_listing` give, for every recorded dialect."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_adapter.dialects import V0_0_38, V0_0_42, Dialect, dialect_from_meta
from slurm_adapter.listing import JobFields, ListingConverter, decode_listing
from slurm_adapter.records import convert_listing

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
RECORDED = ["v0.0.38_jobs.json", "v0.0.38_jobs_completing.json", "squeue_22.05_jobs.json",
            "squeue_24.11.json", "squeue_26.05.json"]


def _dialect(data: dict[str, Any]) -> Dialect:
    try:
        return dialect_from_meta(data.get("meta"))
    except (ValueError, KeyError):
        return V0_0_38


@pytest.mark.parametrize("name", RECORDED)
def test_a_recorded_listing_converts_as_the_whole_json_does(name: str) -> None:
    content = (FIXTURES / name).read_bytes()
    whole = json.loads(content)
    decoded = decode_listing(content)
    assert decoded is not None
    assert set(decoded) == set(whole) & {"jobs", "meta", "errors", "warnings", "last_update"}
    assert decoded["meta"] == whole["meta"]
    assert all(isinstance(j, JobFields) for j in decoded["jobs"])
    dialect = _dialect(whole)
    expected = convert_listing(whole["jobs"], dialect)
    assert expected[0], "the fixture holds bridge jobs"
    assert convert_listing(decoded["jobs"], dialect) == expected
    assert ListingConverter().convert(decoded["jobs"], dialect) == expected


def test_fields_read_like_the_records_dict() -> None:
    raw = json.loads((FIXTURES / "v0.0.38_jobs.json").read_bytes())["jobs"][0]
    fields = decode_listing(json.dumps({"jobs": [raw]}).encode())["jobs"][0]  # type: ignore[index]
    for key in JobFields.__struct_fields__:
        assert fields.get(key) == raw.get(key)
    assert fields.get("account", "absent") == "absent"  # not one of the fields read
    assert decode_listing(b'{"jobs": [{"job_id": 1}]}')["jobs"][0].get("comment") is None  # type: ignore[index]


@pytest.mark.parametrize("content", [
    b"not json", b"", b"[]", b'{"jobs": {}}', b'{"jobs": [1, 2]}', b'{"jobs": [null]}',
    b'{"jobs": [{"job_id": 1}]', b"\xff\xfe"])
def test_other_answers_are_left_to_plain_json(content: bytes) -> None:
    assert decode_listing(content) is None


def test_only_the_keys_the_answer_had() -> None:
    assert decode_listing(b'{"errors": [{"error": "down"}]}') == {"errors": [{"error": "down"}]}
    assert decode_listing(b'{"jobs": [], "last_update": 0, "x": 1}') == {"jobs": [],
                                                                         "last_update": 0}


def _listing() -> list[dict[str, Any]]:
    return json.loads((FIXTURES / "v0.0.38_jobs.json").read_bytes())["jobs"]


def _decoded(jobs: list[dict[str, Any]]) -> list[Any]:
    out = decode_listing(json.dumps({"jobs": jobs}).encode())
    assert out is not None
    return list(out["jobs"])


def test_an_unchanged_job_keeps_its_conversion_and_a_changed_one_is_converted() -> None:
    jobs = _listing()
    converter = ListingConverter()
    first, _ = converter.convert(_decoded(jobs), V0_0_38)
    again, _ = converter.convert(_decoded(jobs), V0_0_38)
    assert again == first and all(a is b for a, b in zip(first, again, strict=True))
    changed = copy.deepcopy(jobs)
    target = next(j for j in changed if str(j.get("comment", "")).startswith("hpc-bridge:"))
    target["state_reason"] = "Priority"
    after, _ = converter.convert(_decoded(changed), V0_0_38)
    assert after == convert_listing(changed, V0_0_38)[0]
    moved = [b for a, b in zip(first, after, strict=True) if a is not b]
    assert len(moved) == 1 and moved[0].backend_id == str(target["job_id"])


def test_an_unchanged_listing_leaves_no_new_object_remembered() -> None:
    """Each unchanged job's remembered entry, and the int keying it, are those of the
    last listing: nothing of the listing just decoded stays (its pages can go back to
    the system); a changed job's entry is new."""
    jobs = _listing()
    converter = ListingConverter()
    converter.convert(_decoded(jobs), V0_0_38)
    before = dict(converter._last)
    keys = {id(k) for k in before}
    converter.convert(_decoded(jobs), V0_0_38)
    assert before and all(converter._last[i] is entry for i, entry in before.items())
    assert {id(k) for k in converter._last} == keys
    changed = copy.deepcopy(jobs)
    target = next(j for j in changed if str(j.get("comment", "")).startswith("hpc-bridge:"))
    target["state_reason"] = "Priority"
    converter.convert(_decoded(changed), V0_0_38)
    fresh = [i for i, entry in before.items() if converter._last[i] is not entry]
    assert fresh == [target["job_id"]]


def test_another_dialect_converts_everything_again() -> None:
    jobs = _decoded(_listing())
    converter = ListingConverter()
    first, _ = converter.convert(jobs, V0_0_38)
    other, _ = converter.convert(jobs, V0_0_42)
    assert not any(a is b for a, b in zip(first, other, strict=True))


_CHANGES = [(field, value) for field, values in {
    "state_reason": ["None", "Priority", "JobHeldUser", "Resources"],
    "job_state": ["PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"],
    "nodes": ["", "node1", "node[1-2]"],
    "comment": ["", "hpc-bridge:a", "hpc-bridge:b", "hpc-bridge:a note"],
    "user_id": [1000, 1001],
    "end_time": [0, 5, 10],
}.items() for value in values]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(_CHANGES)), max_size=6),
                min_size=1, max_size=4))
def test_a_sequence_of_listings_converts_as_each_would_alone(
        changes: list[list[tuple[int, tuple[str, Any]]]]) -> None:
    base = _listing()[:6]
    jobs = copy.deepcopy(base)
    converter = ListingConverter()
    converter.convert(_decoded(jobs), V0_0_38)
    for step in changes:
        for index, (field, value) in step:
            if index < len(jobs):
                jobs[index][field] = value
        if step and step[0][0] == 5:  # a job leaves the listing now and then
            jobs = jobs[:-1] if len(jobs) > 1 else copy.deepcopy(base)
        assert converter.convert(_decoded(jobs), V0_0_38) == convert_listing(jobs, V0_0_38)



@pytest.mark.parametrize(("field", "before", "after"), [
    ("exit_code", 256, 256.0), ("partition", 1, True), ("user_id", 1, True),
    ("job_state", "COMPLETED", ["COMPLETED"])])
def test_a_field_of_another_json_type_is_a_change(field: str, before: Any, after: Any) -> None:
    """``1 == 1.0 == True`` in Python, but job_from_slurm reads them differently: the
    converter compares the fields' JSON, not their values."""
    jobs = [j for j in _listing() if str(j.get("comment", "")).startswith("hpc-bridge:")]
    jobs = copy.deepcopy(jobs[:1])
    jobs[0][field] = before
    converter = ListingConverter()
    converter.convert(_decoded(jobs), V0_0_38)
    jobs[0][field] = after
    assert converter.convert(_decoded(jobs), V0_0_38) == convert_listing(jobs, V0_0_38)


def test_a_byte_that_is_not_utf8_reads_as_the_plain_decoding_reads_it() -> None:
    """One user's job name with a Latin-1 byte does not send every listing down the
    slow path: it reads as json.loads of the text with replacement characters."""
    raw = _listing()[2]
    content = json.dumps({"jobs": [raw]}).encode().replace(
        json.dumps(raw["name"]).encode(), b'"caf\xe9"')
    decoded = decode_listing(content)
    assert decoded is not None and decoded["jobs"][0].name == "caf\ufffd"
    plain = json.loads(content.decode(errors="replace"))["jobs"]
    assert convert_listing(decoded["jobs"], V0_0_38) == convert_listing(plain, V0_0_38)


def test_jobs_without_the_bridges_key_are_not_remembered() -> None:
    converter = ListingConverter()
    jobs = _listing()
    ours = {j["job_id"] for j in jobs if str(j.get("comment", "")).startswith("hpc-bridge:")}
    converter.convert(_decoded(jobs), V0_0_38)
    assert set(converter._last) == ours


def _by_id(converted: tuple[list[Any], dict[str, int]]) -> tuple[list[Any], dict[str, int]]:
    jobs, owners = converted
    return sorted(jobs, key=lambda j: int(j.backend_id)), owners


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 6), st.sampled_from(_CHANGES)), max_size=6),
                min_size=1, max_size=5))
def test_updating_the_changed_jobs_gives_what_the_whole_listing_gives(
        changes: list[list[tuple[int, tuple[str, Any]]]]) -> None:
    """update() with the records of the jobs that changed (None: gone) equals a
    conversion of the whole listing (order aside), keeps unchanged jobs' objects, and
    remembers what a later whole listing compares against."""
    base = _listing()[:6]
    jobs = {j["job_id"]: copy.deepcopy(j) for j in base}
    converter = ListingConverter()
    converter.convert(_decoded(list(jobs.values())), V0_0_38)
    for step in changes:
        touched: set[int] = set()
        for index, (field, value) in step:
            job_id = base[index % len(base)]["job_id"]
            if index == 6:  # the job leaves Slurm's table, or comes back
                if job_id in jobs:
                    del jobs[job_id]
                else:
                    jobs[job_id] = copy.deepcopy(base[0]) | {"job_id": job_id}
            elif job_id in jobs:
                jobs[job_id][field] = value
            touched.add(job_id)
        records = {i: (_decoded([jobs[i]])[0] if i in jobs else None) for i in touched}
        current = converter.update({}, V0_0_38)
        assert current is not None
        before = {j.backend_id: j for j in current[0]}
        updated = converter.update(records, V0_0_38)
        assert updated is not None
        assert _by_id(updated) == _by_id(convert_listing(list(jobs.values()), V0_0_38))
        for job in updated[0]:
            if int(job.backend_id) not in touched and job.backend_id in before:
                assert job is before[job.backend_id]  # (else it was another's twin)
        assert set(converter.known) <= set(jobs)
    whole = ListingConverter()
    assert _by_id(converter.convert(_decoded(list(jobs.values())), V0_0_38)) \
        == _by_id(whole.convert(_decoded(list(jobs.values())), V0_0_38))


def test_update_needs_a_conversion_of_its_dialect() -> None:
    converter = ListingConverter()
    assert converter.update({}, V0_0_38) is None
    converter.convert(_decoded(_listing()), V0_0_38)
    assert converter.update({}, V0_0_42) is None
    assert converter.update({}, V0_0_38) is not None
