"""Reads and writes of the event log and the snapshots (the state model of docs/architecture.md)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import func, select, true
from sqlalchemy.ext.asyncio import AsyncSession

from app.events import FeedbackMessage
from app.store.models import DecisionRow, FeedbackEvent, Router, Snapshot


def config_hash(router: Router) -> str:
    """What a learned state depends on besides the arms: policy, hyperparameters and seed."""
    blob = json.dumps(
        {"policy": router.policy, "hyperparameters": router.hyperparameters, "seed": router.seed},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def to_message(event: FeedbackEvent, decision_embedding: bytes | None) -> FeedbackMessage:
    """The event as the bus carries it: an offline event's own embedding and row id stand in for a
    decision's (``FeedbackMessage.decision_id`` is the row id then, the key the policy sees)."""
    assert event.router_id is not None  # read by router: events of direct calls are never folded
    embedding = event.embedding if event.embedding is not None else decision_embedding
    key = event.decision_id if event.decision_id is not None else event.row_id
    assert embedding is not None and key is not None  # a decision's event, or an offline one
    return FeedbackMessage(
        event_id=event.id,
        router_id=event.router_id,
        decision_id=key,
        model=event.model,
        kind=event.kind,
        reward=event.reward,
        cost=event.cost,
        embedding=np.frombuffer(embedding, dtype=np.float32).copy(),
        payload=dict(event.payload or {}),
    )


async def events_after(
    session: AsyncSession,
    router_id: int,
    watermark: int,
    skip: Iterable[int] = (),
    chunk: int = 5_000,
    up_to: int | None = None,
) -> list[FeedbackMessage]:
    """Every event of ``router_id`` with id > ``watermark`` (and <= ``up_to`` when given) and not in
    ``skip``, in log order."""
    skip_ids = set(skip)
    out: list[FeedbackMessage] = []
    last = watermark
    while True:
        rows = (
            await session.execute(
                select(FeedbackEvent, DecisionRow.embedding)
                .outerjoin(DecisionRow, DecisionRow.id == FeedbackEvent.decision_id)  # offline: none
                .where(FeedbackEvent.router_id == router_id, FeedbackEvent.id > last)
                .where(FeedbackEvent.id <= up_to if up_to is not None else true())
                .order_by(FeedbackEvent.id)
                .limit(chunk)
            )
        ).all()
        for event, embedding in rows:
            if event.id not in skip_ids:
                out.append(to_message(event, embedding))
        if len(rows) < chunk:
            return out
        last = rows[-1][0].id


async def max_event_id(session: AsyncSession, router_id: int) -> int:
    value = await session.scalar(
        select(func.max(FeedbackEvent.id)).where(FeedbackEvent.router_id == router_id)
    )
    return int(value or 0)


async def event_ids_between(session: AsyncSession, router_id: int, low: int, high: int) -> list[int]:
    """Ids of the router's events in (low, high]."""
    rows = await session.scalars(
        select(FeedbackEvent.id).where(
            FeedbackEvent.router_id == router_id, FeedbackEvent.id > low, FeedbackEvent.id <= high
        )
    )
    return [int(i) for i in rows]


async def settled_event_id(session: AsyncSession, router_id: int, cutoff: datetime) -> int:
    """The largest id of the router's events created before ``cutoff`` (0 if none).

    Ids are allocated in order but committed out of order. If every feedback transaction commits (or
    aborts) within the safety lag of its row being created, then once ``cutoff = now - lag`` has passed
    an event created before it, every smaller id that will ever commit has committed: a snapshot may
    claim everything up to this id (see docs/scaleout.md, "The watermark rule").
    """
    value = await session.scalar(
        select(func.max(FeedbackEvent.id)).where(
            FeedbackEvent.router_id == router_id, FeedbackEvent.created_at < cutoff
        )
    )
    return int(value or 0)


async def newest_snapshot(session: AsyncSession, router_id: int, kinds: tuple[str, ...]) -> Snapshot | None:
    result: Snapshot | None = await session.scalar(
        select(Snapshot)
        .where(Snapshot.router_id == router_id, Snapshot.kind.in_(kinds))
        .order_by(Snapshot.id.desc())
        .limit(1)
    )
    return result


async def snapshot_state(session: AsyncSession, snapshot: Snapshot) -> bytes | None:
    """A snapshot's encoded state (a deferred column: read only when a policy is restored from it);
    None when the snapshot was deleted since it was found (its router's state reset, or the router
    deleted)."""
    result = await session.execute(select(Snapshot.state).where(Snapshot.id == snapshot.id))
    state = result.scalar_one_or_none()
    return None if state is None else bytes(state)


async def starting_snapshot(session: AsyncSession, router: Router) -> Snapshot | None:
    """Where a replica starts folding: the newest reset/import snapshot, or a newer periodic snapshot
    taken under the router's current configuration."""
    base = await newest_snapshot(session, router.id, ("reset", "import"))
    periodic = await newest_snapshot(session, router.id, ("periodic",))
    if (
        periodic is not None
        and periodic.config_hash == config_hash(router)
        and (base is None or periodic.id > base.id)
    ):
        return periodic
    return base


def snapshot_row(router: Router, kind: str, watermark: int, events_folded: int, state: bytes) -> Snapshot:
    return Snapshot(
        router_id=router.id,
        kind=kind,
        config_hash=config_hash(router),
        watermark=watermark,
        events_folded=events_folded,
        state=state,
    )


def payload_embedding(payload: dict[str, Any]) -> np.ndarray | None:
    raw = payload.get("output_embedding")
    return None if raw is None else np.asarray(raw, dtype=np.float32)
