"""Slurm's job listing (slurmrestd ``GET /jobs``, ``squeue --json``) decoded with only
the fields the bridge reads, and converted by change.

Why: slurmctld's ``update_time`` filter is all-or-nothing, so on a busy cluster any
change anywhere resends the whole job table — 21 MB for 6,522 jobs on 22.05, 111
fields a job of which the bridge reads 19 — and each resend was decoded whole
(``json.loads``: 135 ms, and tens of MB of dicts) and every job converted again (about
14 µs each, 92 ms), most of them exactly as they were. Now (a listing recorded
from the bed's slurmrestd, medians of 5 on its 2 CPUs):

* :func:`decode_listing` decodes with msgspec into :class:`JobFields`, a struct of the
  20 fields :func:`slurm_adapter.records.job_from_slurm` reads; the other fields are
  skipped by the parser, never built (26 ms for the same listing). msgspec rather than
  a hand-written scanner: it is a maintained C decoder that validates the JSON as
  ``json`` does, and skipping unknown fields is what it is for.
* :class:`ListingConverter` remembers, for each bridge job of the last listing, a
  digest of its fields and their conversion: a job whose fields are as they were gets
  the same :class:`~bridge.backend.BackendJob` object back (no conversion, and the
  engine's comparison with what it applied last is then by identity): 21 ms for the
  same listing unchanged. Each listing replaces what is remembered, so it is bounded
  by Slurm's own job table. What is remembered of an unchanged job is the very entry
  (id, digest and conversion) the last listing remembered: a listing whose jobs did not
  change leaves no new object behind among the thousands it decoded and dropped, which
  would keep the allocator's pages of those from going back to the system (the
  daemon's resident memory grew ~20 MB at each whole listing at 10,000 jobs).

Contract: :func:`decode_listing` returns the answer as a dict holding exactly the
top-level keys the JSON had among ``jobs``, ``meta``, ``errors``, ``warnings`` and
``last_update`` (``jobs`` a list of :class:`JobFields`; bytes that are not UTF-8 read
as replacement characters, as the plain decoding reads them), or None when they are
not a JSON object of that shape (the caller then decodes them as plain JSON, for the
error it reports). :meth:`ListingConverter.convert` returns what
:func:`slurm_adapter.records.convert_listing` returns for the same listing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping
from typing import Any

import msgspec

from bridge.backend import BackendJob
from slurm_adapter.dialects import Dialect
from slurm_adapter.records import convert_listing, jobs_from_slurm, pick_jobs
from slurm_adapter.script import COMMENT_PREFIX

__all__ = ["Entry", "JobFields", "ListingConverter", "Memory", "decode_listing"]


class JobFields(msgspec.Struct):
    """The fields of one Slurm job record the bridge reads (each as the JSON had it, in
    any dialect's shape; absent: None). ``get`` reads like the record's dict."""

    job_id: Any = None
    comment: Any = None
    job_state: Any = None
    state_reason: Any = None
    state_description: Any = None
    start_time: Any = None
    end_time: Any = None
    exit_code: Any = None
    nodes: Any = None
    array_job_id: Any = None
    array_task_id: Any = None
    array_task_string: Any = None
    standard_output: Any = None
    standard_error: Any = None
    current_working_directory: Any = None
    name: Any = None
    user_name: Any = None
    batch_host: Any = None
    user_id: Any = None
    partition: Any = None

    def get(self, key: str, default: Any = None) -> Any:
        """The field ``key`` (None when the record lacked it or had null); ``default``
        for a name that is not one of the fields."""
        return getattr(self, key) if key in _FIELDS else default


_FIELDS = frozenset(JobFields.__struct_fields__)


class _Answer(msgspec.Struct):
    jobs: list[JobFields] | msgspec.UnsetType = msgspec.UNSET
    meta: Any = msgspec.UNSET
    errors: Any = msgspec.UNSET
    warnings: Any = msgspec.UNSET
    last_update: Any = msgspec.UNSET


_DECODER = msgspec.json.Decoder(_Answer)


def decode_listing(content: bytes) -> dict[str, Any] | None:
    """The listing answer ``content`` (see the module's contract)."""
    try:
        answer = _DECODER.decode(content)
    except msgspec.DecodeError:  # not JSON, or not an object of this shape
        try:
            content.decode()
        except UnicodeDecodeError:
            # A byte that is not UTF-8 (a job name, say), which json.loads of the text
            # decoded with replacement characters accepts: the same here, so that one
            # user's job cannot make every listing take the slow path.
            return decode_listing(content.decode(errors="replace").encode())
        return None
    return {key: value for key in _Answer.__struct_fields__
            if (value := getattr(answer, key)) is not msgspec.UNSET}


#: What a converter remembers of a job: its Slurm id (the very int object keying it),
#: the digest of its fields and their conversion (a native array's remainder: a job for
#: each pending task).
Entry = tuple[int, bytes, tuple[BackendJob, ...]]
#: What a converter remembers: its dialect, and each bridge job's entry by Slurm id.
Memory = tuple[Dialect | None, dict[int, Entry]]


class ListingConverter:
    """Converts listings, reusing the last conversion of each unchanged job (see the
    module docstring). Safe in a worker thread: a conversion builds its memory aside
    and replaces the old one in one assignment; two at once each give a right answer.

    A job is unchanged when the JSON encoding of its fields is: compared as bytes, not
    with ``==`` (which holds between ``1``, ``1.0`` and ``True``, that
    :func:`~slurm_adapter.records.job_from_slurm` reads differently), and remembered as
    a 16-byte BLAKE2b digest (6,500 jobs' fields in the v0.0.40+ shape held 17.6 MB).
    Jobs without the bridge's key are not remembered: telling them costs less."""

    def __init__(self, arrays: bool = False) -> None:
        #: Read native arrays' records as their tasks (``jobs_from_slurm``'s ``arrays``).
        self.arrays = arrays
        self._dialect: Dialect | None = None
        #: Slurm job id -> (the id, the digest of its fields in the last listing, their
        #: conversion).
        self._last: dict[int, Entry] = {}

    def convert(self, raw_jobs: list[Any], dialect: Dialect
                ) -> tuple[list[BackendJob], dict[str, int]]:
        """:func:`~slurm_adapter.records.convert_listing` of ``raw_jobs``, remembered."""
        converted, memory = self.prepare(raw_jobs, dialect)
        self.adopt(memory)
        return converted

    def adopt(self, memory: Memory) -> None:
        """Remember what :meth:`prepare` gave (on the caller's side of a worker thread:
        a conversion whose caller gave up is never adopted)."""
        self._dialect, self._last = memory

    def prepare(self, raw_jobs: list[Any], dialect: Dialect
                ) -> tuple[tuple[list[BackendJob], dict[str, int]], Memory]:
        """:meth:`convert`'s answer and what it would remember, without remembering it
        (the memory is only read: safe in a worker thread)."""
        last = self._last if dialect is self._dialect else {}
        remembered: dict[int, Entry] = {}

        def convert_one(raw: Any, dialect: Dialect) -> tuple[BackendJob, ...]:
            if not isinstance(raw, JobFields):
                return jobs_from_slurm(raw, dialect, self.arrays)
            comment = raw.comment
            if not (isinstance(comment, str) and comment.startswith(COMMENT_PREFIX)):
                return ()  # not the bridge's: job_from_slurm's own first test
            slurm_id = dialect.number(raw.job_id)
            if slurm_id is None:
                return ()
            digest = hashlib.blake2b(_ENCODER.encode(raw), digest_size=16).digest()
            before = last.get(slurm_id)
            if before is not None and before[1] == digest:
                remembered[before[0]] = before  # nothing new kept (see the module's doc)
                return before[2]
            jobs = jobs_from_slurm(raw, dialect, self.arrays)
            remembered[slurm_id] = (slurm_id, digest, jobs)
            return jobs

        return convert_listing(raw_jobs, dialect, convert_one), (dialect, remembered)

    @property
    def known(self) -> Collection[int]:
        """The Slurm ids of the bridge's jobs in the last listing (as updated)."""
        return self._last.keys()

    def update(self, records: Mapping[int, Any], dialect: Dialect
               ) -> tuple[list[BackendJob], dict[str, int]] | None:
        """The last conversion with the jobs of ``records`` as they are now (Slurm id
        -> its record, a :class:`JobFields`; None: Slurm no longer holds it), the
        others as they were: what :meth:`convert` of a listing with those records
        would give (jobs new to it last), the unchanged jobs the same objects. None
        when there is no conversion of this dialect to update (a whole listing is
        needed). Copies its memory (bridge jobs only: thousands, not the listing)."""
        if dialect is not self._dialect:
            return None
        last = dict(self._last)
        for slurm_id, raw in records.items():
            comment = raw.get("comment") if raw is not None else None
            if not (isinstance(comment, str) and comment.startswith(COMMENT_PREFIX)):
                last.pop(slurm_id, None)  # gone, or no longer the bridge's
                continue
            digest = hashlib.blake2b(_ENCODER.encode(raw), digest_size=16).digest()
            before = last.get(slurm_id)
            if before is None or before[1] != digest:
                last[slurm_id] = (slurm_id, digest, jobs_from_slurm(raw, dialect, self.arrays))
        self._last = last
        return pick_jobs(job for _, _, jobs in last.values() for job in jobs)


_ENCODER = msgspec.json.Encoder()
