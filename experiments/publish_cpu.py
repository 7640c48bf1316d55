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
from collections.abc import Awaitable, Callable

import numpy as np
from redis.asyncio import Redis

from app.bus import RedisStreamBus
from app.events import FeedbackMessage, Message
from experiments.alternating_cpu import alternate, arguments, cpu_us_per_op, report

STREAM = "experiments:publish-cpu"


async def sender(
    publish: Callable[[Message], Awaitable[None]], message: Message, count: int, gap_s: float
) -> None:
    for _ in range(count):
        await publish(message)
        await asyncio.sleep(gap_s)


async def measure(args: argparse.Namespace) -> dict[str, float]:
    """Median CPU microseconds per message, each way."""
    redis = Redis.from_url(args.redis_url, socket_timeout=5.0)
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

    async def one_round(name: str) -> float:
        async def work() -> None:
            senders = (
                sender(ways[name], message, args.operations, args.gap_ms / 1000)
                for _ in range(args.concurrency)
            )
            await asyncio.gather(*senders)
            await bus.close()  # sends what is queued

        return await cpu_us_per_op(work(), args.operations * args.concurrency)

    try:
        return await alternate(list(ways), one_round, args.rounds)
    finally:
        await redis.delete(STREAM)
        await redis.aclose()


def main() -> None:
    args = arguments(__doc__ or "", "messages", "per sender per round")
    report(asyncio.run(measure(args)), "message", args.rounds)


if __name__ == "__main__":
    main()
