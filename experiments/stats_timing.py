"""How long GET .../routers/{router}/stats takes over many decisions (one feedback event each).

    python -m experiments.stats_timing sqlite+aiosqlite:////tmp/stats.db 50000
    python -m experiments.stats_timing postgresql+asyncpg://postgres@127.0.0.1:5432/stats_timing 50000

Migrates the database (which must exist and should be empty), writes N decisions spread over the last
24 hours with rows inserted directly, runs ANALYZE on Postgres, then prints the median of 5 requests for
the default range (24 one-hour buckets). The app runs in this process (httpx's ASGI transport), with
a tenant, two backends and a ``linucb`` router made through the admin API.

experiments/ is not packaged and may import app/.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import numpy as np
from sqlalchemy import insert, text

from app.main import create_app
from app.settings import Settings
from app.store.migrate import upgrade
from app.store.models import DecisionRow, FeedbackEvent

ADMIN = "experiment-admin-key-0123456789abcdef"
ARMS = ["stats-a", "stats-b"]


async def main(url: str, n: int) -> None:
    app = create_app(Settings(database_url=url, admin_key=ADMIN, embedder="hashing", log_level="WARNING"))
    h = {"Authorization": f"Bearer {ADMIN}"}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as client,
    ):
        tenant = f"t{uuid.uuid4().hex[:8]}"
        (await client.post("/admin/tenants", json={"name": tenant}, headers=h)).raise_for_status()
        for arm in ARMS:
            backend = {"name": arm, "base_url": "http://127.0.0.1:9/v1"}
            if (await client.get(f"/admin/backends/{arm}", headers=h)).status_code == 404:
                (await client.post("/admin/backends", json=backend, headers=h)).raise_for_status()
        router = {"name": "main", "policy": "linucb", "arms": ARMS, "is_default": True}
        (await client.post(f"/admin/tenants/{tenant}/routers", json=router, headers=h)).raise_for_status()
        base = f"/admin/tenants/{tenant}"
        tenant_id = (await client.get(base, headers=h)).json()["id"]
        router_id = (await client.get(f"{base}/routers/main", headers=h)).json()["id"]
        now, embedding = datetime.now(UTC), np.zeros(384, np.float32).tobytes()
        decisions, events = [], []
        for i in range(n):
            decision_id, when, model = (
                uuid.uuid4().hex,
                now - timedelta(seconds=86400 * i / n),
                ARMS[i % 2],
            )
            other = [ARMS[1 - i % 2]] if i % 10 == 0 else []
            ids = {"tenant_id": tenant_id, "router_id": router_id, "created_at": when}
            decisions.append(
                ids
                | {
                    "id": decision_id,
                    "router_version": 1,
                    "policy": "linucb",
                    "models": [model],
                    "query": other,
                }
                | {
                    "scores": {},
                    "info": {},
                    "embedding": embedding,
                    "prompt_hash": "0" * 64,
                    "prompt_chars": 10,
                }
            )
            events.append(
                ids | {"decision_id": decision_id, "model": model, "kind": "bandit", "reward": i % 7 / 7}
            )
        async with app.state.ctx.sessionmaker() as session:
            for k in range(0, n, 5000):
                await session.execute(insert(DecisionRow), decisions[k : k + 5000])
                await session.execute(insert(FeedbackEvent), events[k : k + 5000])
            await session.commit()
            if url.startswith("postgresql"):
                await session.execute(text("ANALYZE"))
        times = []
        for _ in range(5):
            start = time.perf_counter()
            response = await client.get(f"{base}/routers/main/stats", headers=h)
            times.append(time.perf_counter() - start)
            assert response.status_code == 200, response.text
        print(
            f"{url.split(':')[0]}: {n} decisions, 24 x 1 h buckets: median {1000 * statistics.median(times):.0f} ms"
        )


if __name__ == "__main__":
    upgrade(sys.argv[1])
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
