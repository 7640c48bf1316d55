"""``PolicyStates.maintain``: kNN stores are compacted in a worker thread, off the request path."""

from __future__ import annotations

import asyncio

import numpy as np

from app.state import PolicyStates, RouterRuntime
from routers.base import Observation
from routers.knn_ucb import KnnUCB
from routers.simple import RandomPolicy


def test_maintain_rebuilds_the_stale_knn_stores_and_skips_other_policies() -> None:
    rng = np.random.default_rng(0)
    knn = KnnUCB(arms=["a"], window=50)
    for i in range(200):  # 150 evicted > 50 live and > 64: stale
        x = rng.normal(size=4).astype(np.float32)
        knn.update(Observation(embedding=x / np.linalg.norm(x), arm="a", reward=float(i % 2)))
    store = knn._stores["a"]
    index = store._index
    assert store.needs_compaction
    states = PolicyStates(sessionmaker=None)  # type: ignore[arg-type]  # maintain reads no database
    for router_id, policy in ((1, knn), (2, RandomPolicy(arms=["a"]))):
        states._runtimes[router_id] = RouterRuntime(router_id, 1, "h", policy, watermark=0)
    assert asyncio.run(states.maintain()) == 1
    assert store._index is not index and store.dead == 0 and len(store) == 50
    assert asyncio.run(states.maintain()) == 0
