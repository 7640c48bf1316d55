"""The Redis limiter: one bucket per key and per address in Redis, so every gateway process shares the
budget. Each check is one Lua script, atomic in Redis, timed by Redis's own clock (``TIME``), so the
processes' clocks never disagree.

Keys, under ``rate_limit_prefix``: ``<p>:bucket:<key>`` (a hash of ``tokens`` and ``at``, expiring once
it would be full again), ``<p>:slots:<key>`` (a sorted set of in-flight slots scored by their expiry:
a slot a crashed process never released frees itself after ``rate_limit_slot_lease_s``), and
``<p>:auth:<address>`` (the failed-auth bucket).

A release costs no round trip of its own on the request's path: the slot is given back with this
process's next admission of the same key (its script removes the slot before counting, so this process
never sees its own released slot as held), or, when no admission comes first, in one pipelined batch
sent ``release_delay_s`` after the release. Other processes see a released slot as held for at most that
delay (plus a round trip) longer.

A lone admission is one EVALSHA sent by its own request. Admissions made while one is out are queued for
one sender task per process, which sends all that queued in one pipelined round trip (each script still
atomic on its own), so concurrent requests share it as the bus's publisher shares an XADD (app/bus.py).

When Redis cannot be reached the key limits admit (they fail open, with one warning per outage): the
rate limits protect capacity, and refusing every request while Redis is down would be the outage they
guard against. The failed-authentication limit does not fail open: while Redis is down each process
counts wrong keys in its own memory (an ``InProcessLimiter``), so a guessing address is locked out per
process (with N replicas it gets up to N times ``auth_failure_limit`` before every one refuses it).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError, RedisError

from app.ratelimit.limits import AuthFailureLimits, KeyLimits, Slot
from app.ratelimit.local import InProcessLimiter

log = logging.getLogger(__name__)

# KEYS: bucket, slots[, address]. ARGV: rate, burst, take (1 = take a token, 0 = only check), concurrency
# (0 = no slot), slot id, lease seconds, now (seconds; "" = Redis's TIME), the address bucket's rate and
# burst ("" without an address key), then the ids of released slots to remove first. With a third key,
# that failed-auth bucket is checked first (never taken from) and refuses with {-2, wait_us}. Returns
# {1, 0} admitted, {0, wait_us} refused by the bucket, {-1, 0} refused for want of a slot. The bucket
# arithmetic of app/ratelimit/bucket.py.
ADMIT_LUA = """
for i = 10, #ARGV do
  redis.call('ZREM', KEYS[2], ARGV[i])
end
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local take = tonumber(ARGV[3])
local concurrency = tonumber(ARGV[4])
local lease = tonumber(ARGV[6])
local now = tonumber(ARGV[7])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local function level(key, key_rate, key_burst)
  local state = redis.call('HMGET', key, 'tokens', 'at')
  local tokens = tonumber(state[1])
  local at = tonumber(state[2])
  if tokens == nil or at == nil then
    return key_burst, now
  end
  return math.min(key_burst, tokens + key_rate * math.max(0, now - at)), math.max(now, at)
end
if KEYS[3] then
  local address_rate = tonumber(ARGV[8])
  local address_tokens = level(KEYS[3], address_rate, tonumber(ARGV[9]))
  if address_tokens < 1 then
    return {-2, math.ceil((1 - address_tokens) / address_rate * 1000000)}
  end
end
if concurrency > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= concurrency then
    return {-1, 0}
  end
end
local tokens, at = level(KEYS[1], rate, burst)
if tokens < 1 then
  return {0, math.ceil((1 - tokens) / rate * 1000000)}
end
if take > 0 then
  tokens = tokens - 1
  redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'at', string.format('%.17g', at))
  redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
end
if concurrency > 0 then
  redis.call('ZADD', KEYS[2], now + lease, ARGV[5])
  redis.call('PEXPIRE', KEYS[2], math.ceil(lease * 1000))
