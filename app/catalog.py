"""In-process caches of what every request reads and rarely changes: API key -> tenant, routers,
backends (the row, and the ready-to-call ``Target`` with its decrypted key).

Each entry lives at most ``catalog_ttl_s`` seconds. An admin change (a key issued or revoked, a tenant,
backend or router created, changed or deleted) clears this process's caches at once and publishes
``CatalogChanged`` on the bus, which clears every other replica's (a ``RouterChanged`` clears them
too); the TTL bounds staleness when that message is lost (the bus down). So a revoked key stops working
on every replica within the bus's delivery time, and within ``catalog_ttl_s`` at worst.

Rows are read in the catalog's own short session and detached from it, so a request's rollback can
never expire an object another request is reading. Lookups that find nothing are not cached: a new key
or router works at once. A load that started before a clear is not stored (``_generation``), so a
clear cannot be undone by a read that raced it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.auth import hash_key
from app.backend_keys import decrypt_key, fernet_for
from app.backends import Target
from app.bus import EventBus
from app.events import CatalogChanged
from app.settings import Settings
from app.store.models import ApiKey, Backend, Router, Tenant

K = TypeVar("K")
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """A dict whose entries expire ``ttl_s`` seconds after they were stored (``ttl_s <= 0``: no caching)."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._entries: dict[K, tuple[float, V]] = {}

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] < time.monotonic():
            del self._entries[key]
            return None
        return entry[1]

    def put(self, key: K, value: V) -> None:
        if self.ttl_s > 0:
            self._entries[key] = (time.monotonic() + self.ttl_s, value)

    def clear(self) -> None:
        self._entries.clear()


class Catalog:
    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession], settings: Settings) -> None:
        self._sessionmaker = sessionmaker
        self._settings = settings
        ttl = settings.catalog_ttl_s
        self._tenants: TtlCache[str, Tenant] = TtlCache(ttl)
        self._routers: TtlCache[tuple[int, str | None], Router] = TtlCache(ttl)
        self._routers_by_id: TtlCache[int, Router] = TtlCache(ttl)
        self._backends: TtlCache[str, Backend] = TtlCache(ttl)
        self._targets: TtlCache[str, Target] = TtlCache(ttl)
        self._generation = 0

    def clear(self) -> None:
        """Forget everything (an admin change here, or ``CatalogChanged``/``RouterChanged`` on the bus)."""
        self._generation += 1
        for cache in (self._tenants, self._routers, self._routers_by_id, self._backends, self._targets):
            cache.clear()

    async def announce(self, bus: EventBus, what: str) -> None:
        """After an admin change is committed: clear this process's caches and tell every replica to. If
        the bus is down the others catch up within ``catalog_ttl_s``."""
        self.clear()
        with contextlib.suppress(Exception):
            await bus.publish(CatalogChanged(what))

    async def _cached(
        self, cache: TtlCache[K, V], key: K, load: Callable[[AsyncSession], Awaitable[V | None]]
    ) -> V | None:
        found = cache.get(key)
        if found is not None:
            return found
        generation = self._generation
        async with self._sessionmaker() as session:
            value = await load(session)
            if value is not None:
                session.expunge_all()
        if value is not None and generation == self._generation:
            cache.put(key, value)
        return value

    def cached_tenant(self, key_hash: str) -> Tenant | None:
        """The tenant of the key hashed to ``key_hash`` if this process holds it (else None): known
        without reading the database."""
        return self._tenants.get(key_hash)

    async def tenant_for_key(self, token: str) -> Tenant | None:
        """The tenant of an API key that is not revoked."""
        return await self.tenant_for_hash(hash_key(token))

    async def tenant_for_hash(self, key_hash: str) -> Tenant | None:
        """The tenant of the API key hashed to ``key_hash`` (``app.auth.hash_key``), if not revoked."""

        async def load(session: AsyncSession) -> Tenant | None:
            return await session.scalar(
                select(Tenant)
                .join(ApiKey, ApiKey.tenant_id == Tenant.id)
                .where(ApiKey.key_hash == key_hash, ApiKey.revoked_at.is_(None))
            )

        return await self._cached(self._tenants, key_hash, load)

    async def router(self, tenant_id: int, name: str | None) -> Router | None:
        """The tenant's router ``name``, or its default router when ``name`` is None."""

        async def load(session: AsyncSession) -> Router | None:
            query = select(Router).where(Router.tenant_id == tenant_id)
            if name is None:
                query = query.where(Router.is_default.is_(True))
            else:
                query = query.where(Router.name == name)
            return await session.scalar(query)

        return await self._cached(self._routers, (tenant_id, name), load)

    async def router_by_id(self, router_id: int) -> Router | None:
        async def load(session: AsyncSession) -> Router | None:
            return await session.get(Router, router_id)

        return await self._cached(self._routers_by_id, router_id, load)

    async def backends(self, names: list[str]) -> list[Backend]:
        """The catalog rows of those of ``names`` that exist."""
        found = [b for b in (self._backends.get(n) for n in names) if b is not None]
        if len(found) == len(names):
            return found
        generation = self._generation
        async with self._sessionmaker() as session:
            rows = list((await session.scalars(select(Backend).where(Backend.name.in_(names)))).all())
            session.expunge_all()
        if generation == self._generation:
            for row in rows:
                self._backends.put(row.name, row)
        return rows

    async def target(self, name: str) -> Target | None:
        """The backend ``name`` ready to call, its key decrypted once per TTL; None when it is not in the
        catalog. Raises ``SecretKeyMissing`` when its key cannot be decrypted."""
        target = self._targets.get(name)
        if target is not None:
            return target
        generation = self._generation
        rows = await self.backends([name])
        if not rows:
            return None
        backend = rows[0]
        api_key = decrypt_key(fernet_for(self._settings.secret_key), backend.api_key_secret)
        target = Target.of(backend, api_key)
        if generation == self._generation:
            self._targets.put(name, target)
        return target
