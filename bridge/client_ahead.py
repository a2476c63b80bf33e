"""A call run in a thread while the caller goes on: how :meth:`bridge.client.BridgeClient
.iter_pages` reads the next page of a listing while the caller formats this one.

Imported only when a listing has a second page (``threading`` is not free at a command's
start).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs every command ~2 ms of start-up (bridge.client_types)
if TYPE_CHECKING:
    from collections.abc import Callable

    from bridge.client_types import JobView

__all__ = ["Ahead"]


class Ahead:
    """``call(arg)`` run in a thread now; :meth:`result` waits for its answer (or raises
    its error). threading is imported only when a listing has a second page."""

    def __init__(self, call: Callable[[dict[str, str]], tuple[list[JobView], object]],
                 arg: dict[str, str]) -> None:
        import threading

        self._answer: tuple[list[JobView], object] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call, arg), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[dict[str, str]], tuple[list[JobView], object]],
             arg: dict[str, str]) -> None:
        try:
            self._answer = call(arg)
        except BaseException as exc:  # handed to the caller's thread by result()
            self._error = exc

    def result(self) -> tuple[list[JobView], object]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._answer is not None
        return self._answer
