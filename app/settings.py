"""All configuration, read from ``BANDITGATE_*`` environment variables (or a ``.env`` file).

Every knob has a default that runs embedded: SQLite in a local file and the in-process event bus and
cache, so ``banditgate serve`` works with nothing else installed. Point ``database_url`` at Postgres and
``redis_url`` at Redis and the same code runs as many cooperating processes.
"""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BANDITGATE_", env_file=".env", extra="ignore")

    database_url: str = Field(
        "sqlite+aiosqlite:///./banditgate.db",
        description="SQLAlchemy async URL: sqlite+aiosqlite:///FILE (embedded) or postgresql+asyncpg://...",
    )
    redis_url: str | None = Field(
        None, description="redis://host:port/db; unset = in-process event bus and cache (one process only)"
    )
    admin_key: SecretStr | None = Field(None, description="Bearer key for /admin; unset = admin API disabled")
    embedder: str = Field("minilm", description="minilm (all-MiniLM-L6-v2, offline) or hashing[:dim]")
    embedder_device: str = Field("cpu", description="torch device for the embedder")
    clip_weights: str | None = Field(None, description="local OpenCLIP checkpoint for a clip:<arch> embedder")
    max_prompt_chars: int = Field(32_000, gt=0, description="longer prompts get 413")
    max_feedback_batch: int = Field(1_000, gt=0, description="most events in one POST /feedback/batch")
    embedding_cache_size: int = Field(10_000, ge=0, description="in-process embedding cache entries")
    embedding_cache_ttl_s: int = Field(7 * 24 * 3600, gt=0, description="Redis embedding cache TTL")
    read_your_writes_timeout_s: float = Field(
        2.0, ge=0, description="how long POST /feedback waits for its own process to fold the event"
    )
    catalog_ttl_s: float = Field(
        5.0,
        ge=0,
        description="longest life of a cached key, router or backend (app/catalog.py); changes also clear "
        "every replica's cache over the bus at once; 0 = no caching",
    )
    db_pool_recycle_s: float = Field(
        300.0, gt=0, description="pooled database connections older than this are replaced on checkout"
    )
    event_stream: str = Field("banditgate:events", description="Redis stream that carries the event log")
    event_stream_maxlen: int = Field(1_000_000, gt=0, description="approximate cap on the stream's length")
    stream_block_ms: int = Field(500, gt=0, description="XREAD block time of the stream tailer")
    log_level: str = Field("INFO", description="standard logging level")
    judge_timeout_s: float = Field(
        10.0, gt=0, description="how long a router's judge may take to score an answer"
    )
    judge_max_steps: int = Field(5, ge=1, le=50, description="most calls of one gateway-driven cascade")
    secret_key: SecretStr | None = Field(
        None, description="encrypts backend API keys at rest (Fernet); unset = backend keys are refused"
    )
    forward_max_retries: int = Field(2, ge=0, le=10, description="retries per backend on 429/5xx/timeout")
    forward_backoff_s: float = Field(
        0.2, ge=0, allow_inf_nan=False, description="base of the jittered exponential retry backoff"
    )
    forward_max_retry_after_s: float = Field(
        10.0, ge=0, allow_inf_nan=False, description="longest Retry-After honoured; longer = fall back"
    )
    forward_max_fallbacks: int = Field(
        2, ge=0, le=20, description="other backends tried (policy's next choice) after one fails"
    )
    forward_max_connections: int = Field(200, gt=0, description="pooled upstream connections, all backends")
    replay_dataset: str | None = Field(
        None,
        description="a replay dataset directory served as backends under /replay (banditgate demo sets it)",
    )
    stats_max_buckets: int = Field(
        2_000, gt=0, description="most time buckets one /admin/.../stats request may ask for"
    )
    admin_page_max: int = Field(500, gt=0, description="largest page of /admin/decisions and /admin/feedback")
    metrics_enabled: bool = Field(True, description="serve Prometheus metrics at GET /metrics")
    snapshot_interval_s: float = Field(30.0, gt=0, description="how often the snapshotter worker runs")
    snapshot_lag_s: float = Field(
        10.0, ge=0, description="snapshots claim only events created at least this long ago"
    )
    snapshot_keep: int = Field(3, ge=1, description="periodic snapshots kept per router (older ones deleted)")
    compact_interval_s: float = Field(
        60.0, ge=0, description="how often a gateway bounds its folded-id sets (0 = never)"
    )
    embed_pool: bool = Field(False, description="send embedding requests to the worker pool (needs Redis)")
    embed_stream: str = Field("banditgate:embed", description="Redis stream of embedding requests")
    embed_timeout_s: float = Field(
        2.0, gt=0, description="wait for the pool this long, then embed in-process"
    )
    embed_max_in_flight: int = Field(
        256,
        gt=0,
        description="pool requests one gateway process waits on at once (its own Redis connections)",
    )
    probe_concurrency: int = Field(
        4, gt=0, description="active-learning probe calls (balrog's decision.query) one process runs at once"
    )
    probe_shutdown_grace_s: float = Field(
        10.0, ge=0, description="on shutdown, how long running probes may finish before they are cancelled"
    )
    embed_batch_max: int = Field(64, gt=0, description="embedding worker: largest batch")
    embed_batch_wait_ms: float = Field(
        5.0, ge=0, description="embedding worker: longest wait for a batch to fill"
    )

    @field_validator("database_url")
    @classmethod
    def _async_driver(cls, url: str) -> str:
        if url.startswith("postgresql://") or url.startswith("postgres://"):
            return "postgresql+asyncpg://" + url.split("://", 1)[1]
        if url.startswith("sqlite:///"):
            return "sqlite+aiosqlite:///" + url.removeprefix("sqlite:///")
        return url
