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
import statistics
import time
import uuid
from typing import Any

from redis.asyncio import Redis

from app.ratelimit.limits import AuthFailureLimits, KeyLimits
from app.ratelimit.shared import RedisLimiter

LIMITS = KeyLimits(rate=1_000_000.0, burst=1_000_000, concurrency=1_000_000)


async def request(limiter: RedisLimiter, count: int, gap_s: float) -> None:
    for _ in range(count):
        await limiter.release(await limiter.admit("k", LIMITS))
        await asyncio.sleep(gap_s)


async def measure(
    redis_url: str, concurrency: int, admissions: int, gap_s: float, rounds: int
) -> dict[str, float]:
    """Median CPU microseconds per admission, each way."""
    redis = Redis.from_url(redis_url, socket_timeout=5.0)
    prefix = f"experiments:admission-cpu:{uuid.uuid4().hex[:8]}"
    figures: dict[str, list[float]] = {
        "one EVALSHA each": [],
        "as the limiter sends (alone, or pipelined)": [],
    }
    try:
        for _ in range(rounds):
            for name in figures:
                limiter = RedisLimiter(
                    redis,
                    prefix,
                    AuthFailureLimits(rate=1.0, burst=10),
                    slot_lease_s=60.0,
                    release_delay_s=0.01,
                )
                if name == "one EVALSHA each":
                    script: Any = limiter._script

                    async def direct(keys: list[str], args: list[str | int], script: Any = script) -> Any:
                        return await script(keys=keys, args=args)

                    limiter._call = direct  # type: ignore[method-assign]
                await limiter.admit("k", LIMITS)  # loads the script outside the count
                start = time.process_time()
                await asyncio.gather(*(request(limiter, admissions, gap_s) for _ in range(concurrency)))
                figures[name].append((time.process_time() - start) / (admissions * concurrency) * 1e6)
                await limiter.close()
    finally:
        keys = [k async for k in redis.scan_iter(f"{prefix}:*")]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()
    return {name: statistics.median(values) for name, values in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/5")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--admissions", type=int, default=200, help="per request per round")
    parser.add_argument("--gap-ms", type=float, default=0.0)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    figures = asyncio.run(
        measure(args.redis_url, args.concurrency, args.admissions, args.gap_ms / 1000, args.rounds)
    )
    for name, micros in figures.items():
        print(f"{name}: {micros:.1f} us of CPU per admission (median of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
