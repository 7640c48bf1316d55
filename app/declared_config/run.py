"""``banditgate apply``, ``export`` and ``serve --config`` against the configured database.

``apply`` writes to the database directly, in one transaction, and then announces the change on the
event bus (Redis, when ``BANDITGATE_REDIS_URL`` is set) with the messages the admin API sends: running
replicas drop their cached copies at once. Without Redis (one SQLite process) a running gateway sees a
change within ``BANDITGATE_CATALOG_TTL_S``, and a router's on its next request.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from redis.asyncio import Redis

from app.bus import RedisStreamBus
from app.catalog_admin import publish
from app.declared_config.apply import Plan, apply_config
from app.declared_config.export import as_yaml, export_config
from app.declared_config.source import read, validated
from app.settings import Settings
from app.store.db import make_engine, make_sessionmaker
from embeddings.registry import load_embedder


def embedding_dim(settings: Settings) -> int:
    """The dimension of the gateway's embedder (a policy's ``dim`` must equal it), without loading a
    model where its name gives it."""
    name = settings.embedder
    if name == "minilm":
        from embeddings.minilm import DIM

        return DIM
    if name.startswith("hashing"):
        _, _, dim = name.partition(":")
        return int(dim) if dim else load_embedder(name).dim
    return load_embedder(name, settings.embedder_device, settings.clip_weights).dim


async def apply_file(
    settings: Settings, path: Path, env: Mapping[str, str], prune: bool = False, dry_run: bool = False
) -> Plan:
    """Apply the file at ``path``: all of it, or nothing (``ConfigError``). A dry run plans without
    writing."""
    source = read(path)
    config = validated(source)
    dim = embedding_dim(settings)
    engine = make_engine(settings.database_url)
    try:
        async with make_sessionmaker(engine)() as session:
            try:
                plan = await apply_config(session, settings, source, config, dim, env, prune)
            except BaseException:
                await session.rollback()
                raise
            if dry_run or not plan.steps:
                await session.rollback()
                return plan
            await session.commit()
    finally:
        await engine.dispose()
    if settings.redis_url and plan.news:
        redis = Redis.from_url(settings.redis_url)
        try:
            bus = RedisStreamBus(
                redis, settings.event_stream, settings.event_stream_maxlen, settings.stream_block_ms
            )
            await publish(bus, plan.news)
        finally:
            await redis.aclose()
    return plan


async def export_text(settings: Settings) -> str:
    engine = make_engine(settings.database_url)
    try:
        async with make_sessionmaker(engine)() as session:
            return as_yaml(await export_config(session))
    finally:
        await engine.dispose()
