"""CPU per published event on the Redis bus: awaiting each XADD (``publish``) against queueing it for
the bus's publisher task (``publish_soon``), at ``--concurrency`` senders: ``python -m
experiments.publish_cpu --concurrency 16``.

Each sender publishes ``--messages`` forwarded-cost-like events (a 384-float embedding), pausing
``--gap-ms`` between them (0: only yielding to the loop, as a request's other work would); the process
CPU of a round over every message sent is the figure, the two ways alternating round by round, medians
over ``--rounds``. Queued sends leave in one pipelined round trip when several wait, so the saving grows
with the senders in flight; with one sender and a gap there is nothing to batch and the publisher's
task per send is the extra cost.

experiments/ is not packaged and may import app/.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

import numpy as np
from redis.asyncio import Redis

from app.bus import RedisStreamBus
from app.events import FeedbackMessage, Message

STREAM = "experiments:publish-cpu"


async def sender(
    publish: Callable[[Message], Awaitable[None]], message: Message, count: int, gap_s: float
) -> None:
    for _ in range(count):
        await publish(message)
        await asyncio.sleep(gap_s)


async def measure(
    redis_url: str, concurrency: int, messages: int, gap_s: float, rounds: int
) -> dict[str, float]:
    """Median CPU microseconds per message, each way."""
    redis = Redis.from_url(redis_url, socket_timeout=5.0)
    bus = RedisStreamBus(redis, STREAM, maxlen=10_000, block_ms=1000)
    message = FeedbackMessage(
        event_id=1,
        router_id=1,
        decision_id="d" * 32,
        model="m",
        kind="cost",
        reward=None,
        cost=0.001,
        embedding=np.zeros(384, np.float32),
        payload={},
    )
    ways: dict[str, Callable[[Message], Awaitable[None]]] = {
        "publish (awaited)": bus.publish,
        "publish_soon (queued)": bus.publish_soon,
    }
    figures: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for _ in range(rounds):
            for name, publish in ways.items():
                start = time.process_time()
                await asyncio.gather(*(sender(publish, message, messages, gap_s) for _ in range(concurrency)))
                await bus.close()  # sends what is queued
                figures[name].append((time.process_time() - start) / (messages * concurrency) * 1e6)
    finally:
        await redis.delete(STREAM)
        await redis.aclose()
    return {name: statistics.median(values) for name, values in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/5")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--messages", type=int, default=200, help="per sender per round")
    parser.add_argument("--gap-ms", type=float, default=0.0)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    figures = asyncio.run(
        measure(args.redis_url, args.concurrency, args.messages, args.gap_ms / 1000, args.rounds)
    )
    for name, micros in figures.items():
        print(f"{name}: {micros:.1f} us of CPU per message (median of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
