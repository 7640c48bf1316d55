"""The request path: resolve the router, embed, select, log the decision; record and publish feedback.

A decision is committed to the database before ``/route`` answers. Feedback is acknowledged only after
its row is committed; it is then published on the bus, and the handler waits (briefly, configurable) for
its own process to fold it, so a client that routes again right after its feedback sees what it taught.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app import metrics
from app.context import AppContext
from app.embedding import prompt_hash
from app.errors import Invalid, NotFound, TooLarge
from app.events import FeedbackMessage
from app.jsonable import jsonable
from app.schemas import FeedbackAccepted, RouteRequest, RouteResponse
from app.store.models import DecisionRow, FeedbackEvent, Router, RouterCounter, Tenant
from embeddings.prompt_text import EmbedText
from routers.base import Context
from routers.base import decision_rng as keyed_rng
from routers.replay_format import call_cost, decision_key, estimated_tokens

log = logging.getLogger(__name__)

DIRECT = "direct"  # the mode (and policy) of a decision that called a backend by name
DIRECT_LABEL = "(direct)"  # the router label of direct calls in metrics: no router name has parentheses


async def resolve_router(ctx: AppContext, tenant: Tenant, name: str | None) -> Router:
    """The tenant's router ``name`` (its default when None), from the catalog cache: a detached row,
    read-only."""
    router = await ctx.catalog.router(tenant.id, name)
    if router is None:
        what = "no default router is set for this tenant" if name is None else f"router {name!r} not found"
        raise NotFound(what)
    return router


async def expected_costs(ctx: AppContext, arms: list[str], prompt_chars: int) -> dict[str, float]:
    """Expected cost of calling each arm on this prompt: prompt characters / 4 input tokens and the
    backend's ``default_tokens_out`` output tokens (an expectation, so not rounded to whole tokens: the
    replay benchmark's estimate, which ``bench e2e`` relies on to show policies the same costs)."""
    backends = await ctx.catalog.backends(arms)
    tokens_in = estimated_tokens(prompt_chars)
    return {b.name: call_cost(b, tokens_in, b.default_tokens_out) for b in backends}


def decision_rng(seed: int, decision_id: str, request_seed: int | None = None) -> np.random.Generator:
    """Randomness of one decision, from the router's seed and the decision id (or the client's request
    ``seed`` when it sent one): replicas with the same learned state make the same choice for the same
    decision, whatever else they served, and a client that replays the same seeded requests gets the
    same choices (``bench e2e`` matches the simulator's ``round_rng`` this way)."""
    return keyed_rng(seed, decision_key(decision_id, request_seed))


async def route(
    ctx: AppContext, session: AsyncSession, tenant: Tenant, request: RouteRequest
) -> RouteResponse:
    return (await decide(ctx, session, tenant, request))[0]


async def admit(ctx: AppContext, tenant: Tenant) -> None:
    """The tenant's rate limits, checked before every decision, routed or direct. None exist yet: a
    limiter raises a 429 here (which ``/v1`` answers in OpenAI's shape)."""


def prompt_text(ctx: AppContext, request: RouteRequest) -> str:
    """The request's text to embed; 413 above ``max_prompt_chars``, 422 when empty."""
    text = request.text()
    if len(text) > ctx.settings.max_prompt_chars:
        raise TooLarge(
            f"prompt has {len(text)} characters; the limit is {ctx.settings.max_prompt_chars}",
        )
    if not text.strip():
        raise Invalid("the prompt is empty")
    return text


async def tenant_backends(session: AsyncSession, tenant: Tenant) -> list[str]:
    """The backends the tenant may call directly: the arms of its routers, sorted."""
    arms = await session.scalars(select(Router.arms).where(Router.tenant_id == tenant.id))
    return sorted({str(arm) for router_arms in arms for arm in router_arms})


async def decide_direct(
    ctx: AppContext, session: AsyncSession, tenant: Tenant, backend: str, request: RouteRequest
) -> RouteResponse:
    """Log a direct call of ``backend`` (an arm of one of the tenant's routers): a decision of mode
    ``direct`` and of no router, with the prompt's embedding, so its feedback can be imported as
    logged outcomes later; no policy is asked and none learns from it."""
    await admit(ctx, tenant)
    text = prompt_text(ctx, request)
    with metrics.time_embedding():
        embedding, digest = await ctx.embeddings.embed(text)
    decision_id = uuid.uuid4().hex
    info = {"mode": DIRECT, **({"seed": request.seed} if request.seed is not None else {})}
    session.add(
        DecisionRow(
            id=decision_id,
            tenant_id=tenant.id,
            router_id=None,
            router_version=0,
            policy=DIRECT,
            models=[backend],
            query=[],
            scores={},
            info=info,
            embedding=np.asarray(embedding, np.float32).tobytes(),
            prompt_hash=digest,
            prompt_chars=len(text),
            request_metadata=jsonable(request.metadata),
        )
    )
    await session.commit()
    metrics.count_decision(tenant.name, DIRECT_LABEL)
    return RouteResponse(
        decision_id=decision_id,
        router=None,
        policy=DIRECT,
        model=backend,
        models=[backend],
        mode=DIRECT,
        scores={},
        query=[],
        info={},
    )


