"""Every question to a router's policy: a decision (embed, ask the policy, log it through the ledger,
the router's counter in the same transaction) and the re-asks once models were tried (``reselect``:
fallbacks and cascades); the one module that builds ``routers.base.Context`` and calls ``select``. A
direct call of a named backend is logged without a policy."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app import metrics
from app.context import AppContext
from app.embedding import prompt_hash
from app.jsonable import jsonable
from app.routing.errors import Invalid, NotFound, TooLarge
from app.routing.turn import MadeDecision, Turn
from app.schemas import RouteRequest, RouteResponse
from app.store.ledger import LedgerWrite, OwnerDeleted
from app.store.models import DecisionRow, Router, Tenant, utcnow
from embeddings.prompt_text import EmbedText
from routers.base import Context, Decision, KeyedRng, Policy, counter_use, generator_key
from routers.prices import call_cost, estimated_tokens

log = logging.getLogger(__name__)


Written = TypeVar("Written")

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
    turn.made = MadeDecision(direct, DIRECT_LABEL)
    await written_before_call(turn, ctx.ledger.write(turn.unwritten()))
    count_written(turn)
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
    """Write the turn's decision through the ledger (app/store/ledger.py), its counter's increment in
    the same transaction, unless it is written already (an ``exact`` policy's, by ``choose``)."""
    if not turn.written:
        await written_before_call(turn, turn.ctx.ledger.write(turn.unwritten()))
        count_written(turn)


async def written_before_call(turn: Turn, write: Awaitable[Written]) -> Written:
    """Await the write of a decision made before any backend is called; a 404 when its tenant or
    router was deleted since the request found it (``OwnerDeleted``): nothing was called or kept."""
    try:
        return await write
    except OwnerDeleted as exc:
        owner = f"router {turn.router.name!r}" if turn.router is not None else f"tenant {turn.tenant.name!r}"
        raise NotFound(f"{owner} was deleted while this request was being routed") from exc


def count_written(turn: Turn) -> None:
    """The turn's decision is committed: counted in the metrics, once."""
    if turn.wrote():
        metrics.count_decision(turn.tenant.name, turn.decision.router_name)


async def choose(turn: Turn) -> RouteResponse:
    """The turn's decision (``route``, ``made``). The router's counter, by the policy's counter use
    (``routers.base.CounterUse``): ``exact``, the decision is chosen and written in the ledger's one
    transaction that holds the counter's row lock (``Ledger.counted``: lock, read the counts,
    ``select``, write the decision with its count, release), so it is written here; ``read``, read
    without a lock (``RoundCounts``: the ledger's counts, re-read at most every
    ``counter_read_ttl_s``, plus this process's decisions since) and counted when the decision is
    written; ``none``, not read, counted when written. So a forwarded request through a policy that
    needs no exact count commits once, after its call, and takes no lock."""
    ctx, request, router = turn.ctx, turn.request, turn.router
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
    runtime = await ctx.states.get(router)
    costs = await expected_costs(ctx, priced_arms(runtime.policy, router), len(text))
    prompt = Prompt(text, prompt_hash(text), embedding, costs)
    use = counter_use(runtime.policy)
    if use == "exact":
        counted = ctx.ledger.counted(
            router.id, lambda counts: _written(ask(turn, runtime.policy, prompt, counts))
        )
        made = await written_before_call(turn, counted)
        turn.route, turn.made = made
        count_written(turn)
        return turn.route
    counts = await ctx.round_counts.before(router.id) if use == "read" else None
    turn.route, turn.made = ask(turn, runtime.policy, prompt, counts)
    if use == "read":
        ctx.round_counts.made(router.id, turn.made.queried)
    return turn.route


def priced_arms(policy: Policy, router: Router) -> list[str]:
    """The arms to price for a decision: the router's, and the policy's own where its state is of a
    newer version than the router this request read (an arm change racing the request: the policy
    may choose an arm the router has now)."""
    return list(dict.fromkeys([*router.arms, *policy.arms]))


@dataclass(frozen=True)
class Prompt:
    """What a decision is asked about: the prompt's text, its hash, its embedding and each arm's
    expected cost on it."""

    text: str
    digest: str
    embedding: np.ndarray
    costs: dict[str, float]


Made = tuple[RouteResponse, MadeDecision]


def _written(made: Made) -> tuple[Made, LedgerWrite]:
    """A decision and its write (for ``Ledger.counted``)."""
    return made, made[1].write()


def ask(turn: Turn, policy: Policy, prompt: Prompt, counts: tuple[int, int] | None) -> Made:
    """The policy's decision on ``prompt`` (``select``, with the router's (decisions, query rounds)
    before it when its counter use reads them) and its row. Synchronous: under an exact policy's lock,
    nothing else runs meanwhile."""
    router, request = turn.router, turn.request
    assert router is not None
    decision_id = uuid.uuid4().hex
    context = Context(
        embedding=prompt.embedding,
        arms=request.candidates,
        costs=prompt.costs,
        rng=KeyedRng(router.seed, generator_key(decision_id, request.seed)),
        decisions_before=counts[0] if counts is not None else None,
        query_rounds_before=counts[1] if counts is not None else None,
        decision_key=decision_id,
    )
    decision = policy.select(context)
    scores = jsonable(decision.scores)
    info = jsonable(decision.info)
    values: dict[str, Any] = {
        "id": decision_id,
        "tenant_id": turn.tenant.id,
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
        "embedding": np.asarray(prompt.embedding, np.float32).tobytes(),
        "prompt_hash": prompt.digest,
        "prompt_chars": len(prompt.text),
        "request_metadata": jsonable(request.metadata),
        "created_at": utcnow(),
    }
    route = RouteResponse(
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
    turn.shadow = list(decision.shadow)
    return route, MadeDecision(values, router.name, queried=bool(decision.query))


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
    runtime = await ctx.states.get(router)
    context = Context(
        embedding=np.frombuffer(row.embedding, dtype=np.float32).copy(),
        arms=candidates,
        costs=await expected_costs(ctx, priced_arms(runtime.policy, router), row.prompt_chars),
        tried=list(tried),
        rng=KeyedRng(router.seed, generator_key(row.id, (row.info or {}).get("seed"))),
        decision_key=row.id,
    )
    try:
        return runtime.policy.select(context)
    except Exception:  # a policy that cannot re-select must not turn a clean answer into a 500
        log.exception("re-selecting after %s failed for decision %s", tried, row.id)
        return None
