"""The demo set-up of ``banditgate demo``: two backends, a tenant and its default router.

Idempotent: running it again reuses what exists and issues a fresh tenant key (keys are shown once).
The backends carry the replay backends' key (``BANDITGATE_REPLAY_API_KEY``, encrypted with
``BANDITGATE_SECRET_KEY``; ``banditgate demo`` generates both), set again on every run.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from app.auth import display_prefix, hash_key, new_api_key
from app.backend_keys import encrypt_key, fernet_for
from app.settings import Settings
from app.store.db import DbPool, make_engine, make_sessionmaker
from app.store.models import ApiKey, Backend, Router, Tenant

DEMO_TENANT = "demo"
DEMO_ROUTER = "demo"
# Prices are demo data; the replay backends of the gateway work wire real endpoints to these names.
DEMO_BACKENDS = (
    {"name": "demo-small", "usd_per_mtok_in": 0.6, "usd_per_mtok_out": 0.6},
    {"name": "demo-large", "usd_per_mtok_in": 10.0, "usd_per_mtok_out": 30.0},
)


@dataclass(frozen=True)
class DemoSetup:
    tenant: str
    router: str
    api_key: str
    arms: tuple[str, ...]


async def set_up_demo(settings: Settings, backend_base_url: str) -> DemoSetup:
    engine = make_engine(settings.database_url, DbPool.of(settings))
    try:
        async with make_sessionmaker(engine)() as session:
            replay_key = settings.replay_api_key
            sealed = (
                encrypt_key(fernet_for(settings.secret_key), replay_key.get_secret_value())
                if replay_key is not None
                else None
            )
            for spec in DEMO_BACKENDS:
                backend = await session.scalar(select(Backend).where(Backend.name == spec["name"]))
                if backend is None:
                    backend = Backend(base_url=f"{backend_base_url}/{spec['name']}/v1", **spec)
                    session.add(backend)
                backend.api_key_secret = sealed
            tenant = await session.scalar(select(Tenant).where(Tenant.name == DEMO_TENANT))
            if tenant is None:
                tenant = Tenant(name=DEMO_TENANT)
                session.add(tenant)
                await session.flush()
            arms = [str(b["name"]) for b in DEMO_BACKENDS]
            router = await session.scalar(
                select(Router).where(Router.tenant_id == tenant.id, Router.name == DEMO_ROUTER)
            )
            if router is None:
                session.add(
                    Router(
                        tenant_id=tenant.id,
                        name=DEMO_ROUTER,
                        policy="linucb",
                        hyperparameters={"alpha": 0.5},
                        arms=arms,
                        reward_lo=0.0,
                        reward_hi=1.0,
                        seed=0,
                        is_default=True,
                        version=1,
                    )
                )
            key = new_api_key()
            session.add(
                ApiKey(tenant_id=tenant.id, key_hash=hash_key(key), prefix=display_prefix(key), name="demo")
            )
            await session.commit()
            return DemoSetup(DEMO_TENANT, DEMO_ROUTER, key, tuple(arms))
    finally:
        await engine.dispose()
