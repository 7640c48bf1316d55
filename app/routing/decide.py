"""A decision: resolve the router, embed, ask the policy, log the decision (the router's counter in
the same transaction); a direct call of a named backend is logged without a policy."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app import metrics
from app.context import AppContext
from app.embedding import prompt_hash
from app.jsonable import jsonable
from app.routing.errors import Invalid, NotFound, TooLarge
from app.schemas import RouteRequest, RouteResponse
from app.store.ledger import LedgerWrite
from app.store.models import DecisionRow, Router, RouterCounter, Tenant, utcnow
from app.store.statements import insert_rows
from embeddings.prompt_text import EmbedText
from routers.base import Context, KeyedRng, counter_use
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


def decision_rng(seed: int, decision_id: str, request_seed: int | None = None) -> KeyedRng:
    """Randomness of one decision, from the router's seed and the decision id (or the client's request
    ``seed`` when it sent one): replicas with the same learned state make the same choice for the same
    decision, whatever else they served, and a client that replays the same seeded requests gets the
    same choices (``bench e2e`` matches the simulator's ``round_rng`` this way). Built only if the
    policy draws (``KeyedRng``)."""
    return KeyedRng(seed, decision_key(decision_id, request_seed))


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


@dataclass(frozen=True)
class PendingDecision:
    """A decision made but not yet written: its row's values (``DecisionRow`` attribute names). A
    forwarded request writes it with its attempts and cost, in one transaction (app/routing/costs.py).
    ``counted``: its router's counter already counts it (a policy whose counter use is ``exact``);
    otherwise ``insert_decision`` counts it in the transaction that writes it."""

    values: dict[str, Any]
    router_name: str
    counted: bool = True
    queried: bool = False

    def row(self) -> DecisionRow:
        """The row as an unsaved ORM object (for the code that reads a decision's fields)."""
        return DecisionRow(**self.values)

    def write(self, values: dict[str, Any] | None = None) -> LedgerWrite:
        """The decision (``values`` when given, else its own) as a ledger write, with its counter's
        increment when the counter does not count it yet."""
        router_id = self.values["router_id"]
        count = None if self.counted or router_id is None else (router_id, 1, 1 if self.queried else 0)
        return LedgerWrite(decision=values or self.values, count=count)


async def decide(
    ctx: AppContext, session: AsyncSession, tenant: Tenant, request: RouteRequest
) -> tuple[RouteResponse, Router]:
    """Choose and write a decision (``POST /route``); also the router it resolved (forwarding needs
    its judge)."""
    response, router, pending = await choose(ctx, session, tenant, request)
    await log_decision(ctx, session, tenant, pending)
    return response, router


async def log_decision(
    ctx: AppContext, session: AsyncSession, tenant: Tenant, pending: PendingDecision
) -> None:
    """Write a decision and commit. Through the ledger (app/store/ledger.py), its counter's increment
    in the same transaction; in the session's transaction when that already counted it (an ``exact``
    policy: the counter's row is locked there until this commit)."""
    if pending.counted:
        await insert_rows(session, DecisionRow, [pending.values])
        await session.commit()
    else:
        await ctx.ledger.write(pending.write())
    metrics.count_decision(tenant.name, pending.router_name)


async def choose(
    ctx: AppContext, session: AsyncSession, tenant: Tenant, request: RouteRequest
) -> tuple[RouteResponse, Router, PendingDecision]:
    """The decision, not yet written. The router's counter, by the policy's counter use
    (``routers.base.CounterUse``): ``exact``, counted now in the session's transaction, which the caller
    commits (with the decision, ``log_decision``, or alone before forwarding); ``read``, read without a
    lock (``RoundCounts``: the ledger's counts, re-read at most every ``counter_read_ttl_s``, plus this
    process's decisions since) and counted when the decision is written;
    ``none``, not read, counted when written. So a forwarded request through a policy that needs no
    exact count commits once, after its call."""
    router = await resolve_router(ctx, tenant, request.router)
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
    use = counter_use(runtime.policy)
    decisions_before: int | None = None
    query_rounds_before: int | None = None
    if use == "exact":
        decisions_before, query_rounds_before = await count_decision(session, router.id)
    elif use == "read":
        decisions_before, query_rounds_before = await ctx.round_counts.before(router.id)
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
    if use == "read":
        ctx.round_counts.made(router.id, bool(decision.query))
    if decision.query and use == "exact":
        await session.execute(
            update(RouterCounter)
            .where(RouterCounter.router_id == router.id)
            .values(query_rounds=RouterCounter.query_rounds + 1)
        )
    scores = jsonable(decision.scores)
    info = jsonable(decision.info)
    values: dict[str, Any] = {
        "id": decision_id,
        "tenant_id": tenant.id,
        "router_id": router.id,
        "router_version": router.version,
        "policy": router.policy,
        "models": list(decision.arms),
        "query": list(decision.query),
        "scores": scores,
        # read by /route/{id}/next and the cascades' later steps
        "info": {
            **info,
            **({"adaptive": True} if decision.adaptive else {}),
            **({"seed": request.seed} if request.seed is not None else {}),
        },
        "embedding": np.asarray(embedding, np.float32).tobytes(),
        "prompt_hash": digest,
        "prompt_chars": len(text),
        "request_metadata": jsonable(request.metadata),
        "created_at": utcnow(),
    }
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
    return (
        response,
        router,
        PendingDecision(values, router.name, counted=use == "exact", queried=bool(decision.query)),
    )


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
