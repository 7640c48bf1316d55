"""Both limiters (in process, and the Lua script on the real Redis) on the same hand-computed cases,
with an injected clock: a key's bucket and in-flight slots, and a client address's failed-auth bucket."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager

import pytest
from redis.asyncio import Redis

from app.ratelimit.limits import AuthFailureLimits, KeyLimits, RateLimiter
from app.ratelimit.local import InProcessLimiter
from app.ratelimit.shared import RedisLimiter
from app.routing.errors import RateLimited
from tests.conftest import REDIS_URL, unique

AUTH = AuthFailureLimits(rate=0.5, burst=3)  # 3 failures, one forgiven every 2 s
LIMITS = KeyLimits(rate=2.0, burst=3, concurrency=2)


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def redis_limiter_on(
    clock: Clock, release_delay_s: float
) -> AsyncIterator[tuple[RedisLimiter, Redis, str]]:
    """A Redis limiter on a fresh key prefix, its client and the prefix; closed, and its keys deleted,
    afterwards."""
    redis = Redis.from_url(REDIS_URL)
    prefix = unique("bg:test-ratelimit")
    limiter = RedisLimiter(
        redis, prefix, AUTH, slot_lease_s=60.0, release_delay_s=release_delay_s, clock=clock
    )
    try:
        yield limiter, redis, prefix
    finally:
        await limiter.close()
        keys = [k async for k in redis.scan_iter(f"{prefix}:*")]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()


@pytest.fixture(params=["in-process", "redis"])
async def limiter_and_clock(request: pytest.FixtureRequest) -> AsyncIterator[tuple[RateLimiter, Clock]]:
    clock = Clock()
    if request.param == "in-process":
        yield InProcessLimiter(AUTH, clock=clock), clock
        return
    async with redis_limiter_on(clock, release_delay_s=0.0) as (limiter, _, _):
        yield limiter, clock


async def refusal(pending: Awaitable[object]) -> RateLimited:
    with pytest.raises(RateLimited) as caught:
        await pending
    return caught.value


async def test_the_burst_then_one_request_per_token(limiter_and_clock: tuple[RateLimiter, Clock]) -> None:
    limiter, clock = limiter_and_clock
    for _ in range(3):
        await limiter.release(await limiter.admit("k", LIMITS))
    refused = await refusal(limiter.admit("k", LIMITS))
    assert refused.retry_after_s == pytest.approx(0.5, abs=1e-6)  # (1 - 0) / 2
    assert "2 requests per second, bursts of 3" in refused.message
    clock.now += 0.25  # half a token
    assert (await refusal(limiter.admit("k", LIMITS))).retry_after_s == pytest.approx(0.25, abs=1e-6)
    clock.now += 0.25
    await limiter.release(await limiter.admit("k", LIMITS))
    await refusal(limiter.admit("k", LIMITS))
    # Another key has its own bucket.
    await limiter.release(await limiter.admit("other", LIMITS))


async def test_in_flight_slots(limiter_and_clock: tuple[RateLimiter, Clock]) -> None:
    limiter, _clock = limiter_and_clock
    roomy = KeyLimits(rate=100.0, burst=100, concurrency=2)
    first = await limiter.admit("k", roomy)
    await limiter.admit("k", roomy)
    refused = await refusal(limiter.admit("k", roomy))
    assert refused.retry_after_s == 1.0 and "at most 2 at once" in refused.message
    await limiter.release(first)
    third = await limiter.admit("k", roomy)  # the released slot is free again
    await refusal(limiter.admit("k", roomy))
    await limiter.release(third)


async def test_a_refusal_takes_no_slot_and_no_token(limiter_and_clock: tuple[RateLimiter, Clock]) -> None:
    limiter, clock = limiter_and_clock
    one = KeyLimits(rate=1.0, burst=2, concurrency=1)
    held = await limiter.admit("k", one)
    await refusal(limiter.admit("k", one))  # no slot: the bucket keeps its 1 token
    await limiter.release(held)
    await limiter.release(await limiter.admit("k", one))  # that token
    await refusal(limiter.admit("k", one))  # bucket empty: no slot taken either
    clock.now += 1.0
    await limiter.release(await limiter.admit("k", one))


async def test_failed_authentications_per_address(limiter_and_clock: tuple[RateLimiter, Clock]) -> None:
    limiter, clock = limiter_and_clock
    for _ in range(3):
        await limiter.check_address("10.0.0.1")
        await limiter.count_failure("10.0.0.1")
    refused = await refusal(limiter.check_address("10.0.0.1"))
    assert refused.retry_after_s == pytest.approx(2.0, abs=1e-6)  # (1 - 0) / 0.5
    await limiter.check_address("10.0.0.2")  # another address is not affected
    clock.now += 1.0
    assert (await refusal(limiter.check_address("10.0.0.1"))).retry_after_s == pytest.approx(1.0, abs=1e-6)
    clock.now += 1.0
    await limiter.check_address("10.0.0.1")  # one failure forgiven
    await limiter.count_failure("10.0.0.1")
    await refusal(limiter.check_address("10.0.0.1"))


async def test_admit_from_checks_the_address_first_and_then_admits_the_key(
    limiter_and_clock: tuple[RateLimiter, Clock],
) -> None:
    """``admit_from`` is ``check_address`` then ``admit`` in one step: an address over its failed-auth
    limit is refused with the address's wait and takes neither a token nor a slot of the key."""
    limiter, clock = limiter_and_clock
    one = KeyLimits(rate=1.0, burst=2, concurrency=1)
    await limiter.release(await limiter.admit_from("10.0.0.1", "k", one))  # 1 of the key's 2 tokens
    for _ in range(3):
        await limiter.count_failure("10.0.0.1")
    refused = await refusal(limiter.admit_from("10.0.0.1", "k", one))
    assert refused.retry_after_s == pytest.approx(2.0, abs=1e-6)  # the address's: (1 - 0) / 0.5
    assert refused.message.startswith("too many failed authentications from this address")
    held = await limiter.admit_from("10.0.0.2", "k", one)  # the key's last token and its one slot
    slot_refusal = await refusal(limiter.admit_from("10.0.0.2", "k", one))
    assert "at most 1 at once" in slot_refusal.message
    await limiter.release(held)
    assert (await refusal(limiter.admit_from("10.0.0.2", "k", one))).retry_after_s == pytest.approx(
        1.0, abs=1e-6
    )  # the key's bucket is empty: (1 - 0) / 1
    clock.now += 2.0  # a failure forgiven, and the key's two tokens back
    await limiter.release(await limiter.admit_from("10.0.0.1", "k", one))


