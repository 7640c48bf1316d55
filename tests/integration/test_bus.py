"""The Redis stream bus's tailer and publisher, against real Redis."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from redis.asyncio import Redis

from app.bus import CLOSE_GRACE_S, InProcessBus, RedisStreamBus
from app.events import Message, RouterChanged, decode_message
from tests.conftest import REDIS_URL, unique


@contextlib.asynccontextmanager
async def started_bus(redis: Redis, stream: str) -> AsyncIterator[tuple[RedisStreamBus, list[Message]]]:
    """A started bus on ``stream`` (a 300 ms block) and the messages its handler was given; the stream
    is deleted afterwards (the bus is left for the test to close)."""
    folded: list[Message] = []

    async def handler(message: Message) -> None:
        folded.append(message)

    async def on_gap() -> None:
        return None

    bus = RedisStreamBus(redis, stream, maxlen=1000, block_ms=300)
    try:
        await bus.start([handler], on_gap)
        yield bus, folded
    finally:
        with contextlib.suppress(Exception):
            await redis.delete(stream)


async def test_close_stops_the_tailer_after_its_read_without_cancelling_it() -> None:
    """``close`` lets the blocked XREAD return and the tailer leave its loop: cancelling a read inside
    redis-py could leave the task waiting forever, which hung an app's shutdown (a lifespan exit)."""
    redis = Redis.from_url(REDIS_URL)
    try:
        async with started_bus(redis, unique("bg:test-bus")) as (bus, _):
            await asyncio.sleep(0.1)  # the tailer is inside a blocked XREAD now
            task = bus._task
            assert task is not None and not task.done()
            started = time.monotonic()
            await bus.close()
            elapsed = time.monotonic() - started
            assert task.done() and not task.cancelled()
            assert elapsed < 0.3 + CLOSE_GRACE_S
    finally:
        await redis.aclose()


async def test_queued_messages_are_sent_in_order_and_close_sends_what_is_left() -> None:
    """``publish_soon`` returns before the send; the publisher sends every queued message, in queue
    order (several queued at once in one pipelined round trip), and ``close`` waits for it."""
    redis = Redis.from_url(REDIS_URL)
    stream = unique("bg:test-bus")
    try:
        async with started_bus(redis, stream) as (bus, _):
            sent = [RouterChanged(router_id=7, version=v) for v in range(1, 6)]
            for message in sent:
                await bus.publish_soon(message)
            await bus.close()  # at once: the publisher has not run yet, so close is what sends
            entries = await redis.xrange(stream)
            assert [decode_message(fields[b"m"]) for _, fields in entries] == sent
    finally:
        await redis.aclose()


async def test_a_send_that_fails_folds_the_messages_in_this_process() -> None:
    """With Redis unreachable, a queued message is folded here (the handler sees it), as a failed
    ``publish`` is: it is committed, and other processes fold it at their next resync."""
    unreachable = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    try:
        async with started_bus(unreachable, unique("bg:test-bus")) as (bus, folded):
            message = RouterChanged(router_id=3, version=2)
            await bus.publish_soon(message)
            for _ in range(100):
                if folded:
                    break
                await asyncio.sleep(0.02)
            await bus.close()
            assert folded == [message]
    finally:
        await unreachable.aclose()


async def test_every_handler_gets_every_message_in_the_order_given() -> None:
    """Both buses call the process's handlers in order for each message (the caches' first, then the
    policies' fold, as the app starts them)."""
    seen: list[tuple[str, int]] = []

    def recorder(name: str) -> Callable[[Message], Awaitable[None]]:
        async def record(message: Message) -> None:
            assert isinstance(message, RouterChanged)
            seen.append((name, message.router_id))

        return record

    async def on_gap() -> None:
        return None

    local = InProcessBus()
    await local.start([recorder("caches"), recorder("fold")], on_gap)
    await local.publish(RouterChanged(router_id=1, version=1))
    assert seen == [("caches", 1), ("fold", 1)]

    seen.clear()
    redis = Redis.from_url(REDIS_URL)
    stream = unique("bg:test-bus")
    bus = RedisStreamBus(redis, stream, maxlen=1000, block_ms=300)
    try:
        await bus.start([recorder("caches"), recorder("fold")], on_gap)
        for router_id in (2, 3):
            await bus.publish(RouterChanged(router_id=router_id, version=1))
        deadline = time.monotonic() + 10
        while len(seen) < 4 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert seen == [("caches", 2), ("fold", 2), ("caches", 3), ("fold", 3)]
    finally:
        await bus.close()
        await redis.delete(stream)
        await redis.aclose()