async def decide(
    ctx: AppContext, session: AsyncSession, tenant: Tenant, request: RouteRequest
) -> tuple[RouteResponse, Router]:
    """``route``, also returning the router it resolved (forwarding needs its judge)."""
    router = await resolve_router(ctx, tenant, request.router)
    await admit(ctx, tenant)
    text = prompt_text(ctx, request)
    arms = list(router.arms)
    if request.candidates is not None:
        unknown = sorted(set(request.candidates) - set(arms))
        if unknown:
            raise Invalid(
                f"candidates {unknown} are not arms of router {router.name!r} (arms: {arms})",
            )
    with metrics.time_embedding():
        embedding = await ctx.embeddings.embed_prompt(
            request.turns(), EmbedText.from_config(router.embed_text)
        )
    digest = prompt_hash(text)
    costs = await expected_costs(ctx, arms, len(text))
    runtime = await ctx.states.get(router)
    decisions_before, query_rounds_before = await count_decision(session, router.id)
    decision_id = uuid.uuid4().hex
    context = Context(
        embedding=embedding,
        arms=request.candidates,
        costs=costs,
        rng=decision_rng(router.seed, decision_id, request.seed),
        decisions_before=decisions_before,
        query_rounds_before=query_rounds_before,
        decision_key=decision_id,
    )
    decision = runtime.policy.select(context)
    if decision.query:
        await session.execute(
            update(RouterCounter)
            .where(RouterCounter.router_id == router.id)
            .values(query_rounds=RouterCounter.query_rounds + 1)
        )
    scores = jsonable(decision.scores)
    info = jsonable(decision.info)
    session.add(
        DecisionRow(
            id=decision_id,
            tenant_id=tenant.id,
            router_id=router.id,
            router_version=router.version,
            policy=router.policy,
            models=list(decision.arms),
            query=list(decision.query),
            scores=scores,
            # read by /route/{id}/next and the cascades' later steps
            info={
                **info,
                **({"adaptive": True} if decision.adaptive else {}),
                **({"seed": request.seed} if request.seed is not None else {}),
            },
            embedding=np.asarray(embedding, np.float32).tobytes(),
            prompt_hash=digest,
            prompt_chars=len(text),
            request_metadata=jsonable(request.metadata),
        )
    )
    await session.commit()
    metrics.count_decision(tenant.name, router.name)
    response = RouteResponse(
        decision_id=decision_id,
        router=router.name,
        policy=router.policy,
        model=decision.arm,
        models=list(decision.arms),
        mode=decision.mode,
        scores=scores,
        query=list(decision.query),
        info=info,
    )
    return response, router


def upsert_for(session: AsyncSession):  # type: ignore[no-untyped-def]
    """The dialect's ``insert`` (Postgres or SQLite), the one with ``on_conflict_do_*``."""
    dialect = session.bind.dialect.name if session.bind is not None else "postgresql"
    return postgresql.insert if dialect == "postgresql" else sqlite.insert


async def count_decision(session: AsyncSession, router_id: int) -> tuple[int, int]:
    """Count one more decision of the router (``router_counters``) and return (decisions, query rounds)
    before it. Not committed: the decision's own commit commits it, one transaction per decision (the
    counter row stays locked until then, so concurrent decisions of one router count in commit order)."""
    statement = (
        upsert_for(session)(RouterCounter)
        .values(router_id=router_id, decisions=1, query_rounds=0)
        .on_conflict_do_update(index_elements=["router_id"], set_={"decisions": RouterCounter.decisions + 1})
        .returning(RouterCounter.decisions, RouterCounter.query_rounds)
    )
    decisions, query_rounds = (await session.execute(statement)).one()
    return int(decisions) - 1, int(query_rounds)


def _insert_ignoring_duplicate(session: AsyncSession, values: dict[str, object]):  # type: ignore[no-untyped-def]
    return (
        upsert_for(session)(FeedbackEvent)
        .values(**values)
        .on_conflict_do_nothing(index_elements=["decision_id", "model", "kind"])
        .returning(FeedbackEvent.id)
    )


@dataclass(frozen=True)
class Outcome:
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


