"""Report training progress to Kubeflow Trainer (KEP-2779); standard library only.

Where to: ``KUBEFLOW_TRAINER_STATUS_URL`` (https; redirects are not followed), with the bearer
token in the file ``KUBEFLOW_TRAINER_STATUS_TOKEN`` names (read for every request: tokens
rotate) and the server checked against the PEM CA ``KUBEFLOW_TRAINER_STATUS_CA_CERT`` names.
What: :func:`build_body`. Who: rank 0 only (:func:`rank_from_env`) unless ``all_ranks``.

Training never fails because of a report: nothing here raises for a bad value, configuration
or request; problems go to stderr, one ``trainer_status: warning:`` line per distinct kind
(not through :mod:`warnings`, which ``-W error`` turns into exceptions). ``report()`` hands
the report to one daemon sender thread; reports made while one is in flight coalesce (only
the newest is sent next). The thread sends at most once per ``min_interval`` s, and after HTTP
429 or 5xx (``Retry-After`` s when given) or a connection or TLS error waits longer (1 s,
doubling to 60 s); a failed report is not retried (the next report is the next chance).
``report(block=True)`` sends in the caller's thread and says whether the server accepted it;
``flush()`` sends the queued report at once and waits for it (at the end of a script).

``python -m mpi_launch.trainer_status`` (or ``trainer-status``) ``[--progress P] [--eta S]
[--metric NAME=VALUE]... [--all-ranks] [--strict]`` sends one report synchronously: exit 0
when accepted, when this rank does not report, and (with a warning on stderr) when it was
not accepted or no endpoint is set; with ``--strict`` 1 then; 2 for usage errors.

Python 3.8 or newer (compute nodes' own pythons: this file can be copied into an image).
A report still queued when the process exits is sent then (``atexit``, up to 5 s).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import http.client
import json
import math
import numbers
import os
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request as ureq
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from email.message import Message
from typing import IO, Any

__all__ = ["ENV_CA_CERT", "ENV_TOKEN", "ENV_URL", "MAX_METRICS", "RANK_VARIABLES", "Reporter",
           "build_body", "default_reporter", "flush", "format_metric_value", "main",
           "rank_from_env", "report"]

ENV_URL = "KUBEFLOW_TRAINER_STATUS_URL"
ENV_TOKEN = "KUBEFLOW_TRAINER_STATUS_TOKEN"  # noqa: S105 (a variable's name)
ENV_CA_CERT = "KUBEFLOW_TRAINER_STATUS_CA_CERT"
RANK_VARIABLES = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
MAX_METRICS, TIMEOUT, MIN_INTERVAL, MAX_BACKOFF = 64, 5.0, 1.0, 60.0
#: The most the daemon stores of one report (its JSON, UTF-8; bridge/trainer_status.py).
MAX_STORED = 8192
_UTC = timezone.utc  # noqa: UP017 - datetime.UTC is 3.11+; compute nodes may run 3.8


def rank_from_env(environ: Mapping[str, str] = os.environ) -> int:
    """The global rank: the first of :data:`RANK_VARIABLES` that holds an integer, else 0."""
    for name in RANK_VARIABLES:
        with contextlib.suppress(KeyError, ValueError):
            return int(environ[name])
    return 0


def format_metric_value(value: object) -> str:
    """A metric value as a string: ``"true"``/``"false"`` for bools, integers in full, other
    real numbers by ``format(v, ".6g")`` (``nan``, ``inf`` as such), the rest by ``str``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return format(float(value), ".6g")
    return str(value)


def _finite(value: object) -> float | None:
    number = float(value) if isinstance(value, numbers.Real) else math.nan
    return number if math.isfinite(number) else None


