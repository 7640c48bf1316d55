"""Cascades: client-driven (``POST /route/{decision_id}/next``) and gateway-driven (a router with a
judge gets answers checked before they are returned).

A client that called a decision's model and judged the answer not good enough reports that step (a
``cascade-step`` feedback event, when it carries a reward or a cost) and asks what to call next:

- a fixed cascade (several ``models``, not ``adaptive``) continues with its next model not yet tried;
- otherwise (single decisions, adaptive cascades) the policy is asked again with the decision's stored
  embedding, its per-decision generator, its id as ``Context.decision_key`` (the key its feedback
  events carry, so a policy's per-decision state finds this cascade) and ``Context(tried=[...])``
  (``app.routing.decide.reselect``), as the forwarding fallback does.

The answer is the next model, or ``stop`` when nothing is left or the policy declines. The models offered
so far are kept in the decision's ``info.offered`` so a step that names no model means the last one.

A judged cascade (``judged_cascade``) asks the router's judge (app/routing/judge.py) about each
forwarded answer before the call is recorded: the call's cost event is the answer's cost plus the
judge's (as ``bench run --judge`` adds the judge's price to the judged call's), its attempts the call's
and the judge's. A failed step, which the client never sees, is learned at once as a ``cascade-step``
event whose reward is the judge's (app/routing/judge.py), and the next model is asked for as
``POST /route/{id}/next`` does (``next_step``). The cascade stops at the first pass, when nothing is
left, after ``judge_max_steps`` calls, or when the judge itself fails; the last answer is then
returned, and its reward is the client's to post (the judge's score of it decided the stop only). The
exception: a failed step after which the policy declines to go on (``next_step`` answers stop with
arms left), or whose next model's backends all fail, is served with its judged reward already learned,
since the policy is asked after learning it, as for ``POST /route/{id}/next``."""

from __future__ import annotations

import logging
from typing import Any

from app.backends import AttemptRecord, Target
from app.context import AppContext
from app.jsonable import jsonable
from app.routing.answers import CHAT_PATH, Forwarded, JudgedStep, answer_text
from app.routing.costs import answer_cost, record_call
from app.routing.decide import reselect
from app.routing.errors import BackendsFailed, Invalid, NotFound
from app.routing.fallback import call_with_fallback
from app.routing.feedback import FeedbackReport, record_feedback
from app.routing.judge import ask_judge
from app.routing.turn import Turn
from app.schemas import CascadeNextRequest, CascadeNextResponse
from app.store.ledger import LedgerWrite
from app.store.models import Tenant

log = logging.getLogger(__name__)


async def next_step(
    ctx: AppContext, tenant: Tenant, decision_id: str, body: CascadeNextRequest
) -> CascadeNextResponse:
    """The cascade's next model after the step ``body`` reports. The decision is read as committed
    (not from the ledger's memory: another replica may have served the step before), the models
    offered are merged into its ``info`` through the ledger."""
    found = await ctx.ledger.decisions(tenant.id, [decision_id], remembered=False)
    if not found:
        raise NotFound(f"decision {decision_id!r} not found")
    row = found[0]
    info = dict(row.info or {})
    offered = [str(m) for m in info.get("offered") or row.models[:1]]
    failed = body.model or (offered[-1] if offered else None)
    if failed is None:
        raise Invalid("the decision called no model; name the step's model")
    if body.reward is not None or body.cost is not None:
        step = FeedbackReport(
            decision_id=decision_id,
            model=failed,
            kind="cascade-step",
            reward=body.reward,
            cost=body.cost,
            metadata=body.metadata,
        )
        await record_feedback(ctx, tenant, [step])
    tried = [*offered, failed] if failed not in offered else offered
    scores: dict[str, dict[str, float | None]] = {}
    untried = [m for m in row.models if m not in tried]
    model: str | None
    if untried and not info.get("adaptive"):
        model = untried[0]
    else:
        decision = await reselect(ctx, row, tried)
        model = decision.arm if decision is not None and decision.arm not in tried else None
        scores = jsonable(decision.scores) if decision is not None else {}
    offered_now = [*tried, model] if model is not None else tried
    await ctx.ledger.write(LedgerWrite(info=(decision_id, {"offered": offered_now})))
    return CascadeNextResponse(
        decision_id=decision_id, model=model, stop=model is None, tried=tried, scores=scores
    )


async def judged_cascade(turn: Turn, target: Target, payload: dict[str, Any]) -> Forwarded:
    """Ask the turn's router's judge about each answer (the first: ``target``'s ``payload``, after the
    turn's attempts), record each call with the judge's cost and attempts, and on a fail call the
    cascade's next model."""
    ctx, request, route, router, body = turn.ctx, turn.request, turn.decided, turn.router, turn.body
    assert router is not None and body is not None
    steps: list[JudgedStep] = []
    step_attempts = list(turn.attempts)
    all_attempts: list[AttemptRecord] = []
    while True:
        verdict = await ask_judge(
            ctx, router, route.decision_id, target.name, request.text(), answer_text(payload)
        )
        cost = answer_cost(target, request, payload, CHAT_PATH) + verdict.cost
        kept = await record_call(turn, target, [*step_attempts, *verdict.attempts], cost)
        all_attempts.extend([*step_attempts, *verdict.attempts])
        steps.append(JudgedStep(target.name, verdict.score, verdict.passed, cost, verdict.cost))
        called = [step.model for step in steps]
        reachable = request.candidates or router.arms
        if (
            not kept  # the router was deleted meanwhile: no cascade to go on with
            or verdict.score is None
            or verdict.passed
            or len(steps) >= ctx.settings.judge_max_steps
            or all(arm in called for arm in reachable)
        ):
            break  # this answer is served: its reward is the client's to give
        following = await next_step(
            ctx, turn.tenant, route.decision_id, CascadeNextRequest(model=target.name, reward=verdict.reward)
        )
        if following.stop or following.model is None:
            break
        step_route = route.model_copy(update={"model": following.model, "models": [following.model]})
        step_attempts = []
        try:
            target, answer = await call_with_fallback(
                turn, step_route, body, CHAT_PATH, step_attempts, False, called
            )
        except BackendsFailed:  # the next backend failed: return the last answer that came back
            all_attempts.extend(step_attempts)
            break
        assert isinstance(answer, dict)
        payload = answer
    return Forwarded(route, target, payload, sum(s.cost for s in steps), all_attempts, judged=steps)
