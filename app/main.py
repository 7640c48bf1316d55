"""The FastAPI application factory: ``uvicorn --factory app.main:create_app``."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from redis.asyncio import Redis
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from app.api import (
    admin_backends,
    admin_observations,
    admin_policies,
    admin_routers,
    admin_tenants,
    contract,
    errors,
    feedback,
    health,
    openai,
    route,
)
from app.api.admin_judge import router as admin_judge_router
from app.api.admin_logs import router as admin_logs_router
from app.api.admin_stats import router as admin_stats_router
from app.api.api_docs import mount_api_docs
from app.api.dashboard import mount_dashboard
from app.api.http_limits import HttpLimits, RequestLimits
from app.api.in_flight import CountInFlight, RequestsInFlight
from app.api.lean import lean_routes
from app.api.metrics import RequestMetrics
from app.api.metrics import router as metrics_router
from app.backends import BackendClient
from app.bus import EventBus, InProcessBus, RedisStreamBus
from app.catalog import Catalog
from app.compaction import CompactionLoop
from app.context import AppContext
from app.embedding import (
    EmbeddingCache,
    EmbeddingPoolClient,
    EmbeddingService,
    LruEmbeddingCache,
    RedisEmbeddingCache,
    TieredEmbeddingCache,
)
from app.events import CatalogChanged, Message, RouterChanged
from app.input_types import JsonLimits
from app.ratelimit.limits import RateLimiter, auth_failure_limits
from app.ratelimit.local import InProcessLimiter
from app.ratelimit.shared import RedisLimiter
from app.routing.round_counts import RoundCounts
from app.settings import Settings
from app.state import PolicyStates
from app.store.db import DbPool, is_sqlite, make_engine, make_ledger, make_sessionmaker
from embeddings.registry import load_embedder
from routers.neighbors import set_search_threads


async def open_context(settings: Settings, busy: Callable[[], bool] | None = None) -> AppContext:
    """The app's shared state; ``busy`` says when this process serves more than one request (the
    SQLite ledger's inline path then hands writes to its thread)."""
    set_search_threads(settings.search_threads)
    engine = make_engine(settings.database_url, DbPool.of(settings))
    sessionmaker = make_sessionmaker(engine)
    redis: Redis | None = None
    bus: EventBus
    cache: EmbeddingCache
    if settings.redis_url:
        redis = Redis.from_url(
            settings.redis_url,
            socket_timeout=max(5.0, settings.stream_block_ms / 1000 + 2),
        )
        bus = RedisStreamBus(
            redis, settings.event_stream, settings.event_stream_maxlen, settings.stream_block_ms
        )
        cache = TieredEmbeddingCache(
            LruEmbeddingCache(settings.embedding_cache_size),
            RedisEmbeddingCache(redis, settings.embedding_cache_ttl_s),
        )
    else:
        bus = InProcessBus()
        cache = LruEmbeddingCache(settings.embedding_cache_size)
    states = PolicyStates(sessionmaker)
    embedder = load_embedder(settings.embedder, settings.embedder_device)
    pool = None
    if settings.embed_pool and settings.redis_url:
        pool_redis = Redis.from_url(
            settings.redis_url,
            max_connections=settings.embed_max_in_flight,
            socket_timeout=settings.embed_timeout_s + 2,
        )
        pool = EmbeddingPoolClient(pool_redis, settings.embed_stream, embedder.name, settings.embed_timeout_s)
    embeddings = EmbeddingService(embedder, cache, pool)
    backends = BackendClient(settings)
    catalog = Catalog(sessionmaker, settings)
    limiter: RateLimiter
    if redis is not None:
        limiter = RedisLimiter(
            redis,
            settings.rate_limit_prefix,
            auth_failure_limits(settings),
            settings.rate_limit_slot_lease_s,
            release_delay_s=settings.rate_limit_release_delay_s,
            max_addresses=settings.auth_failure_max_addresses,
        )
    else:
        limiter = InProcessLimiter(
            auth_failure_limits(settings), max_addresses=settings.auth_failure_max_addresses
        )
    ledger = make_ledger(
        settings.database_url,
        settings.ledger_max_batch,
        settings.ledger_inline,
        settings.ledger_inline_checkpoint_commits,
        busy,
        settings.recent_decisions,
        DbPool.of(settings),
    )
    round_counts = RoundCounts(ledger.counts, settings.counter_read_ttl_s)
    ctx = AppContext(
        settings,
        engine,
        sessionmaker,
        redis,
        bus,
        states,
        embeddings,
        backends,
        catalog,
        limiter,
        ledger,
        round_counts,
    )

    async def forget_changed(message: Message) -> None:
        """The caches a catalog or router change makes stale (the policies' own: ``states.handle``)."""
        if isinstance(message, CatalogChanged | RouterChanged):
            catalog.clear()
            if ledger.recent is not None:  # a deleted tenant or router deletes its decisions
                ledger.recent.clear()
        if isinstance(message, RouterChanged):
            round_counts.forget()

    await bus.start([forget_changed, states.handle], states.resync)
    ctx.compaction = CompactionLoop(states, settings.compact_interval_s)
    ctx.compaction.start()
    return ctx