def build_body(progress_percentage: float | None = None,
               estimated_remaining_seconds: float | None = None,
               metrics: Mapping[str, object] | None = None, *,
               now: datetime | None = None) -> dict[str, Any]:
    """The request body ``{"trainerStatus": {...}}`` (pure): ``progressPercentage`` clamped
    to 0..100 and rounded; ``estimatedRemainingSeconds`` rounded (up to 2**31-1), left out when
    negative; ``metrics`` in the mapping's order, at most :data:`MAX_METRICS`, blank names and
    None values skipped, values by :func:`format_metric_value`, left out when none remain;
    ``lastUpdatedTime`` always: ``now`` (default: the time) in UTC, to the second, with ``Z``.
    A number that is not a finite real number is left out."""
    status: dict[str, Any] = {}
    percent = _finite(progress_percentage)
    if percent is not None:
        status["progressPercentage"] = round(min(max(percent, 0.0), 100.0))
    eta = _finite(estimated_remaining_seconds)
    if eta is not None and eta >= 0:
        status["estimatedRemainingSeconds"] = min(round(eta), 2**31 - 1)
    # Names and values cut to the daemon's limits (128, 256): one long value must not
    # make every later report a 400.
    entries = [{"name": str(name)[:128], "value": format_metric_value(value)[:256]}
               for name, value in (metrics or {}).items()
               if str(name).strip() and value is not None][:MAX_METRICS]
    entries = [e for e in entries if e["value"]]  # the daemon refuses an empty value
    # ... and a report over MAX_STORED bytes: the last metrics go first.
    while entries and len(json.dumps(entries, ensure_ascii=False).encode()) > MAX_STORED - 256:
        entries.pop()
    if entries:
        status["metrics"] = entries
    stamp = (now or datetime.now(_UTC)).astimezone(_UTC)
    status["lastUpdatedTime"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"trainerStatus": status}


def _refusal(error: urllib.error.HTTPError) -> tuple[str, float]:
    """What a refusal says (a Kubernetes Status' ``message``, else the body's text, shortened)
    and its ``Retry-After`` in seconds (0 when absent or a date; at most 300)."""
    text, retry = "", 0.0
    with contextlib.suppress(Exception):
        text = error.read(64 * 1024).decode("utf-8", "replace")
        error.close()
    with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
        answer = json.loads(text)  # a Kubernetes Status' message, or the bridge's error
        text = str(answer.get("message") or answer["error"])
    with contextlib.suppress(TypeError, ValueError, AttributeError):
        retry = min(max(float(error.headers.get("Retry-After") or ""), 0.0), 300.0)
    return " ".join(text.split())[:300] or str(error.reason), retry if math.isfinite(retry) else 0


class _NoRedirect(ureq.HTTPRedirectHandler):
    """A 3xx is an answer (an HTTPError), never followed: the token goes to the named URL only."""

    def redirect_request(self, req: ureq.Request, fp: IO[bytes], code: int, msg: str,
                         headers: Message, newurl: str) -> None:
        return None