async def test_a_redis_slot_never_released_frees_itself_after_its_lease() -> None:
    redis = Redis.from_url(REDIS_URL)
    clock = Clock()
    limiter = RedisLimiter(
        redis, unique("bg:test-ratelimit"), AUTH, slot_lease_s=60.0, release_delay_s=0.0, clock=clock
    )
    one = KeyLimits(rate=100.0, burst=100, concurrency=1)
    await limiter.admit("k", one)  # its process "crashes": never released
    clock.now += 59.0
    await refusal(limiter.admit("k", one))
    clock.now += 1.5
    await limiter.release(await limiter.admit("k", one))
    await redis.aclose()


async def slots_in_redis(redis: Redis, prefix: str, key: str) -> int:
    return int(await redis.zcard(f"{prefix}:slots:{key}"))


async def test_a_redis_release_rides_on_the_next_admission_or_a_later_batch() -> None:
    """A release sends nothing by itself: this process's next admission of the key removes the slot in
    its own script (so it is free here at once), and a release no admission carries is sent in a batch
    ``release_delay_s`` later, or by ``close``; another process sees it held until then."""
    redis = Redis.from_url(REDIS_URL)
    prefix = unique("bg:test-ratelimit")
    one = KeyLimits(rate=1000.0, burst=1000, concurrency=1)
    here = RedisLimiter(redis, prefix, AUTH, slot_lease_s=60.0, release_delay_s=60.0)
    there = RedisLimiter(redis, prefix, AUTH, slot_lease_s=60.0, release_delay_s=60.0)
    try:
        held = await here.admit("k", one)
        await here.release(held)
        assert await slots_in_redis(redis, prefix, "k") == 1  # queued, not sent
        await refusal(there.admit("k", one))  # another process still counts it
        again = await here.admit("k", one)  # this one carries the release: admitted
        assert await slots_in_redis(redis, prefix, "k") == 1  # the new slot only
        await here.release(again)
        await here.close()  # sends what is queued
        assert await slots_in_redis(redis, prefix, "k") == 0
        await there.release(await there.admit("k", one))

        soon = RedisLimiter(redis, prefix, AUTH, slot_lease_s=60.0, release_delay_s=0.05)
        await there.close()
        await soon.release(await soon.admit("j", one))
        await soon.release(await soon.admit("k", one))
        assert await slots_in_redis(redis, prefix, "j") == await slots_in_redis(redis, prefix, "k") == 1
        await asyncio.sleep(0.3)  # one batch, after the delay
        assert await slots_in_redis(redis, prefix, "j") == await slots_in_redis(redis, prefix, "k") == 0
        await soon.close()
    finally:
        await here.close()
        await there.close()
        keys = [k async for k in redis.scan_iter(f"{prefix}:*")]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()


async def test_a_redis_release_being_sent_is_never_counted_against_the_next_admission() -> None:
    """With no delay the batch leaves at once; an admission of the same key made while it is on its way
    removes the same slots in its own script, so whichever reaches Redis first, a released slot is free
    for this process's next request at every interleaving, and nothing is left held at the end."""
    redis = Redis.from_url(REDIS_URL)
    prefix = unique("bg:test-ratelimit")
    one = KeyLimits(rate=10_000.0, burst=10_000, concurrency=1)
    limiter = RedisLimiter(redis, prefix, AUTH, slot_lease_s=60.0, release_delay_s=0.0)
    try:
        for turns in [0, 1, 2, 3, 5, 8, 13] * 5:
            held = await limiter.admit("k", one)
            await limiter.release(held)
            for _ in range(turns):  # let the batch start, reach Redis, or come back
                await asyncio.sleep(0)
            await limiter.release(await limiter.admit("k", one))
        await limiter.close()
        assert await slots_in_redis(redis, prefix, "k") == 0
    finally:
        keys = [k async for k in redis.scan_iter(f"{prefix}:*")]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()


