"""Feedback events (``FeedbackReport``): validate, insert idempotently and commit (through the ledger,
app/store/ledger.py), publish; clients' events wait for their own fold (read-your-writes), the
gateway's own (costs, cascade steps) wait for neither the send nor the fold."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import select

from app import metrics
from app.context import AppContext
from app.events import FeedbackMessage
from app.routing import shadow
from app.routing.decide import DIRECT_LABEL
from app.routing.errors import Invalid, NotFound, TooLarge
from app.schemas import FeedbackAccepted
from app.store.ledger import LedgerError, LedgerWrite, OwnerDeleted
from app.store.models import DecisionRow, FeedbackEvent, Router, Tenant


@dataclass(frozen=True)
class FeedbackReport:
    """One feedback event about a decision, as the request path records it: from a client
    (``POST /feedback``, built from its ``FeedbackRequest``) or from the gateway itself (a forwarded
    call's cost, a cascade step, a probe's cost)."""

    decision_id: str
    model: str | None = None
    kind: str = "bandit"
    reward: float | None = None
    cost: float | None = None
    output_embedding: list[float] | None = None
    output_text: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


Resolved = tuple[FeedbackReport, DecisionRow, Router | None, str]  # an item, its decision, router, model


async def record_feedback(
    ctx: AppContext, tenant: Tenant, items: list[FeedbackReport]
) -> list[FeedbackAccepted]:
    """Validate every item first (nothing is written if one is bad), then insert them idempotently in
    one transaction, commit, publish, and wait for this process to fold them.

    The decisions may come from the ledger's memory of what it committed (``recent``), which cannot see
    a deletion on another replica whose message was lost: when the write fails while memory holds one
    of them, they are forgotten and the items resolved again from the database, once (a decision
    deleted since is then a 404, as without memory). So is one deleted between its check and the
    write (``OwnerDeleted``)."""
    resolved = await resolve_feedback(ctx, tenant, items)
    try:
        return await store_feedback(ctx, tenant, resolved, wait=True)
    except LedgerError as exc:
        recent = ctx.ledger.recent
        ids = [item.decision_id for item in items]
        remembered = recent is not None and recent.holds_any(ids)
        if not remembered and not isinstance(exc, OwnerDeleted):
            raise
        if recent is not None and remembered:
            recent.forget(ids)
    resolved = await resolve_feedback(ctx, tenant, items, remembered=False)
    try:
        return await store_feedback(ctx, tenant, resolved, wait=True)
    except OwnerDeleted as exc:
        raise NotFound("a decision of these events was deleted while they were written") from exc


async def resolve_feedback(
    ctx: AppContext, tenant: Tenant, items: list[FeedbackReport], remembered: bool = True
) -> list[Resolved]:
    """Each item with its decision, router and the model it is about; raises on the first bad one.
    The decisions come from the ledger (committed: every decision is durable before its answer; from
    its memory of recent ones unless not ``remembered``), their routers from the catalog (as
    ``/route`` reads them). ``kind: shadow`` items must grade a shadow answer (``shadow.check_graded``)."""
    found = await ctx.ledger.decisions(tenant.id, [item.decision_id for item in items], remembered)
    decisions: dict[str, DecisionRow] = {row.id: row for row in found}
    routers: dict[int, Router] = {}
    for router_id in {row.router_id for row in found if row.router_id is not None}:
        router_row = await ctx.catalog.router_by_id(router_id)
        if router_row is not None:
            routers[router_id] = router_row

    resolved: list[Resolved] = []
    for position, item in enumerate(items):
        where = f"event {position}: " if len(items) > 1 else ""
        decision = decisions.get(item.decision_id)
        if decision is None or (decision.router_id is not None and decision.router_id not in routers):
            raise NotFound(f"{where}decision {item.decision_id!r} not found")
        router = routers[decision.router_id] if decision.router_id is not None else None
        answered_by = (decision.info or {}).get("answered_by")  # set when the gateway forwarded it
        model = item.model or answered_by or (decision.models[0] if decision.models else None)
        if model is None:
            raise Invalid(
                f"{where}the decision called no model; name the model this feedback is about",
            )
        if router is None:  # a direct call: about its backend only; no router, so no reward range
            if model not in decision.models:
                raise Invalid(
                    f"{where}model {model!r} is not the backend this direct call called",
                )
            resolved.append((item, decision, router, model))
            continue
        allowed = set(decision.models) | set(decision.query) | set(router.arms)
        # a shadow call's model stays one to report on after its arm was removed meanwhile
        if model not in allowed and not await shadow.called(ctx, tenant.id, decision.id, model):
            raise Invalid(
                f"{where}model {model!r} is neither in the decision nor an arm of router {router.name!r}",
            )
        if item.reward is not None and not (router.reward_lo <= item.reward <= router.reward_hi):
            raise Invalid(
                f"{where}reward {item.reward} is outside the router's reward range "
                f"[{router.reward_lo}, {router.reward_hi}]",
            )
        resolved.append((item, decision, router, model))
    graded = [(decision.id, model) for item, decision, _, model in resolved if item.kind == shadow.SHADOW]
    await shadow.check_graded(ctx, tenant.id, graded)
    return resolved


async def store_feedback(
    ctx: AppContext,
    tenant: Tenant,
    resolved: list[Resolved],
    wait: bool,
    alongside: LedgerWrite | None = None,
) -> list[FeedbackAccepted]:
    """Insert the events idempotently through the ledger (with ``alongside``'s rows, in one
    transaction), then publish; with ``wait``, until this process folded them (read-your-writes for
    clients)."""
    payloads = [await event_payload(ctx, item) for item, _, _, _ in resolved]
    write = alongside if alongside is not None else LedgerWrite()
    write.feedback = [
        {
            "decision_id": decision.id,
            "tenant_id": tenant.id,
            "router_id": router.id if router is not None else None,
            "model": model,
            "kind": item.kind,
            "reward": item.reward,
            "cost": item.cost,
            "payload": payload,
        }
        for (item, decision, router, model), payload in zip(resolved, payloads, strict=True)
    ]
    inserted = await ctx.ledger.write(write)
    ids = await existing_ids(ctx, resolved, inserted)
    accepted: list[FeedbackAccepted] = []
    fresh: list[FeedbackMessage] = []
    unfolded: list[str] = []  # the kinds of new events about direct calls
    for (item, decision, router, model), payload, (event_id, duplicate) in zip(
        resolved, payloads, ids, strict=True
    ):
        if not duplicate and router is None:  # stored, published to no one: no router folds it
            unfolded.append(item.kind)
        elif not duplicate and router is not None:
            fresh.append(
                FeedbackMessage(
                    event_id=event_id,
                    router_id=router.id,
                    decision_id=decision.id,
                    model=model,
                    kind=item.kind,
                    reward=item.reward,
                    cost=item.cost,
                    embedding=np.frombuffer(decision.embedding, dtype=np.float32).copy(),
                    payload=payload,
                )
            )
        accepted.append(
            FeedbackAccepted(
                event_id=event_id, decision_id=decision.id, model=model, kind=item.kind, duplicate=duplicate
            )
        )
    names = {router.id: router.name for _, _, router, _ in resolved if router is not None}
    for message in fresh:
        metrics.count_feedback(tenant.name, names[message.router_id], message.kind)
    for kind in unfolded:
        metrics.count_feedback(tenant.name, DIRECT_LABEL, kind)
    await publish_feedback(ctx, fresh, wait)
    return accepted


async def event_payload(ctx: AppContext, item: FeedbackReport) -> dict[str, object]:
    """An event's ``payload``: the output's embedding (``output_text`` embedded here) and metadata."""
    payload: dict[str, object] = {}
    if item.output_embedding is not None:
        payload["output_embedding"] = item.output_embedding
    elif item.output_text is not None:
        if len(item.output_text) > ctx.settings.max_prompt_chars:
            raise TooLarge(
                f"output_text has {len(item.output_text)} characters; the limit is {ctx.settings.max_prompt_chars}",
            )
        vector, _ = await ctx.embeddings.embed(item.output_text)
        payload["output_embedding"] = [float(v) for v in vector]
    if item.metadata:
        payload["metadata"] = item.metadata
    return payload


async def existing_ids(
    ctx: AppContext, resolved: list[Resolved], ids: list[int | None]
) -> list[tuple[int, bool]]:
    """Each event's (id, duplicate): a duplicate's (None from the ledger) is the stored event's with
    its key, read back (no read when there is none)."""
    known = [(event_id, False) for event_id in ids if event_id is not None]
    if len(known) == len(ids):
        return known
    out: list[tuple[int, bool]] = []
    async with ctx.sessionmaker() as session:
        for (item, decision, _, model), event_id in zip(resolved, ids, strict=True):
            if event_id is not None:
                out.append((event_id, False))
                continue
            stored = await session.scalar(
                select(FeedbackEvent.id).where(
                    FeedbackEvent.decision_id == decision.id,
                    FeedbackEvent.model == model,
                    FeedbackEvent.kind == item.kind,
                )
            )
            out.append((int(stored or 0), True))
    return out


async def publish_feedback(ctx: AppContext, messages: list[FeedbackMessage], wait: bool = True) -> None:
    """Queue committed events for the bus's publisher (``EventBus.publish_soon``: what queues while it
    sends goes in its next send, one pipelined round trip under load). A failed send loses nothing: the
    events are in the database, this process folds them itself at once and replicas at their next
    resync. With ``wait`` (clients' events), return once this process folded them (at most
    ``read_your_writes_timeout_s``); without (the gateway's own), at once."""
    for message in messages:
        await ctx.bus.publish_soon(message)
    timeout = ctx.settings.read_your_writes_timeout_s
    if timeout <= 0 or not wait:
        return
    for message in messages:
        await ctx.states.wait_folded(message.router_id, message.event_id, timeout)
