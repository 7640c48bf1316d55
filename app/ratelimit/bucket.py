"""Token bucket arithmetic, pure: the caller passes the time, so tests use any clock.

A bucket holds up to ``burst`` tokens and gains ``rate`` tokens per second; a request takes one token
and is refused while fewer than one is left. At an offered load above ``rate`` the bucket empties after
its first ``burst`` requests and from then on admits ``rate`` requests per second. The Redis limiter's
Lua script (app/ratelimit/shared.py) does the same arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bucket:
    """A bucket's state: ``tokens`` left at time ``at`` (seconds, the caller's clock)."""

    tokens: float
    at: float


@dataclass(frozen=True)
class Take:
    """The outcome of one request: admitted or not, the bucket after it, and when it could be admitted."""

    admitted: bool
    bucket: Bucket
    retry_after_s: float


def refill(bucket: Bucket | None, now: float, rate: float, burst: float) -> Bucket:
    """The bucket at ``now``: ``min(burst, tokens + rate * max(0, now - at))``; a bucket never seen
    starts full. A clock that went backwards adds nothing."""
    if bucket is None:
        return Bucket(float(burst), now)
    return Bucket(min(float(burst), bucket.tokens + rate * max(0.0, now - bucket.at)), max(now, bucket.at))


def wait_s(bucket: Bucket, rate: float) -> float:
    """Seconds until the (refilled) bucket holds one token: ``max(0, (1 - tokens) / rate)``."""
    return max(0.0, (1.0 - bucket.tokens) / rate)


def take(bucket: Bucket | None, now: float, rate: float, burst: float) -> Take:
    """One request at ``now``: admitted with one token taken when the refilled bucket holds at least one,
    else refused with the bucket unchanged and the wait until it will."""
    current = refill(bucket, now, rate, burst)
    if current.tokens >= 1.0:
        return Take(True, Bucket(current.tokens - 1.0, current.at), 0.0)
    return Take(False, current, wait_s(current, rate))
