"""The hot path's caches and connections keep their guarantees: a revoked key stops working on every
replica within a stated bound (the bus at once, the TTL at worst), and a dropped database connection
costs a retry, not an error."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import httpx
from sqlalchemy import update
from sqlalchemy.ext.asyncio import create_async_engine

from app.auth import hash_key
from app.main import create_app
from app.store.models import ApiKey, utcnow
from tests.conftest import PG_SERVER, Stack, admin_headers, bearer, make_tenancy, running, unique
from tests.integration.processes import gateway_process, provision

# How soon a replica refuses a key revoked on another one, with the bus up: the tailer's XREAD block
# (100 ms in these processes) plus delivery. The caches' TTL is set far above it (60 s), so only the
# CatalogChanged message can explain a refusal within this bound.
REVOCATION_BOUND_S = 2.0


def test_a_key_revoked_on_one_replica_stops_working_on_the_other_within_the_bound(pg_stack: Stack) -> None:
    stream = unique("bg:test-stream")
    with (
        gateway_process(pg_stack.database_url, stream, BANDITGATE_CATALOG_TTL_S="60") as a,
        gateway_process(pg_stack.database_url, stream, BANDITGATE_CATALOG_TTL_S="60") as b,
    ):
        p = provision(a, "always")
        issued = {"key": p.key, "id": p.key_id}
        h = admin_headers()
        prompt = {"prompt": "is this key still good?"}
        for url in (a, b):  # both replicas have the key (and the router) cached now
            for _ in range(3):
                assert (
                    httpx.post(f"{url}/route", json=prompt, headers=bearer(issued["key"])).status_code == 200
                )

        revoked = httpx.delete(f"{a}/admin/tenants/{p.tenant}/keys/{issued['id']}", headers=h)
        assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
        since = time.monotonic()
        assert httpx.post(f"{a}/route", json=prompt, headers=bearer(issued["key"])).status_code == 401
        while httpx.post(f"{b}/route", json=prompt, headers=bearer(issued["key"])).status_code != 401:
            assert time.monotonic() - since < REVOCATION_BOUND_S, "replica B still accepts the revoked key"
            time.sleep(0.02)


async def test_without_the_bus_a_revoked_key_stops_working_within_the_ttl(sqlite_stack: Stack) -> None:
    """A revocation the caches are not told about (written behind the app's back, as when the bus is
    down): the cached key keeps working until its entry expires, then it is refused."""
    ttl = 3.0
    async with running(create_app(sqlite_stack.settings(catalog_ttl_s=ttl))) as client:
        t = await make_tenancy(client)
        prompt = {"prompt": "cached key"}
        assert (await client.post("/route", json=prompt, headers=bearer(t.key))).status_code == 200
        engine = create_async_engine(sqlite_stack.database_url)
        async with engine.begin() as conn:
            await conn.execute(
                update(ApiKey).values(revoked_at=utcnow()).where(ApiKey.key_hash == hash_key(t.key))
            )
        await engine.dispose()
        revoked_at = time.monotonic()
        assert (await client.post("/route", json=prompt, headers=bearer(t.key))).status_code == 200
        while (await client.post("/route", json=prompt, headers=bearer(t.key))).status_code != 401:
            assert time.monotonic() - revoked_at < ttl + 1.0, "the revoked key outlived the cache's TTL"
            await asyncio.sleep(0.05)


async def test_a_dropped_database_connection_costs_a_retry_not_an_error(pg_stack: Stack) -> None:
    """Every pooled connection is killed on the server (pg_terminate_backend); no pre-ping notices, the
    first statement of the next decision and of the next feedback fails on its dead connection and
    is retried on a fresh one: both answer, and both are in the database."""
    async with running(create_app(pg_stack.settings())) as client:
        t = await make_tenancy(client)
        key = bearer(t.key)
        for _ in range(3):  # connections in the pool
            assert (await client.post("/route", json={"prompt": "warm"}, headers=key)).status_code == 200
        database = pg_stack.database_url.rsplit("/", 1)[1]
        admin = await asyncpg.connect(PG_SERVER + "/postgres")
        try:
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = $1 AND pid <> pg_backend_pid()",
                database,
            )
        finally:
            await admin.close()
        assert killed >= 1
        routed = await client.post("/route", json={"prompt": "after the kill"}, headers=key)
        assert routed.status_code == 200, routed.text
        decision_id = routed.json()["decision_id"]
        # and again, for the feedback's first statement
        admin = await asyncpg.connect(PG_SERVER + "/postgres")
        try:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = $1 AND pid <> pg_backend_pid()",
                database,
            )
        finally:
            await admin.close()
        ack = await client.post("/feedback", json={"decision_id": decision_id, "reward": 1.0}, headers=key)
        assert ack.status_code == 202, ack.text
        logged = await client.get(f"/admin/decisions/{decision_id}", headers=admin_headers())
        assert logged.status_code == 200
        assert [e["reward"] for e in logged.json()["feedback"]] == [1.0]


async def test_the_gateway_sets_faiss_search_threads_from_its_settings(sqlite_stack: Stack) -> None:
    """``search_threads`` (default 1) is FAISS's OpenMP thread count once the app has started: a kNN
    search of one prompt gains nothing from threads that then spin on the database's cores."""
    import faiss

    try:
        async with running(create_app(sqlite_stack.settings(search_threads=2))):
            assert faiss.omp_get_max_threads() == 2
        async with running(create_app(sqlite_stack.settings())):
            assert faiss.omp_get_max_threads() == 1
    finally:
        faiss.omp_set_num_threads(1)


async def test_the_objects_alive_after_start_up_are_frozen_out_of_the_collector(sqlite_stack: Stack) -> None:
    """With ``gc_freeze`` (the default) a full collection no longer walks what start-up made; the test
    settings turn it off (a test process starts hundreds of apps), so it is switched on here."""
    import gc

    assert gc.get_freeze_count() == 0
    try:
        async with running(create_app(sqlite_stack.settings(gc_freeze=True))):
            frozen = gc.get_freeze_count()
            assert frozen > 10_000  # the app, its libraries and the embedder's objects
    finally:
        gc.unfreeze()
    async with running(create_app(sqlite_stack.settings())):
        assert gc.get_freeze_count() == 0