async def close_context(ctx: AppContext) -> None:
    if ctx.probes is not None:
        await ctx.probes.close(ctx.settings.probe_shutdown_grace_s)
    if ctx.compaction is not None:
        await ctx.compaction.close()
    await ctx.ledger.close()  # after the probes: their writes are committed before the bus closes
    await ctx.bus.close()
    await ctx.backends.aclose()
    if ctx.embeddings.pool is not None:
        await ctx.embeddings.pool.close()
    await ctx.limiter.close()
    if ctx.redis is not None:
        await ctx.redis.aclose()
    await ctx.engine.dispose()


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not settings.log_upstream_requests:
        logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))

    # only the SQLite ledger's inline path asks how many requests are in flight: elsewhere nothing counts
    in_flight = RequestsInFlight() if settings.ledger_inline and is_sqlite(settings.database_url) else None
    busy = in_flight.more_than_one if in_flight is not None else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.ctx = await open_context(settings, busy)
        if settings.gc_freeze:
            gc.freeze()  # what started up lives as long as the process: no collection need walk it
        try:
            yield
        finally:
            await close_context(app.state.ctx)

    app = FastAPI(
        title="banditgate",
        version="0.1.0",
        summary="A model-routing gateway that learns online which backend to call for each prompt.",
        lifespan=lifespan,
        docs_url=None,  # served from the vendored Swagger UI by mount_api_docs, never from a CDN
        redoc_url=None,
    )
    # Starlette tries the routes in order, so the request path's come first: a forwarded request was
    # otherwise matched against about ten admin routers before reaching /v1 (a profiled cost).
    modules = (
        openai,
        route,
        feedback,
        health,
        admin_tenants,
        admin_backends,
        admin_routers,
        admin_observations,
        admin_policies,
    )
    for module in modules:
        app.include_router(module.router)
    if settings.lean_routes:  # tried first: the same operations, bound without dependency solving
        hot = (
            openai.chat_completions,
            openai.image_generations,
            route.route,
            feedback.feedback,
            feedback.feedback_batch,
        )
        app.router.routes[0:0] = lean_routes([r for m in modules for r in m.router.routes], hot)
    if settings.replay_dataset:
        from app.replay_backends import ReplayDataset, replay_app

        replay_key = settings.replay_api_key.get_secret_value() if settings.replay_api_key else None
        limits = HttpLimits.of(settings)
        app.mount("/replay", replay_app(ReplayDataset.read(settings.replay_dataset), replay_key, limits))
    app.include_router(admin_stats_router)
    app.include_router(admin_judge_router)
    app.include_router(admin_logs_router)
    if settings.metrics_enabled:
        app.include_router(metrics_router)
    mount_dashboard(app)
    mount_api_docs(app)
    app.add_middleware(RequestLimits, limits=HttpLimits.of(settings), json_limits=JsonLimits.of(settings))
    if settings.metrics_enabled:  # outside RequestLimits: its 413/431/408 answers are counted too
        app.add_middleware(RequestMetrics)
    if in_flight is not None:
        app.add_middleware(CountInFlight, in_flight=in_flight)
    if settings.trusted_proxies:  # the client's address from X-Forwarded-For, sent by these proxies only
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.trusted_proxies)
    errors.install(app)  # adds the last-resort 500 outside every other middleware
    contract.install(app)
    return app
