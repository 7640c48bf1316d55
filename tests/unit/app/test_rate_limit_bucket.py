"""The token bucket's arithmetic (app/ratelimit/bucket.py) on hand-computed cases: rate 2 tokens/s,
burst 3, times chosen so every value is exact in binary floating point."""

from __future__ import annotations

import pytest

from app.api.errors import retry_after
from app.ratelimit.bucket import Bucket, Take, refill, take, wait_s

RATE, BURST = 2.0, 3


def test_a_new_bucket_starts_full_and_each_request_takes_one_token() -> None:
    first = take(None, 10.0, RATE, BURST)
    assert first == Take(True, Bucket(2.0, 10.0), 0.0)
    second = take(first.bucket, 10.0, RATE, BURST)
    third = take(second.bucket, 10.0, RATE, BURST)
    assert (second.bucket.tokens, third.bucket.tokens) == (1.0, 0.0)
    assert second.admitted and third.admitted


def test_an_empty_bucket_refuses_with_the_wait_until_one_token() -> None:
    empty = Bucket(0.0, 10.0)
    refused = take(empty, 10.0, RATE, BURST)
    assert not refused.admitted and refused.retry_after_s == 0.5  # (1 - 0) / 2
    assert refused.bucket == empty  # a refusal takes nothing
    later = take(empty, 10.25, RATE, BURST)  # 0 + 2 * 0.25 = 0.5 tokens
    assert not later.admitted and later.retry_after_s == 0.25 and later.bucket.tokens == 0.5
    admitted = take(empty, 10.5, RATE, BURST)  # 0 + 2 * 0.5 = 1 token
    assert admitted.admitted and admitted.bucket == Bucket(0.0, 10.5)


def test_refill_is_capped_at_the_burst_and_ignores_a_clock_that_went_back() -> None:
    assert refill(Bucket(0.5, 10.0), 100.0, RATE, BURST) == Bucket(3.0, 100.0)
    assert refill(Bucket(0.5, 10.0), 9.0, RATE, BURST) == Bucket(0.5, 10.0)
    assert refill(Bucket(0.5, 10.0), 10.125, RATE, BURST) == Bucket(0.75, 10.125)
    assert wait_s(Bucket(0.75, 10.125), RATE) == 0.125 and wait_s(Bucket(2.5, 0.0), RATE) == 0.0


def test_at_four_times_the_rate_it_admits_the_burst_then_the_rate() -> None:
    """Requests every 0.125 s (8/s) for 10 s against 2/s: t = 0, 0.125, 0.25 spend the burst (3, 2.25,
    1.5 tokens before each), t = 0.375 finds 0.75, and from t = 0.5 on one request in four (every
    0.5 s) finds exactly one token: 3 + 20 admitted of 81."""
    bucket: Bucket | None = None
    admitted = []
    for k in range(81):
        result = take(bucket, k * 0.125, RATE, BURST)
        bucket = result.bucket
        if result.admitted:
            admitted.append(k * 0.125)
    assert admitted == [0.0, 0.125, 0.25] + [0.5 * i for i in range(1, 21)]


@pytest.mark.parametrize(("seconds", "header"), [(0.001, "1"), (1.0, "1"), (1.01, "2"), (20.0, "20")])
def test_retry_after_is_whole_seconds_rounded_up(seconds: float, header: str) -> None:
    assert retry_after(seconds) == header