Resolved = tuple[Outcome, DecisionRow, Router | None, str]  # an item, its decision, router, model


async def record_feedback(
    ctx: AppContext, session: AsyncSession, tenant: Tenant, items: list[Outcome]
) -> list[FeedbackAccepted]:
    """Validate every item first (nothing is written if one is bad), then insert them idempotently in
    one transaction, commit, publish, and wait for this process to fold them."""
    resolved = await resolve_feedback(session, tenant, items)
    return await store_feedback(ctx, session, tenant, resolved, wait=True)


async def resolve_feedback(session: AsyncSession, tenant: Tenant, items: list[Outcome]) -> list[Resolved]:
    """Each item with its decision, router and the model it is about; raises on the first bad one."""
    found = await session.execute(
        select(DecisionRow, Router)
        .outerjoin(Router, Router.id == DecisionRow.router_id)
        .where(DecisionRow.id.in_({item.decision_id for item in items}), DecisionRow.tenant_id == tenant.id)
    )
    decisions: dict[str, DecisionRow] = {}
    routers: dict[int, Router] = {}
    for decision_row, router_row in found:
        decisions[decision_row.id] = decision_row
        if router_row is not None:
            routers[router_row.id] = router_row

    resolved: list[Resolved] = []
    for position, item in enumerate(items):
        where = f"event {position}: " if len(items) > 1 else ""
        decision = decisions.get(item.decision_id)
        if decision is None:
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
        if model not in allowed:
            raise Invalid(
                f"{where}model {model!r} is neither in the decision nor an arm of router {router.name!r}",
            )
        if item.reward is not None and not (router.reward_lo <= item.reward <= router.reward_hi):
            raise Invalid(
                f"{where}reward {item.reward} is outside the router's reward range "
                f"[{router.reward_lo}, {router.reward_hi}]",
            )
        resolved.append((item, decision, router, model))
    return resolved


async def store_feedback(
    ctx: AppContext, session: AsyncSession, tenant: Tenant, resolved: list[Resolved], wait: bool
) -> list[FeedbackAccepted]:
    """Insert the events idempotently with whatever the session already holds (one transaction),
    commit, publish; with ``wait``, until this process folded them (read-your-writes for clients)."""
    accepted: list[FeedbackAccepted] = []
    fresh: list[FeedbackMessage] = []
    unfolded: list[str] = []  # the kinds of new events about direct calls
    for item, decision, router, model in resolved:
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
        values: dict[str, object] = {
            "decision_id": decision.id,
            "tenant_id": tenant.id,
            "router_id": router.id if router is not None else None,
            "model": model,
            "kind": item.kind,
            "reward": item.reward,
            "cost": item.cost,
            "payload": payload,
        }
        event_id = await session.scalar(_insert_ignoring_duplicate(session, values))
        duplicate = event_id is None
        if duplicate:
            event_id = await session.scalar(
                select(FeedbackEvent.id).where(
                    FeedbackEvent.decision_id == decision.id,
                    FeedbackEvent.model == model,
                    FeedbackEvent.kind == item.kind,
                )
            )
        else:
            if router is None:  # stored, published to no one: no router folds it
                unfolded.append(item.kind)
            else:
                fresh.append(
                    FeedbackMessage(
                        event_id=int(event_id or 0),
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
                event_id=int(event_id or 0),
                decision_id=decision.id,
                model=model,
                kind=item.kind,
                duplicate=duplicate,
            )
        )
    await session.commit()
    names = {router.id: router.name for _, _, router, _ in resolved if router is not None}
    for message in fresh:
        metrics.count_feedback(tenant.name, names[message.router_id], message.kind)
    for kind in unfolded:
        metrics.count_feedback(tenant.name, DIRECT_LABEL, kind)
    await publish_feedback(ctx, fresh, wait)
    return accepted


async def publish_feedback(ctx: AppContext, messages: list[FeedbackMessage], wait: bool = True) -> None:
    """Publish committed events. A failed publish loses nothing: the events are in the database and
    replicas fold them on their next resync; this process folds them itself right away. With ``wait``,
    return once this process folded them (at most ``read_your_writes_timeout_s``)."""
    waits: dict[int, list[int]] = defaultdict(list)
    for message in messages:
        try:
            await ctx.bus.publish(message)
        except Exception as exc:
            log.warning("publishing event %s failed (%s); folding locally", message.event_id, exc)
            await ctx.states.handle(message)
        waits[message.router_id].append(message.event_id)
    timeout = ctx.settings.read_your_writes_timeout_s
    if timeout <= 0 or not wait:
        return
    for router_id, event_ids in waits.items():
        for event_id in event_ids:
            await ctx.states.wait_folded(router_id, event_id, timeout)
