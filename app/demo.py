"""The demo set-up of ``banditgate demo``: two backends, a tenant, its key and its default router.

The router is the default policy with a quality floor: ``demo-large``, the dearer model, is the
incumbent (what a team calls without routing) and ``max_loss`` 0.05 lets the router leave it only while
its reward stays, with high confidence, at least 95 % of what always calling the incumbent would have
earned, and ``objective`` savings plays the cheapest model the evidence shows good enough for each prompt:
the cheaper ``demo-small`` then takes the prompts it answers well (app/demo_dataset.py) once it has
evidence, from the rounds it was tried on or from logs (``banditgate demo`` writes an evaluation of both
models on a separate draw of the same kinds of prompt, ``.banditgate/demo-logs``, for ``banditgate
warm-start``).

Idempotent: the tenant's key is the one the caller passes (``banditgate demo`` keeps it in its state
directory), so every run gives the same key. ``reset`` first deletes the demo tenant with everything it
holds (its routers, the walk-through's included, decisions and feedback), so the demo starts afresh.
The backends carry the replay backends' key (``BANDITGATE_REPLAY_API_KEY``, encrypted with
``BANDITGATE_SECRET_KEY``; ``banditgate demo`` generates both), set again on every run.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, select

from app.auth import display_prefix, hash_key
from app.backend_keys import encrypt_key, fernet_for
from app.demo_dataset import MODELS
from app.settings import Settings
from app.store.db import DbPool, make_engine, make_sessionmaker
from app.store.models import ApiKey, Backend, Router, Tenant
from routers.default import resolve

DEMO_TENANT = "demo"
DEMO_ROUTER = "demo"
# the demo dataset's models with their prices: the replay backends answer under these names
DEMO_BACKENDS = tuple(dict(model) for model in MODELS)
INCUMBENT = "demo-large"
# the default policy's keys on top of the default's own: the savings mode, the cheapest model the evidence
# shows good enough while the reward stays within 5% of always calling the dearer model
HYPERPARAMETERS = {"incumbent": INCUMBENT, "max_loss": 0.05, "objective": "savings"}


@dataclass(frozen=True)
class DemoSetup:
    tenant: str
    router: str
    api_key: str
    arms: tuple[str, ...]


async def set_up_demo(
    settings: Settings, backend_base_url: str, api_key: str, reset: bool = False
) -> DemoSetup:
    """Create what is missing of the demo (module docstring); ``api_key`` becomes a key of the tenant."""
    engine = make_engine(settings.database_url, DbPool.of(settings))
    try:
        async with make_sessionmaker(engine)() as session:
            if reset:
                await session.execute(delete(Tenant).where(Tenant.name == DEMO_TENANT))
            replay_key = settings.replay_api_key
            sealed = (
                encrypt_key(fernet_for(settings.secret_key), replay_key.get_secret_value())
                if replay_key is not None
                else None
            )
            for spec in DEMO_BACKENDS:
                backend = await session.scalar(select(Backend).where(Backend.name == spec["name"]))
                if backend is None:
                    backend = Backend()
                    session.add(backend)
                for field, value in spec.items():  # the demo's prices, also over an earlier run's
                    setattr(backend, field, value)
                backend.base_url = f"{backend_base_url}/{spec['name']}/v1"
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
                policy, hyperparameters = resolve(HYPERPARAMETERS)
                session.add(
                    Router(
                        tenant_id=tenant.id,
                        name=DEMO_ROUTER,
                        policy=policy,
                        hyperparameters=hyperparameters,
                        arms=arms,
                        reward_lo=0.0,
                        reward_hi=1.0,
                        seed=0,
                        is_default=True,
                        version=1,
                    )
                )
            digest = hash_key(api_key)
            stored = await session.scalar(select(ApiKey).where(ApiKey.key_hash == digest))
            if stored is None:
                stored = ApiKey(key_hash=digest, prefix=display_prefix(api_key), name="demo")
                session.add(stored)
            stored.tenant_id, stored.revoked_at = tenant.id, None
            await session.commit()
            return DemoSetup(DEMO_TENANT, DEMO_ROUTER, api_key, tuple(arms))
    finally:
        await engine.dispose()
