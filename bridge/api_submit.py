"""Admission over HTTP: ``POST /v1/jobs`` (a TrainJob) and ``POST /v1/sbatch`` (what
``tbatch`` was given: arguments, script, working directory and environment,
:mod:`bridge.sbatch.submission`).

Contract: both answer 201 ``{id, uid, name, state}`` for a new job; with an
``Idempotency-Key`` header (per caller) a retry answers 200 with the first job, and
409 when the key came with another body. Bad input is a 400 naming the field (for
``/v1/sbatch``, tbatch's own message naming the option and ``#SBATCH`` line); a script
over ``limits.max_script_bytes`` a 413. Parsing and validation run in a worker thread;
the per-user limits are checked before the body is read (rate, size) and just before
the insert (unfinished jobs), with no await between that count and the insert.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Mapping
from contextlib import suppress
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web

from bridge.api_common import (
    LIMITS_KEY,
    OWNER_KEY,
    SERVICE_KEY,
    body_too_large,
    error_response,
    query_params,
    refuse,
)
from bridge.backend import BackendUnavailable, Owner
from bridge.batchscript import script_bytes, script_of
from bridge.errors import BridgeError
from bridge.limits import UserLimits
from bridge.model import (
    ANN_BATCH_SCRIPT,
    TrainJob,
    ValidationError,
    load_trainjob,
    parse_json_object,
)
from bridge.service import Admission, Admitted, JobRecord, JobService

if TYPE_CHECKING:
    from bridge.sbatch.submission import Submission

__all__ = ["IDEMPOTENCY_HEADER", "idempotency_key", "submit", "submit_sbatch"]

log = structlog.get_logger("hpc_bridge.api")

#: Header of a client's idempotency key: a retried POST with the same key (same caller)
#: answers the first job instead of making a second.
IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_IDEMPOTENCY_KEY = 200


def idempotency_key(value: str | None) -> str | None:
    """The ``Idempotency-Key`` header's value (None if absent); ``ValidationError``
    naming the header when it is empty, longer than 200 characters or not printable
    ASCII."""
    if value is None:
        return None
    if not value or len(value) > MAX_IDEMPOTENCY_KEY or not all(
            "!" <= c <= "~" for c in value):
        raise ValidationError([(f"{IDEMPOTENCY_HEADER} header",
                                f"must be 1-{MAX_IDEMPOTENCY_KEY} printable ASCII characters "
                                f"without spaces")])
    return value


def _submitted(record: JobRecord, status: int, extra: Mapping[str, Any]) -> web.Response:
    return web.json_response({"id": record.id, "uid": record.uid, "name": record.name,
                              "state": record.state.value, **extra}, status=status)


def _admitted(admitted: Admitted, key: str | None, extra: Mapping[str, Any]) -> web.Response:
    """The answer to a submission: 201 with a new job; for a retry (the first job with
    this caller's key) 200, or 409 when the key came with another body."""
    first = admitted.record
    if admitted.conflict:
        return error_response(409, f"{IDEMPOTENCY_HEADER} {key!r} was used for another "
                                   f"request (job {first.id}); use a new key for a new job")
    return _submitted(first, 200 if admitted.replayed else 201, extra)


#: A body decoded: the job, the answer's extra fields and (tbatch's) what it asked for,
#: or an answer to send instead.
Decoded = tuple[TrainJob, dict[str, Any], "Submission | None"] | web.Response
#: A route's decoder: (raw body, max script bytes) -> :data:`Decoded`; runs in a worker
#: thread (touches no store, no loop state); bad input raises :class:`ValidationError`.
Decoder = Callable[[bytes, int], Decoded]


def _script_size(job: TrainJob, max_script: int) -> web.Response | None:
    """A 413 when the job's batch script is over ``max_script`` bytes."""
    script = job.metadata.annotations.get(ANN_BATCH_SCRIPT)
    if script is not None and len(script) > max_script // 4:  # cheap first: <= 4 bytes/char
        size = len(script_bytes(script_of(job) or ""))  # its own bytes, even if base64
        if size > max_script:
            return error_response(413, f"batch script too large ({size} bytes; "
                                       f"metadata.annotations[{ANN_BATCH_SCRIPT}]): at most "
                                       f"{max_script} bytes (limits.max_script_bytes)")
    return None


def _decode_trainjob(raw: bytes, max_script: int) -> Decoded:
    """``POST /v1/jobs``: the body is a TrainJob document."""
    job = load_trainjob(parse_json_object(raw, "request body"), "request")
    return _script_size(job, max_script) or (job, {}, None)


def _decode_sbatch(raw: bytes, max_script: int) -> Decoded:
    """``POST /v1/sbatch``: the body is what tbatch was given
    (:mod:`bridge.sbatch.submission`); the answer adds ``parsable`` (sbatch's
    ``--parsable``, wherever it was given) and, for ``--test-only``, ``testOnly`` (then
    nothing is stored: :func:`_admit` answers 200 with the back end's ``estimate``). A
    user error answers 400 with tbatch's
    message, each line without its ``tbatch: error:`` prefix (the client adds it); the
    options tbatch refuses and those the job's back end refuses come in one answer,
    each with where it was given (:func:`_prepared`)."""
    from bridge.sbatch import SbatchError, trainjob_of_submission

    body = parse_json_object(raw, "request body")
    try:
        submission = trainjob_of_submission(body)
    except SbatchError as exc:
        return error_response(400, "\n".join(
            line.removeprefix("tbatch: error: ") for line in str(exc).split("\n")))
    except BridgeError:
        raise  # a ValidationError naming the field: a 400 (ERROR_STATUS)
    except Exception:  # a parser bug must still not be a 5xx for what a user typed
        log.exception("tbatch request not parsed")
        return error_response(400, "the daemon could not read this tbatch request (its log "
                                   "says why; please report it)")
    extra = {"parsable": submission.parsable,
             **({"testOnly": True} if submission.test_only else {})}
    return _script_size(submission.job, max_script) or (submission.job, extra, submission)


def _prepared(decode: Decoder, raw: bytes, max_script: int, service: JobService,
              owner: Owner
              ) -> tuple[TrainJob, Admission, dict[str, Any], Submission | None] | web.Response:
    """Decode and prepare a body (in a worker thread). For tbatch, the refusals of the
    job's back end join tbatch's own in one 400 (:func:`bridge.sbatch.submission.
    refusal_text`); a job with options tbatch refused is never admitted."""
    decoded = decode(raw, max_script)
    if isinstance(decoded, web.Response):
        return decoded
    job, extra, submission = decoded
    try:
        prepared = service.prepare(job, owner)
    except BridgeError as exc:
        if submission is None or (submission.refused is None
                                  and not isinstance(exc, ValidationError)):
            raise
        from bridge.sbatch.submission import refusal_text

        return error_response(400, refusal_text(submission, exc))
    if submission is not None and submission.refused is not None:
        from bridge.sbatch.submission import refusal_text

        return error_response(400, refusal_text(submission, None))
    return job, prepared, extra, submission


async def _admit(request: web.Request, decode: Decoder, *, replay_extra: bool = False
                 ) -> web.Response:
    """Admit a job: the caller's rate, the body's size, validation (off the loop), the
    caller's count of unfinished jobs and the insert, in that order. With an
    ``Idempotency-Key`` header the submission happens once per caller and key: a retry
    answers 200 with the first job (stored with it, so this holds across restarts) and
    (``replay_extra``) the extra fields its body gives, decoded again (the same body
    decodes the same; should it not, the answer goes without them)."""
    service = request.app[SERVICE_KEY]
    limits = request.app[LIMITS_KEY]
    owner = request[OWNER_KEY]
    query_params(request, frozenset())
    key = idempotency_key(request.headers.get(IDEMPOTENCY_HEADER))
    max_body = limits.settings.max_request_bytes
    max_script = limits.settings.max_script_bytes
    if request.content_length is not None and request.content_length > max_body:
        # Not read at all: the connection closes after the answer.
        return await refuse(request, body_too_large(max_body, request.content_length))
    limits.check_submit(owner.uid, owner.user)
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return body_too_large(max_body)
    digest = hashlib.sha256(raw).hexdigest()
    if key is not None and (replayed := service.replay(owner, key, digest)) is not None:
        extra: dict[str, Any] = {}
        if replay_extra and not replayed.conflict:
            with suppress(BridgeError):
                decoded = await asyncio.to_thread(decode, raw, max_script)
                extra = decoded[1] if isinstance(decoded, tuple) else {}
        return _admitted(replayed, key, extra)
    parsed = await asyncio.to_thread(_prepared, decode, raw, max_script, service, owner)
    if isinstance(parsed, web.Response):
        return parsed
    job, prepared, extra, submission = parsed
    try:
        return await _store(service, limits, owner, job, prepared, extra, key, digest)
    except ValidationError as exc:  # the checks at the insert (the back end's size ...)
        if submission is None:
            raise
        from bridge.sbatch.submission import refusal_text

        return error_response(400, refusal_text(submission, exc))


async def _store(service: JobService, limits: UserLimits, owner: Owner, job: TrainJob,
                 prepared: Admission, extra: dict[str, Any], key: str | None, digest: str
                 ) -> web.Response:
    """The estimate (``--test-only``), or the caller's count of unfinished jobs and the
    insert (:func:`_admit`)."""
    if extra.get("testOnly"):  # sbatch --test-only: checked, estimated, not stored
        try:
            estimate = await service.estimate(job, owner, prepared)
        except BackendUnavailable as exc:
            return error_response(503, f"back end {prepared.backend!r} unavailable: {exc}")
        return web.json_response({"testOnly": True, "estimate": estimate,
                                  "backend": prepared.backend})
    # No await from the count to the insert: two submissions cannot both take the last
    # place under limits.max_active_jobs. Counted only as far as the limit needs.
    cap = limits.active_cap(owner.uid)
    if cap is not None:
        limits.check_active(owner.uid, owner.user, service.count_active(owner.uid, cap),
                            len(prepared.tasks) or 1)
    # Two retries that raced past the replay: the loser answers with the winner's job.
    return _admitted(service.admit(job, owner, prepared=prepared, idempotency_key=key,
                                   request_digest=digest), key, extra)


async def submit(request: web.Request) -> web.Response:
    """``POST /v1/jobs``: admit the TrainJob in the body (see :func:`_admit`)."""
    return await _admit(request, _decode_trainjob)


async def submit_sbatch(request: web.Request) -> web.Response:
    """``POST /v1/sbatch``: admit the job tbatch's arguments, script and environment
    describe (see :func:`_admit`); the parsing that tbatch did before happens here."""
    return await _admit(request, _decode_sbatch, replay_extra=True)
