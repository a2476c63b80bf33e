"""Stand-ins for tests/unit: a back end that submits into a list, and driving an engine
to rest without its loops."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection

from bridge.backend import BackendJob, Inventory, Owner, StatusBatch, SubmitRequest
from bridge.engine import Engine


class FakeBackend:
    """A back end named ``slurm``: submits into :attr:`submitted` (ids 101, 102 ...),
    finds nothing, cancels nothing, reports no status and has no output; its inventory
    is :attr:`inv` (counted in :attr:`inventory_calls`)."""

    name = "slurm"

    def __init__(self, inv: Inventory) -> None:
        self.inv = inv
        self.submitted: list[SubmitRequest] = []
        self.inventory_calls = 0

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def submit(self, request: SubmitRequest) -> str:
        self.submitted.append(request)
        return str(100 + len(self.submitted))

    async def lookup(self, job_uids: Collection[str]) -> list[BackendJob]:
        return []

    async def cancel(self, backend_id: str, owner: Owner) -> None:
        pass

    async def watch(self, interval: float) -> AsyncIterator[StatusBatch]:
        while True:
            await asyncio.sleep(3600)
            yield StatusBatch((), False, 0.0)

    async def inventory(self) -> Inventory:
        self.inventory_calls += 1
        return self.inv

    async def read_log(self, job: BackendJob, stream: str, offset: int) -> tuple[bytes, int]:
        return b"", offset


async def settle(e: Engine) -> None:
    """One reconcile pass, and every submission it started finished."""
    await e.reconcile_once()
    while e._inflight:
        await asyncio.gather(*e._inflight.values())
