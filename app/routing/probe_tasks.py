"""The background probe tasks of one process (app/routing/probes.py starts them): at most
``probe_concurrency`` calls at once, drained in tests and given a grace period at shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class ProbeRunner:
    """The background probe tasks of one process, bounded by a semaphore."""

    def __init__(self, concurrency: int) -> None:
        self.semaphore = asyncio.Semaphore(concurrency)
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def drain(self) -> None:
        """Wait for every probe started so far (tests, shutdown)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)

    async def close(self, grace_s: float = 0.0) -> None:
        """Let running probes finish for up to ``grace_s`` (a rolling restart keeps their answers), then
        cancel what is left."""
        if self.tasks and grace_s > 0:
            await asyncio.wait(list(self.tasks), timeout=grace_s)
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*list(self.tasks), return_exceptions=True)