async def test_redis_unreachable_admits_keys_and_locks_out_addresses_in_process() -> None:
    """The key limits fail open: with Redis down every request is admitted (docs/security.md says why);
    the failed-auth limit does not: this process counts the failures itself."""
    redis = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    limiter = RedisLimiter(redis, "bg:unreachable", AUTH, slot_lease_s=60.0, release_delay_s=0.0)
    tight = KeyLimits(rate=0.001, burst=1, concurrency=1)
    for _ in range(3):
        await limiter.release(await limiter.admit("k", tight))
        await limiter.check_address("10.0.0.1")
        await limiter.count_failure("10.0.0.1")
    with pytest.raises(RateLimited):
        await limiter.check_address("10.0.0.1")
    with pytest.raises(RateLimited):
        await limiter.admit_from("10.0.0.1", "k", tight)
    await limiter.check_address("10.0.0.2")
    await limiter.close()  # the releases Redis never took are dropped (their lease frees them)
    await redis.aclose()


async def test_in_process_the_least_recently_failing_address_is_forgotten_first() -> None:
    """Past ``max_addresses`` (BANDITGATE_AUTH_FAILURE_MAX_ADDRESSES) the least recently failing address
    is forgotten, whether or not its bucket has refilled (the limiter's memory is bounded)."""
    limiter = InProcessLimiter(AUTH, clock=Clock(), max_addresses=2)
    for address in ("a", "a", "a", "b", "b", "b"):
        await limiter.count_failure(address)
    await limiter.count_failure("a")  # a fails again: now b is the least recent
    await limiter.count_failure("c")  # a third address: b is forgotten
    await limiter.check_address("b")  # no longer locked out
    await refusal(limiter.check_address("a"))
    await limiter.check_address("c")  # one failure of three


@pytest.fixture
async def redis_limiter() -> AsyncIterator[tuple[RedisLimiter, Redis, str, Clock]]:
    """A Redis limiter with an injected clock that stands still, and a release delay no test reaches."""
    clock = Clock()
    async with redis_limiter_on(clock, release_delay_s=60.0) as (limiter, redis, prefix):
        yield limiter, redis, prefix, clock


async def outcomes(limiter: RedisLimiter, limits: KeyLimits, n: int) -> list[RateLimited | None]:
    """``n`` admissions of key "k" made at once: None for each admitted, the refusal otherwise."""

    async def one() -> RateLimited | None:
        try:
            await limiter.admit("k", limits)
        except RateLimited as refused:
            return refused
        return None

    return await asyncio.gather(*(one() for _ in range(n)))


async def test_concurrent_redis_admissions_share_round_trips_and_keep_the_limits(
    redis_limiter: tuple[RedisLimiter, Redis, str, Clock],
) -> None:
    """Admissions waiting at once leave in one pipelined round trip; each script still runs alone, so
    exactly the slots and tokens there are get admitted."""
    limiter, redis, prefix, _ = redis_limiter
    results = await outcomes(limiter, KeyLimits(rate=1000.0, burst=1000, concurrency=10), 24)
    assert results.count(None) == 10
    assert all(r is not None and "in flight" in str(r) for r in results if r is not None)
    assert await slots_in_redis(redis, prefix, "k") == 10
    assert 1 <= limiter.sends < 24

    await redis.delete(f"{prefix}:slots:k", f"{prefix}:bucket:k")
    sends = limiter.sends
    results = await outcomes(limiter, KeyLimits(rate=2.0, burst=5, concurrency=100), 12)
    assert results.count(None) == 5  # the clock stands still: the burst and not one token more
    waits = sorted(r.retry_after_s for r in results if r is not None)
    assert waits == pytest.approx([0.5] * 7, abs=1e-6)  # (1 - 0) / 2 each
    assert limiter.sends - sends < 12


async def test_a_pipelined_admission_whose_script_is_not_loaded_is_sent_again_alone(
    redis_limiter: tuple[RedisLimiter, Redis, str, Clock],
) -> None:
    """As after a restart of Redis: the pipeline's EVALSHAs fail with NOSCRIPT, and each is sent again
    alone, which loads the script; every admission is answered as if nothing had happened."""
    limiter, redis, prefix, _ = redis_limiter
    limiter._script.sha = "0" * 40  # a script Redis does not hold
    results = await outcomes(limiter, KeyLimits(rate=1000.0, burst=1000, concurrency=6), 8)
    assert results.count(None) == 6
    assert await slots_in_redis(redis, prefix, "k") == 6
    assert limiter.sends < 8  # so some went pipelined, and were refused NOSCRIPT there
    assert limiter._script.sha != "0" * 40  # loaded by the first call sent alone