end
return {1, 0}
"""

ADMITTED, REFUSED_RATE, REFUSED_SLOT, REFUSED_ADDRESS = 1, 0, -1, -2
Call = tuple[list[str], list[str | int], "asyncio.Future[list[int]]"]  # a script's keys, args, answer


class RedisLimiter:
    """Every limit, shared by the processes on one Redis. ``release_delay_s`` is
    ``rate_limit_release_delay_s``; ``clock`` replaces Redis's ``TIME`` (tests); ``max_addresses``
    bounds the in-process failed-auth limit used while Redis is down."""

    def __init__(
        self,
        redis: Redis,
        prefix: str,
        auth: AuthFailureLimits,
        slot_lease_s: float,
        *,
        release_delay_s: float,
        clock: Callable[[], float] | None = None,
        max_addresses: int = 10_000,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._auth = auth
        self._lease_s = slot_lease_s
        self._clock = clock
        self._script = redis.register_script(ADMIT_LUA)
        self._down = False
        self._local_auth = InProcessLimiter(auth, max_addresses=max_addresses)  # while Redis is down
        self._release_delay_s = release_delay_s
        self._unsent: dict[str, list[str]] = {}  # key -> ids of slots released here, not yet sent
        self._timer: asyncio.TimerHandle | None = None
        self._flush: asyncio.Task[None] | None = None
        self._calls: list[Call] = []
        self._sender: asyncio.Task[None] | None = None
        self._direct_out = False  # a lone request's own call is out
        self.sends = 0  # the scripts' round trips (each one call, or a pipeline of them)

    async def _run(
        self,
        keys: list[str],
        rate: float,
        burst: int,
        take: bool,
        slots: int,
        slot: str,
        address: str | None = None,
        released: list[str] | None = None,
    ) -> list[int]:
        now = "" if self._clock is None else repr(self._clock())
        args: list[str | int] = [repr(rate), burst, int(take), slots, slot, repr(self._lease_s), now, "", ""]
        if address is not None:
            keys = [*keys, self._key("auth", address)]
            args[7:9] = [repr(self._auth.rate), self._auth.burst]
        if released:
            args += released
        try:
            result = await self._call(keys, args)
        except RedisError as exc:
            if not self._down:
                log.warning("rate limiter: Redis unreachable, admitting without limits: %s", exc)
            self._down = True
            return [ADMITTED, 0]
        if self._down:
            log.warning("rate limiter: Redis reachable again")
            self._down = False
        return [int(x) for x in result]

    async def _call(self, keys: list[str], args: list[str | int]) -> list[int]:
        """The script's answer for (keys, args). With nothing else out, this request sends it itself
        (no task hop for a lone request); otherwise it is queued for the sender task, which sends every
        call queued beside it in one pipelined round trip (no MULTI: each script is atomic on its own,
        in queue order), so concurrent requests share it."""
        if not self._direct_out and not self._calls and (self._sender is None or self._sender.done()):
            self._direct_out = True
            self.sends += 1
            try:
                result: list[int] = await self._script(keys=keys, args=args)
                return result
            finally:
                self._direct_out = False
        future: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._calls.append((keys, args, future))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_calls(), name="rate-limiter-sender")
        return await future

    async def _send_calls(self) -> None:
        """Send the queued calls until none is left. A round trip that fails fails each of its calls
        with the error (the caller admits: fail open). A pipelined call that Redis refuses with
        NOSCRIPT (its script not loaded, after Redis restarted) is sent again alone, which loads the
        script; if that fails too, only that call fails."""
        while self._calls:
            batch, self._calls = self._calls, []
            self.sends += 1
            try:
                outcomes = await self._send(batch)
            except asyncio.CancelledError:  # the loop is shutting down: no call is left waiting
                for _, _, future in [*batch, *self._calls]:
                    future.cancel()
                self._calls = []
                raise
            except Exception as exc:
                outcomes = [exc] * len(batch)
            for (_, _, future), outcome in zip(batch, outcomes, strict=True):
                if future.done():  # its request was cancelled
                    continue
                if isinstance(outcome, Exception):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)

    async def _send(self, batch: list[Call]) -> list[Any]:
        """One round trip for ``batch`` (and one more per call refused NOSCRIPT): each call's answer, or
        the error Redis gave it."""
        if len(batch) == 1:
            keys, args, _ = batch[0]
            return [await self._script(keys=keys, args=args)]
        async with self._redis.pipeline(transaction=False) as pipe:
            for keys, args, _ in batch:
                pipe.evalsha(self._script.sha, len(keys), *keys, *args)
            outcomes: list[Any] = await pipe.execute(raise_on_error=False)
        for i, (keys, args, _) in enumerate(batch):
            if isinstance(outcomes[i], NoScriptError):  # no other error is retried: it ran once
                try:
                    outcomes[i] = await self._script(keys=keys, args=args)
                except Exception as exc:
                    outcomes[i] = exc
        return outcomes

    def _key(self, kind: str, name: str) -> str:
        return f"{self._prefix}:{kind}:{name}"

    async def admit(self, key: str, limits: KeyLimits) -> Slot:
        return await self._admit(key, limits, None)

    async def admit_from(self, address: str, key: str, limits: KeyLimits) -> Slot:
        return await self._admit(key, limits, address)

    async def _admit(self, key: str, limits: KeyLimits, address: str | None) -> Slot:
        slot = Slot(key, uuid.uuid4().hex)
        keys = [self._key("bucket", key), self._key("slots", key)]
        released = self._unsent.pop(key, None)
        code, wait_us = await self._run(
            keys, limits.rate, limits.burst, True, limits.concurrency, slot.token, address, released
        )
        if self._down and released:  # not removed: send them with the next batch
            self._unsent.setdefault(key, []).extend(released)
            self._schedule()
        if code == REFUSED_ADDRESS:
            raise self._auth.refusal(wait_us / 1e6)
        if self._down and address is not None:
            await self._local_auth.check_address(address)
        if code == REFUSED_SLOT:
            raise limits.over_concurrency()
        if code == REFUSED_RATE:
            raise limits.over_rate(wait_us / 1e6)
        return slot

    async def release(self, slot: Slot) -> None:
        """Queue the slot's removal (no round trip here): it rides on this process's next admission of
        the key, or on the batch sent ``release_delay_s`` from now, whichever comes first."""
        self._unsent.setdefault(slot.key, []).append(slot.token)
        self._schedule()

    def _schedule(self) -> None:
        if self._timer is None and self._flush is None:
            self._timer = asyncio.get_running_loop().call_later(self._release_delay_s, self._start_flush)

    def _start_flush(self) -> None:
        self._timer = None
        self._flush = asyncio.create_task(self._send_releases())

    async def _send_releases(self) -> None:
        """One pipelined round trip removing every queued slot (no MULTI: each ZREM stands alone); a
        batch Redis did not take is left to the slots' lease. The batch stays queued until Redis
        answers, so an admission made meanwhile removes its key's slots again in its own script (a
        ZREM of a removed slot is a no-op): whichever reaches Redis first, the admission never counts
        them as held."""
        batch = {key: list(tokens) for key, tokens in self._unsent.items()}
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for key, tokens in batch.items():
                    pipe.zrem(self._key("slots", key), *tokens)
                await pipe.execute()
        except RedisError as exc:  # the slots' lease frees them
            log.warning("rate limiter: could not release %d slots: %s", sum(map(len, batch.values())), exc)
        finally:
            for key, tokens in batch.items():
                sent = set(tokens)
                left = [token for token in self._unsent.get(key, []) if token not in sent]
                if left:
                    self._unsent[key] = left
                else:
                    self._unsent.pop(key, None)
            self._flush = None
            if self._unsent:
                self._schedule()

    async def close(self) -> None:
        """Answer the admissions under way, then send the releases still queued (at shutdown: else they
        would hold their slots until their lease ends)."""
        if self._sender is not None:
            await asyncio.wait({self._sender})
        while True:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._flush is not None:
                await asyncio.shield(self._flush)
            elif self._unsent:
                self._start_flush()
            else:
                return

    async def _auth_bucket(self, address: str, take: bool) -> list[int]:
        bucket = self._key("auth", address)
        keys = [bucket, bucket]  # no slots: the script never reads its second key
        return await self._run(keys, self._auth.rate, self._auth.burst, take, 0, "")

    async def check_address(self, address: str) -> None:
        code, wait_us = await self._auth_bucket(address, take=False)
        if self._down:
            await self._local_auth.check_address(address)
        elif code == REFUSED_RATE:
            raise self._auth.refusal(wait_us / 1e6)

    async def count_failure(self, address: str) -> None:
        await self._auth_bucket(address, take=True)
        if self._down:
            await self._local_auth.count_failure(address)