class Reporter:
    """Sends progress reports to one status URL. The constructor never raises: an unusable
    configuration (not https, an unreadable CA certificate or token file) is a problem that
    ``report`` writes to stderr once, then sends nothing. ``active=False``: ``report`` does
    nothing (a rank that does not report). Both make ``report`` return False."""

    def __init__(self, url: str, token_file: str, ca_file: str | None, *, active: bool = True,
                 timeout: float = TIMEOUT, min_interval: float = MIN_INTERVAL) -> None:
        self.url, self.token_file, self.active = url, token_file, active
        self.timeout, self.min_interval = timeout, min_interval
        self._send_lock = threading.Lock()  # one request at a time, so reports go in order
        self._cond = threading.Condition()  # guards the rest
        self._pending: dict[str, Any] | None = None  # the newest report not yet taken
        self._busy, self._hurry, self._not_before, self._backoff = False, 0, 0.0, 0.0
        self._thread: threading.Thread | None = None
        self._warned: set[str] = set()
        self._opener: ureq.OpenerDirector | None = None
        self._problem: str | None = None
        try:
            if not url.lower().startswith("https://"):
                raise ValueError(f"{url!r} is not an https URL")
            try:
                context = ssl.create_default_context(cafile=ca_file)
            except (OSError, ValueError) as exc:
                raise ValueError(f"cannot use the CA certificate {ca_file!r}: {exc}") from exc
            self._read_token()
            self._opener = ureq.build_opener(ureq.HTTPSHandler(context=context), _NoRedirect)
        except (OSError, ValueError) as exc:
            self._problem = str(exc)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, *, all_ranks: bool = False,
                 timeout: float = TIMEOUT, min_interval: float = MIN_INTERVAL) -> Reporter | None:
        """The reporter ``environ`` describes; None when :data:`ENV_URL` is unset or empty.

        It is active on rank 0 only (:func:`rank_from_env`) unless ``all_ranks``. When the token
        or CA variable is unset or names an unusable file, it only warns (once) on ``report``."""
        url = environ.get(ENV_URL, "").strip()
        if not url:
            return None
        token_file, ca_file = environ.get(ENV_TOKEN, ""), environ.get(ENV_CA_CERT, "")
        reporter = cls(url, token_file, ca_file or None, timeout=timeout,
                       active=all_ranks or rank_from_env(environ) == 0, min_interval=min_interval)
        for name, value in ((ENV_TOKEN, token_file), (ENV_CA_CERT, ca_file)):
            if not value:
                reporter._problem = f"{ENV_URL} is set but {name} is not"
        return reporter

    @property
    def enabled(self) -> bool:
        """Whether ``report`` sends anything: active, with a usable configuration."""
        return self.active and self._problem is None

    def report(self, progress_percentage: float | None = None,
               estimated_remaining_seconds: float | None = None,
               metrics: Mapping[str, object] | None = None, *, block: bool = False) -> bool:
        """Report progress (values as :func:`build_body` takes them); never raises.

        ``block=False``: queue the report for the sender thread (replacing a queued, unsent
        one); True unless the reporter is not enabled. ``block=True``: drop any queued (older)
        report, send this one now, after a request in flight, and say whether the server
        answered 2xx."""
        if not self.active:
            return False
        if self._problem is not None:
            self._warn("config", f"not reporting progress: {self._problem}")
            return False
        try:
            body = build_body(progress_percentage, estimated_remaining_seconds, metrics)
        except Exception as exc:  # a metric whose __str__ fails, say
            self._warn("value", f"dropped a report: {exc!r}")
            return False
        with self._cond:
            self._pending = None if block else body
            self._cond.notify_all()
            if not block:
                return self._ensure_thread()
        return self._send(body)

    def flush(self, timeout: float = 5.0) -> bool:
        """Send the queued report now (not waiting out the interval or back-off) and wait, at
        most ``timeout`` seconds, until nothing is queued or in flight; whether that happened."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._hurry += 1
            self._cond.notify_all()
            try:
                while self._pending is not None or self._busy:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._ensure_thread():
                        return False
                    self._cond.wait(left)
                return True
            finally:
                self._hurry -= 1

    def _ensure_thread(self) -> bool:
        """Start the sender thread unless it runs (not after a fork); caller holds ``_cond``.
        False, the queued report dropped, when it cannot start (at interpreter shutdown)."""
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="trainer-status", daemon=True)
            try:
                self._thread.start()
            except RuntimeError as exc:
                self._pending = None
                self._warn("thread", f"cannot start the sender thread: {exc}")
        return self._thread.is_alive()

    def _run(self) -> None:
        """The sender thread: take the newest report once it may be sent; send it; repeat."""
        while True:
            with self._cond:
                while (body := self._pending) is None or (
                        not self._hurry and time.monotonic() < self._not_before):
                    self._cond.wait(None if body is None else
                                    self._not_before - time.monotonic())
                self._pending, self._busy = None, True
            try:
                self._send(body)
            except Exception as exc:
                self._warn(type(exc).__name__, f"sending a report failed: {exc!r}")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _send(self, body: dict[str, Any]) -> bool:
        """Send one report; set when the thread may send the next (interval, back-off)."""
        with self._send_lock:
            ok, backoff = self._post(body)
        with self._cond:
            if backoff is None:
                self._backoff = 0.0 if ok else self._backoff
                self._not_before = time.monotonic() + self.min_interval
            else:
                self._backoff = min(max(self._backoff * 2, 1.0), MAX_BACKOFF)
                self._not_before = time.monotonic() + max(backoff, self._backoff)
        return ok

    def _post(self, body: dict[str, Any]) -> tuple[bool, float | None]:
        """One request: whether it was accepted, and the back-off it asks for (None: none)."""
        try:
            assert self._opener is not None
            token = self._read_token()
        except (OSError, ValueError) as exc:
            self._warn("token", str(exc))
            return False, None
        request = ureq.Request(  # noqa: S310 (the constructor allows https only)
            self.url, data=json.dumps(body).encode(), method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                response.read(64 * 1024)
            return True, None
        except urllib.error.HTTPError as exc:
            detail, retry = _refusal(exc)
            self._warn(f"HTTP {exc.code}", f"{self.url} refused a report: {exc.code} {detail}")
            return False, (retry if exc.code == 429 or exc.code >= 500 else None)
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            self._warn(type(reason).__name__, f"cannot send a report to {self.url}: {reason}")
            return False, 0.0

    def _read_token(self) -> str:
        try:
            with open(self.token_file, encoding="utf-8") as file:
                token = file.read().strip()
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read the token file {self.token_file!r}: {exc}") from exc
        if not token:
            raise ValueError(f"the token file {self.token_file!r} is empty")
        return token

    def _warn(self, kind: str, message: str) -> None:
        """``message`` on stderr, unless a warning of this ``kind`` was written already."""
        with self._cond:
            if kind in self._warned:
                return
            self._warned.add(kind)
        with contextlib.suppress(OSError, ValueError, AttributeError):
            print(f"trainer_status: warning: {message}", file=sys.stderr, flush=True)


_default_lock = threading.Lock()
_default: tuple[Reporter | None] | None = None


def default_reporter() -> Reporter | None:
    """The process's reporter, made by :meth:`Reporter.from_env` on first use (None: no URL);
    the report still queued when the interpreter exits is sent then (up to 5 s)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = (Reporter.from_env(),)
            if _default[0] is not None:
                atexit.register(_default[0].flush, 5.0)
        return _default[0]


