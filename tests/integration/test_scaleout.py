"""Many gateway processes on one event log, with real processes: propagation time, a concurrent burst
folded exactly once everywhere, kill -9 and restart from snapshot plus replay, Redis restarted empty, and
a fault soak that runs all of those and the database's outages under one load.

These start real uvicorn processes (and a private redis-server for the Redis test), so they are marked
slow; the default pytest run (and CI) includes them.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import asyncpg
import httpx
import pytest

from tests.conftest import Stack, bearer, fresh_pg_database, unique
from tests.integration.processes import (
    Gateway,
    RedisServer,
    gateway_env,
    make_remote_tenancy,
    private_redis,
    router_state,
    run_snapshotter_once,
)
from tests.pg_outage import close_database, open_database, terminate_sessions

pytestmark = pytest.mark.slow


def events_folded(url: str, tenant: str) -> int:
    return int(router_state(url, tenant)["events_folded"])  # type: ignore[call-overload]


def wait_until(condition: Callable[[], bool], within_s: float, what: str) -> float:
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < within_s, f"{what} not within {within_s} s"
        time.sleep(0.02)
    return time.monotonic() - start


async def logged_event_ids(database_url: str, tenant: str) -> set[int]:
    conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        rows = await conn.fetch(
            "SELECT f.id FROM feedback f JOIN tenants t ON t.id = f.tenant_id WHERE t.name = $1", tenant
        )
    finally:
        await conn.close()
    return {int(r["id"]) for r in rows}


async def route_and_reward(client: httpx.AsyncClient, url: str, key: str, prompt: str, reward: float) -> int:
    decision = await client.post(f"{url}/route", json={"prompt": prompt}, headers=bearer(key))
    decision.raise_for_status()
    body = {"decision_id": decision.json()["decision_id"], "reward": reward}
    ack = await client.post(f"{url}/feedback", json=body, headers=bearer(key))
    assert ack.status_code == 202, ack.text
    return int(ack.json()["event_id"])


async def burst(
    urls: list[str],
    key: str,
    n: int,
    clients: int = 8,
    on_ack: Callable[[int, str], None] | None = None,
) -> tuple[list[int], int]:
    """``n`` route+feedback pairs from ``clients`` concurrent clients spread over ``urls``; every tenth
    feedback is also retried (a duplicate). Returns the acknowledged event ids and how many pairs failed
    (a replica that was killed)."""
    todo = list(range(n))
    acked: list[int] = []
    failed = 0

    async def client_loop(c: int) -> None:
        nonlocal failed
        url = urls[c % len(urls)]
        async with httpx.AsyncClient(timeout=10) as client:
            while todo:
                i = todo.pop()
                try:
                    event_ids = await one_pair(client, url, i)
                except (httpx.HTTPError, AssertionError):
                    failed += 1
                    continue
                acked.extend(event_ids)
                if on_ack is not None:
                    on_ack(len(acked), url)

    async def one_pair(client: httpx.AsyncClient, url: str, i: int) -> list[int]:
        event_ids = [await route_and_reward(client, url, key, f"prompt {i % 37} of {n}", i % 3 / 2)]
        if i % 10 == 0:  # a retried feedback must not be folded twice
            decision = await client.post(f"{url}/route", json={"prompt": "x"}, headers=bearer(key))
            body = {"decision_id": decision.json()["decision_id"], "reward": 0.5}
            first = await client.post(f"{url}/feedback", json=body, headers=bearer(key))
            again = await client.post(f"{url}/feedback", json=body, headers=bearer(key))
            assert again.json() == first.json() | {"duplicate": True}
            event_ids.append(int(first.json()["event_id"]))
        return event_ids

    await asyncio.gather(*(client_loop(c) for c in range(clients)))
    return acked, failed


def probe_scores(url: str, key: str) -> list[tuple[str | None, dict[str, object]]]:
    out = []
    for i in range(5):
        d = httpx.post(f"{url}/route", json={"prompt": f"prompt {i} of probe"}, headers=bearer(key)).json()
        out.append((d["model"], d["scores"]))
    return out


def assert_same_scores(
    a: list[tuple[str | None, dict[str, object]]], b: list[tuple[str | None, dict[str, object]]]
) -> None:
    assert [m for m, _ in a] == [m for m, _ in b]
    for (_, sa), (_, sb) in zip(a, b, strict=True):
        for arm, fields in sa.items():
            assert fields == pytest.approx(sb[arm], rel=1e-9, abs=1e-12)  # type: ignore[arg-type]


def test_feedback_to_one_replica_reaches_the_other_within_a_bounded_time(pg_stack: Stack) -> None:
    """Every event reaches B through the stream, not through the resync of a compaction: B's compaction
    runs every 300 s here, so an event folded within 10 s came over the bus. The bound is that property,
    not a latency target (a shared 2-core CI machine has stalled one fold for 3 s): the latency is
    printed, and measured in ``bench`` (docs/scaleout.md)."""
    env = gateway_env(pg_stack.database_url, unique("bg:test-stream"), BANDITGATE_COMPACT_INTERVAL_S="300")
    a, b = Gateway(env).start(), Gateway(env).start()
    try:
        t = make_remote_tenancy(a.url)
        events_folded(b.url, t.tenant)  # B loads the router
        delays = []
        with httpx.Client(timeout=10) as client:
            for i in range(20):
                d = client.post(f"{a.url}/route", json={"prompt": f"q{i}"}, headers=bearer(t.key)).json()
                sent = time.monotonic()
                body = {"decision_id": d["decision_id"], "reward": 1.0}
                assert client.post(f"{a.url}/feedback", json=body, headers=bearer(t.key)).status_code == 202
                delays.append(
                    time.monotonic()
                    - sent
                    + wait_until(lambda i=i: events_folded(b.url, t.tenant) == i + 1, 10, "B folds A's event")
                )
        print(
            f"\nA->B propagation (ack + fold on B, 20 events): median {statistics.median(delays) * 1000:.1f} ms, "
            f"max {max(delays) * 1000:.1f} ms"
        )
        assert max(delays) < 10.0
        assert statistics.median(delays) < 1.0
    finally:
        a.stop()
        b.stop()


def test_a_concurrent_burst_is_folded_exactly_once_by_every_replica(pg_stack: Stack) -> None:
    env = gateway_env(pg_stack.database_url, unique("bg:test-stream"))
    a, b = Gateway(env).start(), Gateway(env).start()
    try:
        t = make_remote_tenancy(a.url)
        n = 300
        started = time.monotonic()
        acked, failed = asyncio.run(burst([a.url, b.url], t.key, n))
        took = time.monotonic() - started
        assert failed == 0 and len(acked) == len(set(acked)) == n + n // 10
        total = len(acked)
        for url in (a.url, b.url):
            wait_until(lambda url=url: events_folded(url, t.tenant) == total, 10, "every event folded")
        time.sleep(0.5)  # nothing arrives late or twice
        assert events_folded(a.url, t.tenant) == events_folded(b.url, t.tenant) == total
        assert asyncio.run(logged_event_ids(pg_stack.database_url, t.tenant)) == set(acked)
        print(f"\nburst: {total} events from 8 clients over 2 replicas in {took:.1f} s; both folded {total}")
    finally:
        a.stop()
        b.stop()


def test_a_replica_killed_under_load_restarts_from_snapshot_and_replay(pg_stack: Stack) -> None:
    env = gateway_env(pg_stack.database_url, unique("bg:test-stream"), BANDITGATE_COMPACT_INTERVAL_S="0.5")
    a, b = Gateway(env).start(), Gateway(env).start()
    try:
        t = make_remote_tenancy(a.url)
        events_folded(b.url, t.tenant)

        def kill_b_midway(count: int, url: str) -> None:
            if count >= 80 and b.proc is not None and b.proc.poll() is None:
                b.kill()

        acked, failed = asyncio.run(burst([a.url, b.url], t.key, 200, on_ack=kill_b_midway))
        assert b.proc is not None and b.proc.returncode == -9 and failed > 0
        # No writer is running now, so a zero lag is safe for this snapshot.
        run_snapshotter_once(pg_stack.database_url, BANDITGATE_SNAPSHOT_LAG_S="0")
        after, _ = asyncio.run(burst([a.url], t.key, 20, clients=2))
        acked += after
        logged = asyncio.run(logged_event_ids(pg_stack.database_url, t.tenant))
        assert set(acked) <= logged  # every acknowledged event is in Postgres
        # Events B committed but never published are folded by A's compaction (below the snapshot).
        wait_until(lambda: events_folded(a.url, t.tenant) == len(logged), 10, "A folds every logged event")

        restarted = Gateway(env).start()
        try:
            state = router_state(restarted.url, t.tenant)
            assert int(state["watermark"]) > 0  # type: ignore[call-overload]
            assert state["events_folded"] == len(logged)
            assert_same_scores(probe_scores(restarted.url, t.key), probe_scores(a.url, t.key))
            print(
                f"\nkill -9: {len(acked)} acked, {len(logged)} in Postgres, B restarted from the snapshot at "
                f"{state['watermark']} and replayed the ids after it up to {state['last_event_id']}"
            )
        finally:
            restarted.stop()
    finally:
        a.stop()
        b.stop()


def test_redis_restarted_empty_loses_nothing_acknowledged(pg_stack: Stack) -> None:
    with private_redis() as redis:
        env = gateway_env(pg_stack.database_url, unique("bg:test-stream"), redis_url=redis.url)
        a, b = Gateway(env).start(), Gateway(env).start()
        try:
            t = make_remote_tenancy(a.url)
            events_folded(b.url, t.tenant)
            acked, failed = asyncio.run(burst([a.url, b.url], t.key, 20, clients=2))
            redis.kill()
            during, failed_during = asyncio.run(burst([a.url, b.url], t.key, 20, clients=2))
            assert failed == failed_during == 0  # the gateway keeps serving without Redis
            restarted_redis = RedisServer(redis.port).start()  # same port, empty
            try:
                later, _ = asyncio.run(burst([a.url, b.url], t.key, 20, clients=2))
                acked += during + later
                logged = asyncio.run(logged_event_ids(pg_stack.database_url, t.tenant))
                assert set(acked) == logged
                for url in (a.url, b.url):
                    wait_until(lambda url=url: events_folded(url, t.tenant) == len(logged), 15, "resync")
                assert_same_scores(probe_scores(a.url, t.key), probe_scores(b.url, t.key))
            finally:
                restarted_redis.kill()
        finally:
            a.stop()
            b.stop()


@dataclass
class Answer:
    at: float  # time.monotonic() when the answer came back
    url: str
    path: str
    status: int | None  # None: the connection failed (a killed replica)


@dataclass
class MixedLoad:
    """Route + feedback pairs (every tenth feedback sent twice, every fifth pair followed by a
    ``GET /v1/models``) from ``clients`` clients over the replicas in ``urls`` (changed as replicas come
    and go), each pausing ``pause_s`` between pairs: bounded, whatever the gateways' speed."""

    urls: list[str]
    key: str
    clients: int = 6
    pause_s: float = 0.05
    answers: list[Answer] = field(default_factory=list)
    acked: list[int] = field(default_factory=list)
    running: bool = True

    def note(self, url: str, path: str, status: int | None) -> None:
        self.answers.append(Answer(time.monotonic(), url, path, status))

    async def run(self) -> None:
        await asyncio.gather(*(self.client_loop(c) for c in range(self.clients)))

    async def client_loop(self, c: int) -> None:
        i = c
        async with httpx.AsyncClient(timeout=10) as client:
            while self.running:
                url = self.urls[i % len(self.urls)]
                try:
                    await self.pair(client, url, i)
                except httpx.HTTPError as exc:
                    self.note(url, type(exc).__name__, None)
                i += self.clients
                await asyncio.sleep(self.pause_s)

    async def pair(self, client: httpx.AsyncClient, url: str, i: int) -> None:
        headers = bearer(self.key)
        decision = await client.post(f"{url}/route", json={"prompt": f"soak {i % 41}"}, headers=headers)
        self.note(url, "/route", decision.status_code)
        if decision.status_code != 200:
            return
        body = {"decision_id": decision.json()["decision_id"], "reward": i % 3 / 2}
        for _ in range(2 if i % 10 == 0 else 1):
            ack = await client.post(f"{url}/feedback", json=body, headers=headers)
            self.note(url, "/feedback", ack.status_code)
            if ack.status_code == 202 and not ack.json().get("duplicate"):
                self.acked.append(int(ack.json()["event_id"]))
        if i % 5 == 0:
            self.note(url, "/v1/models", (await client.get(f"{url}/v1/models", headers=headers)).status_code)


