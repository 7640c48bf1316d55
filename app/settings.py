"""All configuration, read from ``BANDITGATE_*`` environment variables (or a ``.env`` file).

Every knob has a default that runs embedded: SQLite in a local file and the in-process event bus and
cache, so ``banditgate serve`` works with nothing else installed. Point ``database_url`` at Postgres and
``redis_url`` at Redis and the same code runs as many cooperating processes.

Where to listen is no setting but the command's: ``banditgate serve --host --port`` (default
127.0.0.1:8000); ``scripts/run.sh`` serves the demo on the port in ``PORT`` (default 8000).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Any, Literal, Self

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

RATE_LIMIT_MAX = 1_000_000  # the largest rate, burst or concurrency a key may be given (setting or tenant)


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
    max_offline_batch: int = Field(
        1_000, gt=0, description="most rows in one POST /admin/tenants/{t}/routers/{r}/observations"
    )
    max_offline_body_bytes: int = Field(
        64 * 1024 * 1024, gt=0, description="largest body of one POST .../observations upload (413 above)"
    )
    embedding_cache_size: int = Field(
        10_000,
        ge=0,
        description="in-process embedding cache entries (in front of Redis's when redis_url is set)",
    )
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
    counter_read_ttl_s: float = Field(
        1.0,
        ge=0,
        allow_inf_nan=False,
        description="a policy that reads its router's decision count (kNN-UCB's round t, as log t) sees "
        "the committed count re-read at most this often, plus this process's own decisions since; "
        "0 = read at every decision",
    )
    db_pool_recycle_s: float = Field(
        300.0, gt=0, description="pooled database connections older than this are replaced on checkout"
    )
    db_pool_size: int = Field(
        5, ge=1, le=1_000, description="Postgres: connections one process keeps pooled (docs/deploy.md)"
    )
    db_max_overflow: int = Field(
        5,
        ge=0,
        le=1_000,
        description="Postgres: connections one process opens beyond db_pool_size under load",
    )
    db_pool_timeout_s: float = Field(
        5.0,
        gt=0,
        allow_inf_nan=False,
        description="Postgres: longest wait for a free pooled connection (then 503 database_unavailable)",
    )
    db_connect_timeout_s: float = Field(
        5.0, gt=0, allow_inf_nan=False, description="Postgres: longest wait for a new connection"
    )
    db_reconnect_backoff_s: float = Field(
        0.05,
        ge=0,
        allow_inf_nan=False,
        description="after a failed connect, new connects fail at once for this long, doubling per "
        "failure up to db_reconnect_backoff_max_s, jittered (0 = no backoff)",
    )
    db_reconnect_backoff_max_s: float = Field(
        1.0, ge=0, allow_inf_nan=False, description="longest wait between connect attempts while down"
    )
    db_retry_after_s: float = Field(
        2.0, gt=0, allow_inf_nan=False, description="Retry-After of a 503 database_unavailable"
    )
    gc_freeze: bool = Field(
        True,
        description="move every object alive once the app has started (the model, the libraries, the "
        "caches) out of the cyclic garbage collector's reach (gc.freeze): a full collection otherwise "
        "walks half a million of them and stops the event loop for about 0.35 s",
    )
    lean_routes: bool = Field(
        True,
        description="serve POST /v1/chat/completions, /v1/images/generations, /route, /feedback and /feedback/batch through lean routes that bind "
        "the endpoint's parameters without FastAPI's per-request dependency solving (app/api/lean.py: "
        "the same validation, errors and answers, about 0.1 ms less CPU a request); false: FastAPI's "
        "own handling",
    )
    search_threads: int = Field(
        1,
        ge=1,
        le=256,
        description="FAISS OpenMP threads of a gateway process (kNN routers search one prompt at a time; "
        "more threads spin on the cores the database and the other requests need)",
    )
    ledger_max_batch: int = Field(
        128,
        ge=1,
        le=4096,
        description="most request writes (decisions, attempts, feedback) committed together in one "
        "transaction by the ledger's group commit (app/store/ledger.py)",
    )
    recent_decisions: int = Field(
        10_000,
        ge=0,
        le=1_000_000,
        description="decisions of this process kept in memory after their commit, so feedback about them "
        "needs no read of the database (app/store/recent_decisions.py; 2.5-2.7 KB each with a "
        "384-dimension embedding); 0 = read every one",
    )
    ledger_inline: bool = Field(
        True,
        description="SQLite only: a request write that finds the ledger's writer idle while the process "
        "serves no other request is committed on the event loop, on a connection that never waits for "
        "SQLite's write lock (the write goes to the writer's thread when the lock is held elsewhere) "
        "and never checkpoints (app/store/ledger_sqlite.py); false: every write goes to the thread",
    )
    ledger_inline_checkpoint_commits: int = Field(
        100,
        ge=1,
        le=100_000,
        description="SQLite with ledger_inline: a PASSIVE WAL checkpoint runs in a worker thread after "
        "this many inline commits (the inline connection makes none itself)",
    )
    event_stream: str = Field("banditgate:events", description="Redis stream that carries the event log")
    event_stream_maxlen: int = Field(1_000_000, gt=0, description="approximate cap on the stream's length")
    stream_block_ms: int = Field(500, gt=0, description="XREAD block time of the stream tailer")
    log_level: str = Field("INFO", description="standard logging level")
    log_upstream_requests: bool = Field(
        False,
        description="log httpx's line per upstream call at INFO (off: every attempt is already recorded in "
        "the attempts table, and the line costs CPU on every forwarded request)",
    )
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
    stats_max_bucket_s: int = Field(
        366 * 86400, gt=0, description="widest time bucket of a stats request, in seconds (wider is a 422)"
    )
    admin_page_max: int = Field(500, gt=0, description="largest page of /admin/decisions and /admin/feedback")
    json_max_depth: int = Field(
        32,
        ge=1,
        le=256,
        description="deepest nesting of any free-form JSON a client sends (metadata, bodies)",
    )
    metadata_max_bytes: int = Field(
        65_536,
        gt=0,
        description="largest `metadata` of a route, feedback event or cascade step (compact JSON)",
    )
    state_import_max_bytes: int = Field(
        67_108_864, gt=0, description="largest body of a router state import, POST .../state (413 above)"
    )
    metrics_enabled: bool = Field(True, description="serve Prometheus metrics at GET /metrics")
    metrics_token: SecretStr | None = Field(
        None, description="Bearer token for GET /metrics; unset = the admin key is needed instead"
    )
    metrics_public: bool = Field(
        False, description="serve GET /metrics without any key (only behind a network you trust)"
    )
    replay_api_key: SecretStr | None = Field(
        None,
        description="Bearer key the replay backends under /replay demand (banditgate demo generates one); "
        "unset = they refuse every call",
    )
    max_body_bytes: int = Field(
        4 * 1024 * 1024,
        gt=0,
        description="largest request body of every endpoint but the bulk uploads (413; the table of "
        "app/api/http_limits.py)",
    )
    body_read_timeout_s: float = Field(
        30.0,
        gt=0,
        allow_inf_nan=False,
        description="a request body must arrive in full within this many seconds of its headers (408)",
    )
    max_header_bytes: int = Field(
        32 * 1024,
        ge=1024,
        description="largest request head (request line and headers; from banditgate serve a 431 under httptools, a 400 under h11; else 431)",
    )
    max_header_count: int = Field(100, gt=0, description="most request headers (431)")
    http_parser: Literal["httptools", "h11"] = Field(
        "httptools",
        description="banditgate serve's HTTP/1.1 parser: httptools (fast; the head bounded by "
        "app/api/http_parser.py) or h11 (pure Python, slower)",
    )
    keep_alive_s: float = Field(
        5.0, gt=0, allow_inf_nan=False, description="an idle keep-alive connection is closed after this"
    )
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
    shadow_concurrency: int = Field(
        4,
        gt=0,
        description="shadow-evaluation calls (a policy's decision.shadow) one process runs at once; "
        "a shadow call over this is refused, not queued",
    )
    probe_shutdown_grace_s: float = Field(
        10.0, ge=0, description="on shutdown, how long running probes may finish before they are cancelled"
    )
    embed_batch_max: int = Field(64, gt=0, description="embedding worker: largest batch")
    embed_batch_wait_ms: float = Field(
        5.0, ge=0, description="embedding worker: longest wait for a batch to fill"
    )

    rate_limit_rps: float = Field(
        1_000.0,
        gt=0,
        le=RATE_LIMIT_MAX,
        allow_inf_nan=False,
        description="requests per second per API key (token bucket refill rate); a tenant's own value "
        "(PUT /admin/tenants/{tenant}/limits) overrides it",
    )
    rate_limit_burst: int = Field(
        2_000, ge=1, le=RATE_LIMIT_MAX, description="token bucket size per API key: requests sent at once"
    )
    rate_limit_concurrency: int = Field(
        256, ge=1, le=RATE_LIMIT_MAX, description="requests one API key may have in flight at once"
    )
    rate_limit_slot_lease_s: float = Field(
        900.0,
        gt=0,
        allow_inf_nan=False,
        description="with Redis: an in-flight slot a crashed process never released expires after this",
    )
    rate_limit_release_delay_s: float = Field(
        0.01,
        ge=0,
        le=1.0,
        allow_inf_nan=False,
        description="with Redis: a released slot is sent with this process's next admission of its key, "
        "or in a batch this long after the release; other processes see it held at most this much longer",
    )
    auth_failure_limit: int = Field(
        50, ge=1, description="wrong keys one client address may send per auth_failure_window_s"
    )
    auth_failure_window_s: float = Field(
        60.0,
        gt=0,
        allow_inf_nan=False,
        description="window of auth_failure_limit (its bucket refills over it)",
    )
    auth_failure_max_addresses: int = Field(
        10_000,
        ge=1,
        description="without Redis, or while it is down: client addresses whose failed authentications "
        "this process remembers; past this many, the least recently failing address is forgotten",
    )
    trusted_proxies: str = Field(
        "",
        description="comma-separated addresses or networks (CIDR) of reverse proxies whose X-Forwarded-For "
        "gives the client's address (the key of the failed-authentication limit); empty = none, every "
        "client is the address it connects from (docs/security.md)",
    )
    rate_limit_prefix: str = Field(
        "banditgate:ratelimit", min_length=1, description="prefix of the rate limiter's Redis keys"
    )

    @field_validator("trusted_proxies")
    @classmethod
    def _proxy_networks(cls, value: str) -> str:
        for item in (part.strip() for part in value.split(",")):
            if item and item != "*":
                ipaddress.ip_network(item, strict=False)  # a ValueError names the bad entry
        return value

    @field_validator("database_url")
    @classmethod
    def _async_driver(cls, url: str) -> str:
        if url.startswith("postgresql://") or url.startswith("postgres://"):
            return "postgresql+asyncpg://" + url.split("://", 1)[1]
        if url.startswith("sqlite:///"):
            return "sqlite+aiosqlite:///" + url.removeprefix("sqlite:///")
        return url


class SettingsView:
    """Base of a frozen dataclass whose fields are named after settings: the part of the configuration
    one mechanism needs (the request limits, the JSON limits), built the one way, ``of(settings)``."""

    @classmethod
    def of(cls, settings: Settings | None = None) -> Self:
        """The fields' values in ``settings``; the settings' defaults when None (no environment read)."""
        names = [field.name for field in dataclasses.fields(cls)]  # type: ignore[arg-type]
        values: dict[str, Any] = (
            {name: Settings.model_fields[name].default for name in names}
            if settings is None
            else {name: getattr(settings, name) for name in names}
        )
        return cls(**values)
