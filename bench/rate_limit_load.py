"""``bench rate-limit``: does one tenant's rate limit hold under load, and leave another tenant alone?

Against a running gateway (``--url``, admin key from ``--admin-key`` or ``BANDITGATE_ADMIN_KEY``), through
its admin API: one backend (never called) and two tenants, each with a key and a default router over it.
The *hot* tenant's limit is set to ``--limit`` requests per second with bursts of ``--burst``, and it is
offered ``--factor`` times that rate for ``--seconds`` seconds of ``GET /v1/models``; at the same time the
*cold* tenant (the server's default limits) sends ``--cold-rate`` requests per second of ``POST /route``.
Before that, the cold tenant runs alone for as long at the same rate: its latency alone is the baseline
its latency beside the hot tenant is read against. Both are open loop: request i is sent at i / rate
seconds whether or not earlier ones were answered.

The limiter runs in the authentication dependency, before any endpoint's work, so it admits the same
requests whatever the endpoint; the hot tenant uses the cheapest one so that the gateway keeps up with
the offered load even on a small shared machine. Were the gateway to fall behind, the requests sent in
4 s would reach the limiter over a longer time and earn that time's tokens.

Reported: the hot tenant's accepted rate, (n - 1) / (last - first) over the admitted requests answered
``--warmup`` seconds or more after the run's first answer (its burst is spent by then), timed by when
each answer came back (the limiter's decision, plus a small and steady processing time); the same by
count, (admitted - burst) / (last answer - first answer); its statuses and latency; the cold tenant's
statuses and latency p50/p99, alone and beside the hot tenant.

    banditgate bench rate-limit --url http://127.0.0.1:8000 --limit 20 --seconds 4

bench/ never imports app/: the gateway is reached over HTTP only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import httpx

PROMPT = {"prompt": "What is the capital of France?"}


@dataclass(frozen=True)
class Sent:
    offset_s: float  # when it was sent, from the start of the run
    done_s: float  # when its answer came back, from the start of the run
    status: int

    @property
    def latency_s(self) -> float:
        return self.done_s - self.offset_s


@dataclass(frozen=True)
class LoadResult:
    limit: float
    offered_rate: float
    seconds: float
    warmup_s: float
    hot_statuses: dict[int, int]
    hot_accepted_rate: float  # admitted per second once the burst is spent, by when the answers came back
    hot_accepted_rate_by_count: float  # (admitted - burst) / (last answer - first answer)
    hot_p50_ms: float
    hot_p99_ms: float
    cold_statuses: dict[int, int]
    cold_p50_ms: float
    cold_p99_ms: float
    cold_alone_statuses: dict[int, int]
    cold_alone_p50_ms: float
    cold_alone_p99_ms: float

    def summary(self) -> str:
        return (
            f"hot tenant: limit {self.limit:g}/s, offered {self.offered_rate:g}/s for {self.seconds:g} s: "
            f"accepted {self.hot_accepted_rate:.2f}/s after the first {self.warmup_s:g} s "
            f"({self.hot_accepted_rate / self.limit - 1:+.1%} of the limit); by count "
            f"{self.hot_accepted_rate_by_count:.2f}/s ({self.hot_accepted_rate_by_count / self.limit - 1:+.1%}); "
            f"statuses {self.hot_statuses}, "
            f"latency p50 {self.hot_p50_ms:.1f} ms, p99 {self.hot_p99_ms:.1f} ms\n"
            f"cold tenant beside it: statuses {self.cold_statuses}, latency p50 {self.cold_p50_ms:.1f} ms, "
            f"p99 {self.cold_p99_ms:.1f} ms; alone before: statuses {self.cold_alone_statuses}, "
            f"p50 {self.cold_alone_p50_ms:.1f} ms, p99 {self.cold_alone_p99_ms:.1f} ms"
        )


async def provision(client: httpx.AsyncClient, admin_key: str) -> tuple[str, str, str]:
    """A backend and two tenants with a key and a default router each: (hot tenant, hot key, cold key)."""
    admin = {"Authorization": f"Bearer {admin_key}"}
    tag = uuid.uuid4().hex[:8]
    arm = f"ratelimit-arm-{tag}"
    backend = {"name": arm, "base_url": "http://127.0.0.1:9/v1"}
    (await client.post("/admin/backends", json=backend, headers=admin)).raise_for_status()
    keys = []
    for role in ("hot", "cold"):
        tenant = f"ratelimit-{role}-{tag}"
        (await client.post("/admin/tenants", json={"name": tenant}, headers=admin)).raise_for_status()
        issued = await client.post(f"/admin/tenants/{tenant}/keys", json={}, headers=admin)
        keys.append(issued.raise_for_status().json()["key"])
        router = {"name": "main", "policy": "linucb", "arms": [arm], "is_default": True}
        (await client.post(f"/admin/tenants/{tenant}/routers", json=router, headers=admin)).raise_for_status()
    return f"ratelimit-hot-{tag}", keys[0], keys[1]


async def offer(
    client: httpx.AsyncClient, request: Callable[[], httpx.Request], rate: float, seconds: float, start: float
) -> list[Sent]:
    """``rate`` requests per second made by ``request`` for ``seconds``, open loop, from ``start``
    (``time.monotonic``)."""

    async def send() -> Sent:
        sent = time.monotonic()
        response = await client.send(request())
        return Sent(sent - start, time.monotonic() - start, response.status_code)

    tasks = []
    for i in range(round(rate * seconds)):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(send()))
    return list(await asyncio.gather(*tasks))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def accepted_rate(hot: list[Sent], warmup_s: float) -> float:
    """(n - 1) / (last - first) over the admitted answers that came back ``warmup_s`` or more after the
    first answer: the spacing of admissions once the burst is spent."""
    first = min(s.done_s for s in hot)
    steady = sorted(s.done_s for s in hot if s.status == 200 and s.done_s >= first + warmup_s)
    return (len(steady) - 1) / (steady[-1] - steady[0])


def accepted_rate_by_count(hot: list[Sent], burst: int) -> float:
    """(admitted - burst) / (last answer - first answer): the run starts with a full bucket, and the
    answers span the time the limiter saw the load (longer than the run when the gateway fell behind)."""
    admitted = sum(s.status == 200 for s in hot)
    return (admitted - burst) / (max(s.done_s for s in hot) - min(s.done_s for s in hot))


async def run_load(
    url: str,
    admin_key: str,
    limit: float,
    burst: int,
    factor: float = 3.0,
    seconds: float = 4.0,
    warmup_s: float = 1.0,
    cold_rate: float = 5.0,
) -> LoadResult:
    """Provision, set the hot tenant's limit, run both loads at once, and count."""
    assert seconds > warmup_s >= 0, "no steady window: --warmup must be shorter than --seconds"
    limits = httpx.Limits(max_connections=512, max_keepalive_connections=512)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
        hot_tenant, hot_key, cold_key = await provision(client, admin_key)
        body = {"rate_limit_rps": limit, "rate_limit_burst": burst}
        admin = {"Authorization": f"Bearer {admin_key}"}
        (await client.put(f"/admin/tenants/{hot_tenant}/limits", json=body, headers=admin)).raise_for_status()

        def hot_models() -> httpx.Request:
            return client.build_request("GET", "/v1/models", headers={"Authorization": f"Bearer {hot_key}"})

        def cold_route() -> httpx.Request:
            return client.build_request(
                "POST", "/route", json=PROMPT, headers={"Authorization": f"Bearer {cold_key}"}
            )

        # One request each first, so that connection set-up and first-use costs are outside the run.
        for request in (hot_models, cold_route):
            (await client.send(request())).raise_for_status()
        alone = await offer(client, cold_route, cold_rate, seconds, time.monotonic() + 0.05)
        await asyncio.sleep(burst / limit)  # the hot bucket refills to its burst
        start = time.monotonic() + 0.05
        hot, cold = await asyncio.gather(
            offer(client, hot_models, limit * factor, seconds, start),
            offer(client, cold_route, cold_rate, seconds, start),
        )
    hot_ms = [s.latency_s * 1000 for s in hot]
    cold_ms = [s.latency_s * 1000 for s in cold]
    alone_ms = [s.latency_s * 1000 for s in alone]
    return LoadResult(
        limit=limit,
        offered_rate=limit * factor,
        seconds=seconds,
        warmup_s=warmup_s,
        hot_statuses=dict(Counter(s.status for s in hot)),
        hot_accepted_rate=accepted_rate(hot, warmup_s),
        hot_accepted_rate_by_count=accepted_rate_by_count(hot, burst),
        hot_p50_ms=statistics.median(hot_ms),
        hot_p99_ms=percentile(hot_ms, 0.99),
        cold_statuses=dict(Counter(s.status for s in cold)),
        cold_p50_ms=statistics.median(cold_ms),
        cold_p99_ms=percentile(cold_ms, 0.99),
        cold_alone_statuses=dict(Counter(s.status for s in alone)),
        cold_alone_p50_ms=statistics.median(alone_ms),
        cold_alone_p99_ms=percentile(alone_ms, 0.99),
    )


