"""The one error of :mod:`bridge.client` (apart so that the client's own modules,
:mod:`bridge.client_listing`, can raise it without importing the client). Standard
library and :mod:`bridge.errors` only: every t* command imports it at start-up."""

from __future__ import annotations

from bridge.errors import BridgeError

__all__ = ["BridgeClientError"]


class BridgeClientError(BridgeError):
    """A failed call: ``message`` for the user, ``status`` the HTTP status (or ``None``).
    ``transient``: no answer came (timeout, connection refused or reset), so the call
    may be repeated (a submission only with its idempotency key)."""

    def __init__(self, message: str, status: int | None = None,
                 transient: bool = False, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.transient = transient
        #: A 429's ``Retry-After`` (seconds), when it gave one.
        self.retry_after = retry_after
