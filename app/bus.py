"""The event bus: every process folds the same stream of events, in order.

``RedisStreamBus`` appends to one Redis stream (XADD, approximately capped) and tails it (XREAD BLOCK) in
each process. ``InProcessBus`` is the embedded default: publishing delivers to the handler at once, in
the publishing process only (so the embedded default is one process). Both call each handler,
``handler(message)``, for every message, the process's own writes included.

``start`` takes the process's handlers in order; each is called with every message.

``publish`` returns once the message is sent; ``publish_soon`` returns once it is queued: the request
path's feedback events (committed already: a client's answer then waits for its fold, the gateway's own
cost events for neither the send nor the fold). The Redis bus sends its queue from one publisher task, all
that queued during the previous send in one pipelined round trip; ``close`` sends what is still queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.events import Message, decode_message, encode_message

log = logging.getLogger(__name__)

Handler = Callable[[Message], Awaitable[None]]
CLOSE_GRACE_S = 2.0  # beyond a read's block time, how long close() waits for the tailer to return
ResyncHandler = Callable[[], Awaitable[None]]


async def deliver(handlers: Sequence[Handler], message: Message) -> None:
    """``message`` to each handler, in order."""
    for handler in handlers:
        await handler(message)


class EventBus(Protocol):
    async def start(self, handlers: Sequence[Handler], on_gap: ResyncHandler) -> None: ...

    async def publish(self, message: Message) -> None: ...

    async def publish_soon(self, message: Message) -> None: ...

    async def close(self) -> None: ...

    async def ping(self) -> bool: ...


class InProcessBus:
    def __init__(self) -> None:
        self._handlers: Sequence[Handler] = ()

    async def start(self, handlers: Sequence[Handler], on_gap: ResyncHandler) -> None:
        self._handlers = handlers

    async def publish(self, message: Message) -> None:
        await deliver(self._handlers, message)

    async def publish_soon(self, message: Message) -> None:
        """As ``publish``: the fold is all there is to send."""
        await self.publish(message)

    async def close(self) -> None:
        self._handlers = ()

    async def ping(self) -> bool:
        return True


class RedisStreamBus:
    """One stream, tailed from the position it had when this process started.

    Anything the tailer might have missed (Redis restarted empty, a connection dropped, a publish that
    failed after the database commit) is recovered by ``on_gap``: the state layer re-reads from the
    database the events it has not folded. ``on_gap`` runs after every reconnection.
    """

    def __init__(self, redis: Redis, stream: str, maxlen: int, block_ms: int) -> None:
        self.redis: Any = redis  # redis-py's stubs type replies as str | bytes; we read bytes
        self.stream = stream
        self.maxlen = maxlen
        self.block_ms = block_ms
        self._task: asyncio.Task[None] | None = None
        self._last_id = "0-0"
        self._healthy_at_start = True
        self._stopping = False
        self._handlers: Sequence[Handler] = ()
        self._outbox: list[Message] = []
        self._publisher: asyncio.Task[None] | None = None
        self.sends = 0  # the publisher's round trips (each one XADD, or a pipeline of them)

    async def _position_now(self) -> str:
        newest = await self.redis.xrevrange(self.stream, count=1)
        return str(newest[0][0].decode()) if newest else "0-0"

    async def start(self, handlers: Sequence[Handler], on_gap: ResyncHandler) -> None:
        try:
            self._last_id = await self._position_now()
        except (RedisError, OSError) as exc:
            log.warning("event stream unavailable at start (%s); will retry and resync", exc)
            self._healthy_at_start = False
        self._handlers = handlers
        self._task = asyncio.create_task(self._tail(handlers, on_gap), name="event-stream-tailer")

    async def _tail(self, handlers: Sequence[Handler], on_gap: ResyncHandler) -> None:
        backoff = 0.1
        healthy = self._healthy_at_start
        while not self._stopping:
            try:
                if not healthy:
                    # Skip to the stream's current end, then re-read from the database what was missed:
                    # events published from here on arrive on the stream, older ones come from the
                    # resync, and the state layer drops whatever arrives twice.
                    self._last_id = await self._position_now()
                    await on_gap()
                    healthy = True
                    log.info("event stream reconnected; resynced from the database")
                replies = await self.redis.xread({self.stream: self._last_id}, block=self.block_ms, count=500)
                backoff = 0.1
                for _stream, entries in replies or []:
                    for entry_id, fields in entries:
                        self._last_id = entry_id.decode()
                        try:
                            await deliver(handlers, decode_message(fields[b"m"]))
                        except Exception:  # one bad message must not stop the tailer
                            log.exception("failed to fold stream entry %s", self._last_id)
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                if healthy:
                    log.warning("event stream read failed (%s); reconnecting", exc)
                healthy = False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    async def publish(self, message: Message) -> None:
        await self.redis.xadd(self.stream, self._fields(message), maxlen=self.maxlen, approximate=True)

    async def publish_soon(self, message: Message) -> None:
        """Queue ``message`` for the publisher task, started here when none is running. A message
        queued while the task sends joins its next send."""
        self._outbox.append(message)
        if self._publisher is None or self._publisher.done():
            self._publisher = asyncio.create_task(self._send_outbox(), name="event-stream-publisher")

    async def _send_outbox(self) -> None:
        """Send the queue until it is empty: one XADD, or a pipeline of them (no MULTI: one round trip)
        when several queued. A send that fails folds its messages in this process, like a failed
        ``publish`` (app/routing/feedback.py): they are committed, and other processes fold them at
        their next resync or compaction."""
        while self._outbox:
            batch, self._outbox = self._outbox, []
            self.sends += 1
            try:
                if len(batch) == 1:
                    await self.publish(batch[0])
                else:
                    pipeline = self.redis.pipeline(transaction=False)
                    for message in batch:
                        pipeline.xadd(
                            self.stream, self._fields(message), maxlen=self.maxlen, approximate=True
                        )
                    await pipeline.execute()
            except Exception as exc:
                log.warning("publishing %d events failed (%s); folding them locally", len(batch), exc)
                for message in batch:
                    await self._fold_here(message)

    async def _fold_here(self, message: Message) -> None:
        try:
            await deliver(self._handlers, message)
        except Exception:
            log.exception("failed to fold an unpublished event locally")

    @staticmethod
    def _fields(message: Message) -> dict[str, str]:
        return {"m": encode_message(message)}

    async def close(self) -> None:
        """Send what is queued (waiting at most ``CLOSE_GRACE_S``), then stop the tailer: it returns
        after its current read (at most ``block_ms``). Cancelling it inside a blocked XREAD is only the
        fallback, and is waited on for a bounded time: redis-py can leave a read cancelled mid-reply
        waiting forever, which hung the app's shutdown (seen in a test whose request timing moved)."""
        if self._publisher is not None:
            await asyncio.wait({self._publisher}, timeout=CLOSE_GRACE_S)
            if not self._publisher.done():
                log.warning("closing before the queued events were sent: other processes fold them later")
                self._publisher.cancel()
        if self._task is None:
            return
        self._stopping = True
        done, _ = await asyncio.wait({self._task}, timeout=self.block_ms / 1000 + CLOSE_GRACE_S)
        if not done:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=CLOSE_GRACE_S)
        if self._task.done() and not self._task.cancelled():
            with contextlib.suppress(Exception):
                self._task.result()

    async def ping(self) -> bool:
        try:
            return bool(await self.redis.ping())
        except (RedisError, OSError):
            return False
