"""CPU per rate-limiter admission on Redis: each admission its own EVALSHA (as before the limiter's
sender task) against the limiter as it sends them (a lone one from its request, those queued beside it in
one pipelined round trip), at ``--concurrency`` requests:
``python -m experiments.admission_cpu --concurrency 16``.

Each request admits a key and releases its slot ``--admissions`` times, pausing ``--gap-ms`` between
(0: only yielding to the loop, as a request's other work would). The process CPU of a round over every
admission made is the figure, the two ways alternating round by round, medians over ``--rounds``. The
old way is emulated in the same process by sending each call straight through the script object, so
both ways run the same code otherwise; with one request and a gap there is nothing to batch and the
limiter sends each admission from its own request, as before.

experiments/ is not packaged and may import app/.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from typing import Any

from redis.asyncio import Redis

from app.ratelimit.limits import AuthFailureLimits, KeyLimits
from app.ratelimit.shared import RedisLimiter
from experiments.alternating_cpu import alternate, arguments, cpu_us_per_op, report

LIMITS = KeyLimits(rate=1_000_000.0, burst=1_000_000, concurrency=1_000_000)
ONE_EACH = "one EVALSHA each"
AS_SENT = "as the limiter sends (alone, or pipelined)"


async def request(limiter: RedisLimiter, count: int, gap_s: float) -> None:
    for _ in range(count):
        await limiter.release(await limiter.admit("k", LIMITS))
        await asyncio.sleep(gap_s)


async def measure(options: argparse.Namespace) -> dict[str, float]:
    """Median CPU microseconds per admission, each way."""
    redis = Redis.from_url(options.redis_url, socket_timeout=5.0)
    prefix = f"experiments:admission-cpu:{uuid.uuid4().hex[:8]}"

    async def one_round(name: str) -> float:
        limiter = RedisLimiter(
            redis, prefix, AuthFailureLimits(rate=1.0, burst=10), slot_lease_s=60.0, release_delay_s=0.01
        )
        if name == ONE_EACH:
            script: Any = limiter._script

            async def direct(keys: list[str], args: list[str | int]) -> Any:
                return await script(keys=keys, args=args)

            limiter._call = direct  # type: ignore[method-assign]
        await limiter.admit("k", LIMITS)  # loads the script outside the count
        requests = (
            request(limiter, options.operations, options.gap_ms / 1000) for _ in range(options.concurrency)
        )
        try:
            return await cpu_us_per_op(asyncio.gather(*requests), options.operations * options.concurrency)
        finally:
            await limiter.close()

    try:
        return await alternate([ONE_EACH, AS_SENT], one_round, options.rounds)
    finally:
        keys = [k async for k in redis.scan_iter(f"{prefix}:*")]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()


def main() -> None:
    args = arguments(__doc__ or "", "admissions", "per request per round")
    report(asyncio.run(measure(args)), "admission", args.rounds)


if __name__ == "__main__":
    main()
