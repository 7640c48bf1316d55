"""Forwarding, the story in one function: decide (unless the turn has its decision), call with
fallback, record the answer; an ensemble or a judged cascade when the decision or its router asks for
one; a stream passed through when the client asked for one and the decision allows it.

A decision made here is written by ``record_answer``, with its attempts, cost event and its router's
counter, in one transaction after the call; it is durable before the answer, like every decision.
Only a policy that spends a budget on the counter (``counter_use == "exact"``, BALROG) has its decision
written with its count while choosing (``decide.choose``: the counter's lock is released before the
call), and the answer merged into it after. One that declines or names a set is written before
anything else, as ``/route`` writes it."""

from __future__ import annotations

from dataclasses import replace

from app.routing.answers import CHAT_PATH, Forwarded, Stream, path_for
from app.routing.cascade import judged_cascade
from app.routing.costs import record_answer
from app.routing.decide import choose, decide, log_decision
from app.routing.ensemble import forward_ensemble
from app.routing.fallback import call_with_fallback
from app.routing.judge import judges_answers
from app.routing.stream import stream_answer
from app.routing.turn import Turn


async def forward_json(turn: Turn) -> Forwarded:
    """Decide (unless the turn has its decision), call, record the answer; an ensemble or a judged
    cascade when the decision or its router asks for one."""
    assert turn.body is not None, "nothing to forward"
    body = turn.body
    path = path_for(body)
    if turn.route is None:
        route = await choose(turn)
        if route.model is None or route.mode == "set":  # answered before any record_answer: written now
            await log_decision(turn)
    route = turn.decided
    if route.mode == "set" and len(route.models) > 1:
        return await forward_ensemble(turn, body, path)
    target, payload = await call_with_fallback(turn, route, body, path, turn.attempts, stream=False)
    assert isinstance(payload, dict)
    if judges_answers(turn.router) and path == CHAT_PATH:  # recorded step by step, judge included
        return await judged_cascade(turn, target, payload)
    cost = await record_answer(turn, target, turn.attempts, payload, path)
    return Forwarded(route, target, payload, cost, turn.attempts)


async def forward_stream(turn: Turn) -> Stream | Forwarded:
    """Decide (unless the turn has its decision, written first either way) and open the upstream event
    stream (``stream_answer``). An ensemble (a ``set`` decision) or a judged cascade needs whole
    answers before it can answer, so it is run as without ``stream`` and returned as ``Forwarded``;
    the caller streams that answer."""
    assert turn.body is not None, "nothing to forward"
    if turn.route is None:
        await decide(turn)
    route = turn.decided
    if (route.mode == "set" and len(route.models) > 1) or judges_answers(turn.router):
        return await forward_json(replace(turn, body={**turn.body, "stream": False}))
    return await stream_answer(turn)
