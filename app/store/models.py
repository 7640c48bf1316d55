"""SQLAlchemy tables. Postgres is the source of truth; SQLite runs the same schema embedded.

``feedback`` is the event log: its autoincrement id orders events, and the unique key
``(decision_id, model, kind)`` makes a retried POST idempotent. An ``offline`` event (a logged outcome
uploaded as a warm start) has no decision: it carries its own ``embedding`` and the uploader's
``row_id``, unique per router, so a retried upload is learned once. ``snapshots`` hold folded policy
states with the last event id they include (``watermark``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from routers.hyperparameters import MAX_NAME

# SQLite only autoincrements INTEGER PRIMARY KEY columns.
BigId = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class Tenant(Base):
    __tablename__ = "tenants"
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # Each key's limits (app/ratelimit/limits.py); NULL = the settings' default.
    rate_limit_rps: Mapped[float | None] = mapped_column(Float, nullable=True)
    rate_limit_burst: Mapped[int | None] = mapped_column(Integer, nullable=True)
    rate_limit_concurrency: Mapped[int | None] = mapped_column(Integer, nullable=True)


class ApiKey(Base):
    __tablename__ = "api_keys"
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(100), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Backend(Base):
    __tablename__ = "backends"
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(MAX_NAME), unique=True)
    kind: Mapped[str] = mapped_column(String(16), default="chat")
    base_url: Mapped[str] = mapped_column(Text)
    upstream_model: Mapped[str | None] = mapped_column(String(MAX_NAME), nullable=True)
    usd_per_mtok_in: Mapped[float] = mapped_column(Float, default=0.0)
    usd_per_mtok_out: Mapped[float] = mapped_column(Float, default=0.0)
    usd_per_call: Mapped[float] = mapped_column(Float, default=0.0)
    default_tokens_out: Mapped[int] = mapped_column(Integer, default=256)
    timeout_s: Mapped[float] = mapped_column(Float, default=60.0)
    api_key_secret: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


class Router(Base):
    __tablename__ = "routers"
    __table_args__ = (UniqueConstraint("tenant_id", "name", name="uq_router_tenant_name"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    policy: Mapped[str] = mapped_column(String(100))
    hyperparameters: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    arms: Mapped[list[Any]] = mapped_column(JSON, default=list)
    reward_lo: Mapped[float] = mapped_column(Float, default=0.0)
    reward_hi: Mapped[float] = mapped_column(Float, default=1.0)
    seed: Mapped[int] = mapped_column(BigInteger, default=0)
    is_default: Mapped[bool] = mapped_column(Boolean, default=False)
    version: Mapped[int] = mapped_column(Integer, default=1)
    # Gateway-driven cascades: app.schemas.JudgeConfig's stored form ({"url"|"backend", "threshold", ...});
    # a score below the threshold calls the next model. Null: no judge.
    judge: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=None)
    # The judge measured on a labelled set (app/routing/judge_labels.py): {tpr, tnr, pearson, n, ...}
    judge_measured: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=None)
    # {"strategy", "max_tokens"} of embeddings.prompt_text.EmbedText; null = the default rule
    embed_text: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


class RouterCounter(Base):
    """How many decisions a router made, and how many of them were query rounds, since its state was last
    reset or imported. Policies that count their own selects (kNN-UCB's t, BALROG's query budget) get
    these through ``Context``, so the counts survive restarts and are shared by replicas."""

    __tablename__ = "router_counters"
    router_id: Mapped[int] = mapped_column(
        BigId, ForeignKey("routers.id", ondelete="CASCADE"), primary_key=True
    )
    decisions: Mapped[int] = mapped_column(BigInteger, default=0)
    query_rounds: Mapped[int] = mapped_column(BigInteger, default=0)


class DecisionRow(Base):
    __tablename__ = "decisions"
    __table_args__ = (Index("ix_decisions_router_created", "router_id", "created_at"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    # null for a direct call (``model: "<backend>"`` on /v1): no router decided it, none learns from it
    router_id: Mapped[int | None] = mapped_column(ForeignKey("routers.id", ondelete="CASCADE"), nullable=True)
    router_version: Mapped[int] = mapped_column(Integer)
    policy: Mapped[str] = mapped_column(String(100))
    models: Mapped[list[Any]] = mapped_column(JSON)
    query: Mapped[list[Any]] = mapped_column(JSON, default=list)
    scores: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    info: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    embedding: Mapped[bytes] = mapped_column(LargeBinary)
    prompt_hash: Mapped[str] = mapped_column(String(64))
    prompt_chars: Mapped[int] = mapped_column(Integer)
    request_metadata: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class FeedbackEvent(Base):
    __tablename__ = "feedback"
    __table_args__ = (
        UniqueConstraint("decision_id", "model", "kind", name="uq_feedback_decision_model_kind"),
        UniqueConstraint("router_id", "row_id", name="uq_feedback_router_row"),
        Index("ix_feedback_router_id", "router_id", "id"),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    # null for an offline event (kind ``offline``): no decision made it
    decision_id: Mapped[str | None] = mapped_column(
        ForeignKey("decisions.id", ondelete="CASCADE"), nullable=True
    )
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    router_id: Mapped[int | None] = mapped_column(  # null: about a direct call, folded by no router
        ForeignKey("routers.id", ondelete="CASCADE"), nullable=True
    )
    model: Mapped[str] = mapped_column(String(MAX_NAME))
    kind: Mapped[str] = mapped_column(String(32))
    reward: Mapped[float | None] = mapped_column(Float, nullable=True)
    cost: Mapped[float | None] = mapped_column(Float, nullable=True)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # an offline event's own identity and context (null for the events of a decision)
    row_id: Mapped[str | None] = mapped_column(String(MAX_NAME), nullable=True)
    embedding: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Snapshot(Base):
    __tablename__ = "snapshots"
    __table_args__ = (Index("ix_snapshots_router_id", "router_id", "id"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    router_id: Mapped[int] = mapped_column(ForeignKey("routers.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))  # reset | import | periodic
    config_hash: Mapped[str] = mapped_column(String(64))
    watermark: Mapped[int] = mapped_column(BigInteger)
    events_folded: Mapped[int] = mapped_column(BigInteger, default=0)
    # deferred: finding the newest snapshot or its watermark must not pull megabytes of state;
    # load_runtime reads the one blob it restores (eventlog.snapshot_state)
    state: Mapped[bytes] = mapped_column(LargeBinary, deferred=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Attempt(Base):
    """One upstream call made while forwarding a decision: every try, retries and fallbacks included.
    ``outcome``: ok | http_error | timeout | connection | bad_response."""

    __tablename__ = "attempts"
    __table_args__ = (Index("ix_attempts_decision_id", "decision_id", "id"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    decision_id: Mapped[str] = mapped_column(ForeignKey("decisions.id", ondelete="CASCADE"))
    model: Mapped[str] = mapped_column(String(MAX_NAME))
    number: Mapped[int] = mapped_column(Integer)
    outcome: Mapped[str] = mapped_column(String(32))
    http_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    latency_ms: Mapped[float] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Probe(Base):
    """An extra call of a forwarded decision: another model's answer to its prompt, called by the gateway
    off the client's path. ``kind``: ``query`` (the policy asked for that model's reward,
    ``decision.query``) or ``shadow`` (shadow evaluation, ``decision.shadow``); graded by feedback of the
    same kind. ``status``: pending (answered by the backend, waiting for that feedback) | answered |
    failed | refused (a shadow call its bounds did not allow; ``error`` names the reason)."""

    __tablename__ = "probes"
    __table_args__ = (
        UniqueConstraint("decision_id", "model", name="uq_probes_decision_model"),
        Index("ix_probes_tenant_status", "tenant_id", "status", "id"),
        Index("ix_probes_router_kind", "router_id", "kind", "created_at"),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    decision_id: Mapped[str] = mapped_column(ForeignKey("decisions.id", ondelete="CASCADE"))
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    router_id: Mapped[int] = mapped_column(ForeignKey("routers.id", ondelete="CASCADE"))
    model: Mapped[str] = mapped_column(String(MAX_NAME))
    kind: Mapped[str] = mapped_column(String(16), default="query", server_default="query")
    answer: Mapped[str | None] = mapped_column(Text, nullable=True)
    cost: Mapped[float | None] = mapped_column(Float, nullable=True)
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
