"""The background probe tasks of one process (app/routing/probes.py starts them): at most
``probe_concurrency`` active-learning calls at once (queued beyond), at most ``shadow_concurrency``
shadow calls at once (refused beyond, ``ShadowSlots``), drained in tests and given a grace period at
shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class ShadowSlots:
    """The bounds of one process's shadow calls: ``limit`` calls in flight (``take`` refuses beyond it,
    nothing waits) and, per router, the USD the calls in flight are expected to cost (``reserve``), so
    that calls started together cannot all pass a budget that has room for one of them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self.reserved: dict[int, float] = {}

    def take(self) -> bool:
        """A slot if one is free (the caller must ``give`` it back), else False."""
        if self.in_flight >= self.limit:
            return False
        self.in_flight += 1
        return True

    def give(self) -> None:
        self.in_flight -= 1

    def reserve(self, router_id: int, spent: float, expected: float, budget: float) -> bool:
        """Reserve ``expected`` USD of ``router_id``'s budget if spent + reserved + expected <= budget
        (``spent``: what its stored calls cost over the budget's period); False, nothing reserved, else.
        Synchronous: no other task of this process checks between the test and the reservation."""
        held = self.reserved.get(router_id, 0.0)
        if spent + held + expected > budget:
            return False
        self.reserved[router_id] = held + expected
        return True

    def settle(self, router_id: int, expected: float) -> None:
        """Release a reservation once the call's cost is stored (or it cost nothing)."""
        left = self.reserved.get(router_id, 0.0) - expected
        if left > 1e-12:
            self.reserved[router_id] = left
        else:
            self.reserved.pop(router_id, None)


class ProbeRunner:
    """The background probe tasks of one process, bounded by a semaphore (queries) and by
    ``ShadowSlots`` (shadow calls)."""

    def __init__(self, concurrency: int, shadow_concurrency: int) -> None:
        self.semaphore = asyncio.Semaphore(concurrency)
        self.shadow = ShadowSlots(shadow_concurrency)
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
