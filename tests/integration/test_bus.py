"""The Redis stream bus's tailer, against real Redis."""

from __future__ import annotations

import asyncio
import time

from redis.asyncio import Redis

from app.bus import CLOSE_GRACE_S, RedisStreamBus
from app.events import Message
from tests.conftest import REDIS_URL, unique


async def test_close_stops_the_tailer_after_its_read_without_cancelling_it() -> None:
    """``close`` lets the blocked XREAD return and the tailer leave its loop: cancelling a read inside
    redis-py could leave the task waiting forever, which hung an app's shutdown (a lifespan exit)."""
    redis = Redis.from_url(REDIS_URL)
    stream = unique("bg:test-bus")
    folded: list[Message] = []

    async def handler(message: Message) -> None:
        folded.append(message)

    async def on_gap() -> None:
        return None

    bus = RedisStreamBus(redis, stream, maxlen=1000, block_ms=300)
    try:
        await bus.start(handler, on_gap)
        await asyncio.sleep(0.1)  # the tailer is inside a blocked XREAD now
        task = bus._task
        assert task is not None and not task.done()
        started = time.monotonic()
        await bus.close()
        elapsed = time.monotonic() - started
        assert task.done() and not task.cancelled()
        assert elapsed < 0.3 + CLOSE_GRACE_S
    finally:
        await redis.delete(stream)
        await redis.aclose()