def handle(args: argparse.Namespace) -> int:
    admin_key = args.admin_key or os.environ.get("BANDITGATE_ADMIN_KEY")
    if not admin_key:
        raise ValueError("the admin key: --admin-key or BANDITGATE_ADMIN_KEY")
    result = asyncio.run(
        run_load(
            args.url,
            admin_key,
            args.limit,
            args.burst,
            args.factor,
            args.seconds,
            args.warmup,
            args.cold_rate,
        )
    )
    print(result.summary())
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(asdict(result), handle, indent=2)
    return 0


def add_subcommand(subparsers: Any) -> None:
    p = subparsers.add_parser("rate-limit", help="a tenant's rate limit under load, another tenant beside it")
    p.add_argument("--url", required=True, help="base URL of a running gateway")
    p.add_argument("--admin-key", default=None, help="default: BANDITGATE_ADMIN_KEY")
    p.add_argument("--limit", type=float, default=20.0, help="the hot tenant's requests per second")
    p.add_argument("--burst", type=int, default=10, help="the hot tenant's burst")
    p.add_argument("--factor", type=float, default=3.0, help="offered load, as a multiple of --limit")
    p.add_argument("--seconds", type=float, default=4.0, help="length of the run")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds left out of the steady window")
    p.add_argument("--cold-rate", type=float, default=5.0, help="the other tenant's requests per second")
    p.add_argument("--json", default=None, help="write the result here")
    p.set_defaults(handler=handle)
