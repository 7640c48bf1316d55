"""The catalog's TTL cache (app/catalog.py): entries expire, a zero TTL caches nothing."""

from __future__ import annotations

import time

from app.catalog import TtlCache


def test_entries_expire_after_the_ttl() -> None:
    cache: TtlCache[str, int] = TtlCache(0.2)
    cache.put("k", 1)
    assert cache.get("k") == 1
    time.sleep(0.25)
    assert cache.get("k") is None


def test_a_zero_ttl_caches_nothing_and_clear_forgets_everything() -> None:
    off: TtlCache[str, int] = TtlCache(0)
    off.put("k", 1)
    assert off.get("k") is None
    on: TtlCache[str, int] = TtlCache(60)
    on.put("a", 1)
    on.put("b", 2)
    on.clear()
    assert on.get("a") is None and on.get("b") is None