def report(progress_percentage: float | None = None,
           estimated_remaining_seconds: float | None = None,
           metrics: Mapping[str, object] | None = None, *, block: bool = False) -> bool:
    """:meth:`Reporter.report` on :func:`default_reporter`; False when there is none."""
    reporter = default_reporter()
    return reporter is not None and reporter.report(
        progress_percentage, estimated_remaining_seconds, metrics, block=block)


def flush(timeout: float = 5.0) -> bool:
    """:meth:`Reporter.flush` on :func:`default_reporter`; True when there is none."""
    reporter = default_reporter()
    return reporter is None or reporter.flush(timeout)


def _metric(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name, value


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] = os.environ) -> int:
    """The command line (the module docstring says what it does): the exit status, 0 or 1;
    usage errors raise SystemExit(2) (argparse's)."""
    parser = argparse.ArgumentParser(prog="python -m mpi_launch.trainer_status",
                     description="Send one progress report to Kubeflow Trainer.")
    parser.add_argument("--progress", type=float, metavar="PERCENT")
    parser.add_argument("--eta", type=float, metavar="SECONDS", help="seconds still to go")
    parser.add_argument("--metric", type=_metric, action="append", default=[],
                        metavar="NAME=VALUE", help="repeatable; the value is sent as it is")
    parser.add_argument("--all-ranks", action="store_true", help="report on any rank, not 0 only")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when the report is not accepted (default: warn, exit 0, "
                             "so that a `set -e` script goes on training)")
    args = parser.parse_args(argv)
    reporter = Reporter.from_env(environ, all_ranks=args.all_ranks)
    if reporter is not None and not reporter.active:
        return 0
    if reporter is not None and reporter.report(args.progress, args.eta, dict(args.metric),
                                                block=True):
        return 0
    why = f"{ENV_URL} is not set" if reporter is None else "the report was not accepted"
    print(f"{parser.prog}: {'error' if args.strict else 'warning'}: {why}", file=sys.stderr)
    return 1 if args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
