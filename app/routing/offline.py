"""Offline events: a team's logged outcomes written into a router's event log as a warm start.

A row is one logged call, ``(row id, prompt or embedding, model, reward, cost)``. It becomes one
``feedback`` event of kind ``offline`` with no decision: the event carries the prompt's embedding (the
row's own, or the prompt embedded on upload under the router's embed-text rule, as ``/route`` embeds)
and the row id, unique per router (``uq_feedback_router_row``), so a retried or resumed upload inserts
only the rows not seen before and each row is learned once. Committed rows are published like any
feedback: every replica folds them (``app.state.fold``: an ``Observation(kind="offline")`` with the row
id as ``decision_key``, through the policy's ordinary ``update``), and a replay or snapshot rebuild of
the log includes them. A router reset forgets them with everything else; the rows keep their ids, so
re-teaching a reset router needs new ids (``banditgate warm-start --id-prefix``).

The logged outcomes of direct calls (``model: "<backend>"`` on ``/v1``: decisions of no router, see
``app.routing.decide.decide_direct``) are one more source: ``import_direct_calls`` turns their rewarded
feedback into offline rows of a router, with the embedding logged with the call.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app import metrics
from app.context import AppContext
from app.events import FeedbackMessage
from app.routing.errors import Invalid, TooLarge
from app.routing.feedback import publish_feedback
from app.schemas import DirectCallsImported, ObservationsAccepted, OfflineRow
from app.store.models import DecisionRow, FeedbackEvent, Router, Tenant
from app.store.statements import upsert_for
from embeddings.prompt_text import EmbedText
from routers.base import unit

OFFLINE = "offline"
DIRECT_ROW_PREFIX = "direct:"  # row ids of imported direct calls: direct_row_id


@dataclass(frozen=True)
class OfflineEvent:
    """A validated row, embedded: what one offline event stores."""

    row_id: str
    model: str
    reward: float
    cost: float | None
    embedding: np.ndarray


def check_row(router: Router, row: OfflineRow, where: str) -> None:
    """Invalid unless the row's model is an arm of the router and its reward lies in the router's range."""
    if row.model not in router.arms:
        raise Invalid(
            f"{where}model {row.model!r} is not an arm of router {router.name!r} (arms: {router.arms})"
        )
    if not router.reward_lo <= row.reward <= router.reward_hi:
        raise Invalid(
            f"{where}reward {row.reward} is outside the router's reward range "
            f"[{router.reward_lo}, {router.reward_hi}]"
        )


async def embed_rows(ctx: AppContext, router: Router, rows: Sequence[OfflineRow]) -> list[OfflineEvent]:
    """Check every row first (nothing is embedded or written if one is bad), then embed the prompts
    (the embedding cache makes a prompt logged for several models one embedding)."""
    dim = ctx.embeddings.dim
    for position, row in enumerate(rows):
        where = f"row {position} ({row.id!r}): "
        check_row(router, row, where)
        if row.prompt is not None and len(row.prompt) > ctx.settings.max_prompt_chars:
            raise TooLarge(
                f"{where}prompt has {len(row.prompt)} characters; the limit is {ctx.settings.max_prompt_chars}"
            )
        if row.embedding is not None and len(row.embedding) != dim:
            raise Invalid(
                f"{where}embedding has dimension {len(row.embedding)}; the gateway's embedder has {dim}"
            )
    rule = EmbedText.from_config(router.embed_text)
    events = []
    for row in rows:
        if row.prompt is not None:
            vector = await ctx.embeddings.embed_prompt(row.prompt, rule)
        else:
            vector = unit(np.asarray(row.embedding, dtype=np.float32))
        events.append(OfflineEvent(row.id, row.model, row.reward, row.cost, vector))
    return events


async def store_offline(
    ctx: AppContext, session: AsyncSession, tenant: Tenant, router: Router, events: Sequence[OfflineEvent]
) -> tuple[int, int | None]:
    """Insert the events in one transaction, skipping row ids the router already holds; commit, publish,
    and wait until this process folded them. Returns (new rows, the newest event id written)."""
    fresh: list[FeedbackMessage] = []
    for event in events:
        outcome = {"model": event.model, "kind": OFFLINE, "reward": event.reward, "cost": event.cost}
        vector = np.asarray(event.embedding, np.float32)
        statement = (
            upsert_for(session)(FeedbackEvent)
            .values(
                **outcome,
                decision_id=None,
                tenant_id=tenant.id,
                router_id=router.id,
                payload={},
                row_id=event.row_id,
                embedding=vector.tobytes(),
            )
            .on_conflict_do_nothing(index_elements=["router_id", "row_id"])
            .returning(FeedbackEvent.id)
        )
        event_id = await session.scalar(statement)
        if event_id is None:  # this router holds the row id already (or it came twice in this upload)
            continue
        message = FeedbackMessage(int(event_id), router.id, event.row_id, embedding=vector, **outcome)  # type: ignore[arg-type]
        fresh.append(message)
    await session.commit()
    for _ in fresh:
        metrics.count_feedback(tenant.name, router.name, OFFLINE)
    await publish_feedback(ctx, fresh, wait=True)
    return len(fresh), (fresh[-1].event_id if fresh else None)


async def record_offline(
    ctx: AppContext, session: AsyncSession, tenant: Tenant, router: Router, rows: Sequence[OfflineRow]
) -> ObservationsAccepted:
    """Validate, embed and store one upload (all rows are accepted, or none: the error names the row)."""
    if len(rows) > ctx.settings.max_offline_batch:
        raise TooLarge(f"{len(rows)} rows in one upload; the limit is {ctx.settings.max_offline_batch}")
    events = await embed_rows(ctx, router, rows)
    new, last = await store_offline(ctx, session, tenant, router, events)
    return ObservationsAccepted(rows=len(rows), new=new, duplicates=len(rows) - new, last_event_id=last)


def direct_row_id(decision_id: str, model: str) -> str:
    """``direct:<decision id>/<first 16 hex digits of sha256(model)>``: the same for the same call and
    model (an import is idempotent), and at most 7 + 32 + 1 + 16 = 56 characters whatever the model's
    name (a backend name may be as long as the row id column: both are ``MAX_NAME``)."""
    return f"{DIRECT_ROW_PREFIX}{decision_id}/{hashlib.sha256(model.encode()).hexdigest()[:16]}"


async def import_direct_calls(
    ctx: AppContext, session: AsyncSession, tenant: Tenant, router: Router, after: int, limit: int
) -> DirectCallsImported:
    """One page of the tenant's direct-call feedback (events of no router with a reward, kind ``bandit``,
    ids > ``after``, oldest first, at most ``limit``) written as offline rows of ``router``: row id
    ``direct_row_id``, the embedding the direct call logged (its whole prompt text; the
    router's embed-text rule is not applied, the text is not kept), the reward, and the cost the gateway
    recorded for that call (its ``cost`` event) when there is one. Events about a model that is not an arm
    of the router, or with a reward outside its range, are skipped and counted. Idempotent: a page
    imported twice writes nothing new. (``limit`` is at most ``max_offline_batch``: the API checks it.)"""
    page = (
        await session.execute(
            select(FeedbackEvent, DecisionRow.embedding)
            .join(DecisionRow, DecisionRow.id == FeedbackEvent.decision_id)
            .where(
                FeedbackEvent.tenant_id == tenant.id,
                FeedbackEvent.router_id.is_(None),
                FeedbackEvent.kind == "bandit",
                FeedbackEvent.reward.is_not(None),
                FeedbackEvent.id > after,
            )
            .order_by(FeedbackEvent.id)
            .limit(limit)
        )
    ).all()
    costs = await _direct_costs(session, [event.decision_id for event, _ in page if event.decision_id])
    events: list[OfflineEvent] = []
    for event, embedding in page:
        assert event.decision_id is not None and event.reward is not None  # as selected
        reward = float(event.reward)
        if event.model not in router.arms or not router.reward_lo <= reward <= router.reward_hi:
            continue
        cost = event.cost if event.cost is not None else costs.get((event.decision_id, event.model))
        vector = np.frombuffer(embedding, dtype=np.float32).copy()
        events.append(
            OfflineEvent(direct_row_id(event.decision_id, event.model), event.model, reward, cost, vector)
        )
    new, _ = await store_offline(ctx, session, tenant, router, events)
    return DirectCallsImported(
        scanned=len(page),
        new=new,
        duplicates=len(events) - new,
        skipped=len(page) - len(events),
        next_after=int(page[-1][0].id) if len(page) == limit else None,
    )


async def _direct_costs(session: AsyncSession, decision_ids: list[str]) -> dict[tuple[str, str], float]:
    """The gateway's ``cost`` events of these direct decisions, by (decision id, model)."""
    if not decision_ids:
        return {}
    rows = await session.execute(
        select(FeedbackEvent.decision_id, FeedbackEvent.model, FeedbackEvent.cost).where(
            FeedbackEvent.decision_id.in_(decision_ids),
            FeedbackEvent.kind == "cost",
            FeedbackEvent.cost.is_not(None),
        )
    )
    return {(str(d), str(m)): float(c) for d, m, c in rows if c is not None}
