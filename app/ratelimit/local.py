"""The in-process limiter (no Redis): buckets and in-flight counts in this process's memory."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from app.ratelimit.bucket import Bucket, refill, take, wait_s
from app.ratelimit.limits import AuthFailureLimits, KeyLimits, Slot


class InProcessLimiter:
    """Every limit of one process. Async only for the shared interface: nothing here awaits, so each
    method runs atomically on the event loop."""

    def __init__(
        self,
        auth: AuthFailureLimits,
        clock: Callable[[], float] = time.monotonic,
        max_addresses: int = 10_000,
    ) -> None:
        self._auth = auth
        self._clock = clock
        self._max_addresses = max_addresses  # ``auth_failure_max_addresses``
        self._buckets: dict[str, Bucket] = {}
        self._in_flight: dict[str, int] = {}
        # least recently failing first: past ``max_addresses`` the first is forgotten, in O(1)
        self._failures: OrderedDict[str, Bucket] = OrderedDict()

    async def admit(self, key: str, limits: KeyLimits) -> Slot:
        held = self._in_flight.get(key, 0)
        if held >= limits.concurrency:
            raise limits.over_concurrency()
        result = take(self._buckets.get(key), self._clock(), limits.rate, limits.burst)
        if not result.admitted:
            raise limits.over_rate(result.retry_after_s)
        self._buckets[key] = result.bucket
        self._in_flight[key] = held + 1
        return Slot(key, "")

    async def admit_from(self, address: str, key: str, limits: KeyLimits) -> Slot:
        await self.check_address(address)
        return await self.admit(key, limits)

    async def release(self, slot: Slot) -> None:
        held = self._in_flight.get(slot.key, 0) - 1
        if held > 0:
            self._in_flight[slot.key] = held
        else:
            self._in_flight.pop(slot.key, None)

    async def close(self) -> None:
        return None

    async def check_address(self, address: str) -> None:
        bucket = self._failures.get(address)
        if bucket is None:
            return
        current = refill(bucket, self._clock(), self._auth.rate, self._auth.burst)
        if current.tokens < 1.0:
            raise self._auth.refusal(wait_s(current, self._auth.rate))

    async def count_failure(self, address: str) -> None:
        result = take(self._failures.get(address), self._clock(), self._auth.rate, self._auth.burst)
        if result.admitted:
            self._failures[address] = result.bucket
        if address in self._failures:
            self._failures.move_to_end(address)
        while len(self._failures) > self._max_addresses:
            self._failures.popitem(last=False)
