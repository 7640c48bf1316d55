"""Every question to a router's policy: a decision (embed, ask the policy, log it, the router's
counter in the same transaction) and the re-asks once models were tried (``reselect``: fallbacks and
cascades); the one module that builds ``routers.base.Context`` and calls ``select``. A direct call of
a named backend is logged without a policy."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import numpy as np
from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app import metrics
from app.context import AppContext
from app.embedding import prompt_hash
from app.jsonable import jsonable
from app.routing.errors import Invalid, TooLarge
from app.routing.turn import PendingDecision, Turn
from app.schemas import RouteRequest, RouteResponse
from app.store.ledger import LedgerWrite
from app.store.models import DecisionRow, Router, RouterCounter, Tenant, utcnow
from app.store.statements import insert_rows
from embeddings.prompt_text import EmbedText
from routers.base import Context, Decision, KeyedRng, counter_use, generator_key
from routers.prices import call_cost, estimated_tokens

log = logging.getLogger(__name__)


DIRECT = "direct"  # the mode (and policy) of a decision that called a backend by name


DIRECT_LABEL = "(direct)"  # the router label of direct calls in metrics: no router name has parentheses


async def expected_costs(ctx: AppContext, arms: list[str], prompt_chars: int) -> dict[str, float]:
    """Expected cost of calling each arm on this prompt: prompt characters / 4 input tokens and the
    backend's ``default_tokens_out`` output tokens (an expectation, so not rounded to whole tokens: the
    replay benchmark's estimate, which ``bench e2e`` relies on to show policies the same costs)."""
    backends = await ctx.catalog.backends(arms)
    tokens_in = estimated_tokens(prompt_chars)
    return {b.name: call_cost(b, tokens_in, b.default_tokens_out) for b in backends}


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


async def decide_direct(turn: Turn, backend: str) -> RouteResponse:
    """Log a direct call of ``backend`` (an arm of one of the tenant's routers): a decision of mode
    ``direct`` and of no router, with the prompt's embedding, so its feedback can be imported as
    logged outcomes later; no policy is asked and none learns from it. The turn's decision."""
    ctx, tenant, request = turn.ctx, turn.tenant, turn.request
    text = prompt_text(ctx, request)
    with metrics.time_embedding():
        embedding, digest = await ctx.embeddings.embed(text)
    decision_id = uuid.uuid4().hex
    info = {"mode": DIRECT, **({"seed": request.seed} if request.seed is not None else {})}
    direct = {
        "id": decision_id,
        "tenant_id": tenant.id,
        "router_id": None,
        "router_version": 0,
        "policy": DIRECT,
        "models": [backend],
        "query": [],
        "scores": {},
        "info": info,
        "embedding": np.asarray(embedding, np.float32).tobytes(),
        "prompt_hash": digest,
        "prompt_chars": len(text),
        "request_metadata": jsonable(request.metadata),
        "created_at": utcnow(),
    }
    await ctx.ledger.write(LedgerWrite(decision=direct))
    metrics.count_decision(tenant.name, DIRECT_LABEL)
    turn.route = RouteResponse(
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
    return turn.route


async def decide(turn: Turn) -> RouteResponse:
    """Choose and write the turn's decision (``POST /route``)."""
    await choose(turn)
    await log_decision(turn)
    return turn.decided


async def log_decision(turn: Turn) -> None:
    """Write the turn's pending decision and commit. Through the ledger (app/store/ledger.py), its
    counter's increment in the same transaction; in the session's transaction when that already
    counted it (an ``exact`` policy: the counter's row is locked there until this commit)."""
    pending = turn.pending
    assert pending is not None, "no decision to write"
    if pending.counted:
        await insert_rows(turn.session, DecisionRow, [pending.values])
        await turn.session.commit()
    else:
        await turn.ctx.ledger.write(pending.write())
    turn.pending = None
    metrics.count_decision(turn.tenant.name, pending.router_name)


async def choose(turn: Turn) -> RouteResponse:
    """The turn's decision (``route``), not yet written (``pending``). The router's counter, by the policy's counter use
    (``routers.base.CounterUse``): ``exact``, counted now in the session's transaction, which the caller
    commits (with the decision, ``log_decision``, or alone before forwarding); ``read``, read without a
    lock (``RoundCounts``: the ledger's counts, re-read at most every ``counter_read_ttl_s``, plus this
    process's decisions since) and counted when the decision is written;
    ``none``, not read, counted when written. So a forwarded request through a policy that needs no
    exact count commits once, after its call."""
    ctx, session, tenant, request, router = turn.ctx, turn.session, turn.tenant, turn.request, turn.router
    assert router is not None, "a direct call asks no policy"
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
        rng=KeyedRng(router.seed, generator_key(decision_id, request.seed)),
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
    turn.route = RouteResponse(
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
    turn.pending = PendingDecision(values, router.name, counted=use == "exact", queried=bool(decision.query))
    turn.shadow = list(decision.shadow)
    return turn.route


async def reselect(
    ctx: AppContext, row: DecisionRow, tried: list[str], candidates: list[str] | None = None
) -> Decision | None:
    """The policy's decision for the same prompt with ``tried`` excluded (``Context.tried``), with the
    decision's stored embedding, its per-decision generator and its id as ``Context.decision_key``
    (the key its feedback events carry, so a policy's per-decision state finds it); None when the
    decision has no router (any more) or the policy raises."""
    router = await ctx.catalog.router_by_id(row.router_id) if row.router_id is not None else None
    if router is None:
        return None
    context = Context(
        embedding=np.frombuffer(row.embedding, dtype=np.float32).copy(),
        arms=candidates,
        costs=await expected_costs(ctx, list(router.arms), row.prompt_chars),
        tried=list(tried),
        rng=KeyedRng(router.seed, generator_key(row.id, (row.info or {}).get("seed"))),
        decision_key=row.id,
    )
    runtime = await ctx.states.get(router)
    try:
        return runtime.policy.select(context)
    except Exception:  # a policy that cannot re-select must not turn a clean answer into a 500
        log.exception("re-selecting after %s failed for decision %s", tried, row.id)
        return None


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