def test_a_fault_soak_keeps_every_acknowledged_event_exactly_once() -> None:
    """Two replicas under a bounded mixed load through, in turn: a replica killed (-9) and replaced, Redis
    stopped and restarted empty, the database's sessions terminated, and the database closed to new
    connections for a few seconds. Every acknowledged feedback is stored once and folded once by each
    replica, the replicas agree, no answer is a 5xx but the 503s while the database is closed (and of a
    request whose transaction the sessions' termination cut mid-way: its first statement is sent again,
    a later one cannot be), and the gateways serve again within 5 s of its return; all within 120 s."""
    started = time.monotonic()
    with fresh_pg_database() as database_url, private_redis() as redis:
        env = gateway_env(
            database_url, unique("bg:test-stream"), redis.url, BANDITGATE_COMPACT_INTERVAL_S="0.5"
        )
        with ThreadPoolExecutor(2) as starting:  # side by side: each takes seconds on a busy machine
            a, b = starting.map(Gateway.start, [Gateway(env), Gateway(env)])
        replacement: Gateway | None = None
        restarted_redis: RedisServer | None = None
        try:
            t = make_remote_tenancy(a.url)
            events_folded(b.url, t.tenant)
            load = MixedLoad([a.url, b.url], t.key)
            marks: dict[str, float] = {}

            def faults() -> None:
                nonlocal replacement, restarted_redis
                time.sleep(2)
                marks["kill"] = time.monotonic()
                b.kill()
                load.urls[:] = [a.url]
                replacement = Gateway(env).start()
                load.urls[:] = [a.url, replacement.url]
                time.sleep(1)
                redis.kill()
                time.sleep(2)
                restarted_redis = RedisServer(redis.port).start()  # the same port, empty
                time.sleep(1)
                marks["terminated"] = time.monotonic()
                asyncio.run(terminate_sessions(database_url))
                time.sleep(2)
                asyncio.run(close_database(database_url))
                marks["closed"] = time.monotonic()
                time.sleep(3)
                asyncio.run(open_database(database_url))
                marks["reopened"] = time.monotonic()
                time.sleep(5)

            async def soak() -> None:
                work = asyncio.create_task(load.run())
                try:
                    await asyncio.to_thread(faults)
                finally:
                    load.running = False
                    await work

            asyncio.run(soak())
            assert replacement is not None
            urls = [a.url, replacement.url]

            closed, reopened, terminated = marks["closed"], marks["reopened"], marks["terminated"]
            server_errors = [x for x in load.answers if x.status is not None and x.status >= 500]
            outages = [(terminated, terminated + 2), (closed, reopened + 5)]
            outside = [
                x for x in server_errors if x.status != 503 or not any(s <= x.at <= e for s, e in outages)
            ]
            assert outside == [], (
                [(x.at - started, x.path, x.status) for x in outside[:5]],
                {k: v - started for k, v in marks.items()},
            )
            late = [x.at - reopened for x in server_errors if x.at > reopened]
            for url in urls:  # each replica answers within 5 s of the database's return
                first = min(
                    x.at for x in load.answers if x.url == url and x.status == 200 and x.at > reopened
                )
                assert first - reopened < 5.0, (url, first - reopened)
            dropped = [x for x in load.answers if x.status is None]
            assert all(x.url == b.url and x.at >= marks["kill"] for x in dropped), dropped[:5]

            assert len(load.acked) == len(set(load.acked))
            logged = asyncio.run(logged_event_ids(database_url, t.tenant))
            assert set(load.acked) <= logged  # every acknowledged event stored (ids are unique: once)
            # An event whose publication failed around Redis's restart, after the other replica's resync,
            # reaches that replica at its compaction above the next periodic snapshot (as in production,
            # where the snapshotter runs every BANDITGATE_SNAPSHOT_INTERVAL_S). The load has stopped, so
            # a zero lag is safe for this snapshot.
            run_snapshotter_once(database_url, BANDITGATE_SNAPSHOT_LAG_S="0")
            deadline = time.monotonic() + 15
            while [events_folded(url, t.tenant) for url in urls] != [len(logged)] * 2:
                folded = [events_folded(url, t.tenant) for url in urls]
                assert time.monotonic() < deadline, f"folded {folded} of {len(logged)} within 15 s"
                time.sleep(0.05)
            time.sleep(0.5)
            assert [events_folded(url, t.tenant) for url in urls] == [len(logged)] * 2
            assert_same_scores(probe_scores(a.url, t.key), probe_scores(replacement.url, t.key))
            took = time.monotonic() - started
            marks = {k: round(v - started, 1) for k, v in marks.items()}
            statuses = Counter(x.status for x in load.answers)
            at_termination = sum(x.at < closed for x in server_errors)
            print(
                f"\nfault soak: {len(load.answers)} answers {dict(statuses)}, {len(load.acked)} acked, "
                f"{len(logged)} stored and folded by both replicas; {at_termination} 503s at the sessions' "
                f"termination; 503s up to "
                f"{max(late, default=0.0):.2f} s after the database reopened; {took:.1f} s in all; faults at {marks}"
            )
            assert took < 120
        finally:
            for gateway in (a, b, replacement):
                if gateway is not None:
                    gateway.stop()
            if restarted_redis is not None:
                restarted_redis.kill()
