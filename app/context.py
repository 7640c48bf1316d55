"""The process-wide objects the lifespan opens and closes, held on ``app.state.ctx``."""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.backends import BackendClient
from app.bus import EventBus
from app.catalog import Catalog
from app.compaction import CompactionLoop
from app.embedding import EmbeddingService
from app.ratelimit.limits import RateLimiter
from app.routing.probe_tasks import ProbeRunner
from app.routing.round_counts import RoundCounts
from app.settings import Settings
from app.state import PolicyStates
from app.store.ledger import Ledger


@dataclass
class AppContext:
    settings: Settings
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    redis: Redis | None
    bus: EventBus
    states: PolicyStates
    embeddings: EmbeddingService
    backends: BackendClient
    catalog: Catalog
    limiter: RateLimiter
    ledger: Ledger  # the request path's group-committed writes (app/store/ledger.py)
    round_counts: RoundCounts  # what ``read`` policies see of their router's counts
    compaction: CompactionLoop | None = None
    probes: ProbeRunner | None = None  # made on first use (app/routing/probes.py)
