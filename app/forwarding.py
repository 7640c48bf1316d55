"""Forwarding: route, call the chosen backend, fall back to the policy's next choice, account the cost.

``forward_json`` and ``forward_stream`` first log the decision exactly as ``POST /route`` does. They then
call the decision's first model; when that backend gives up (after its own retries, see app/backends.py)
the policy is asked again with ``Context(tried=[...])`` and its next choice is called, up to
``forward_max_fallbacks`` more backends. Every attempt is stored in ``attempts``. The call's cost (the
backend's reported token usage x its prices, plus its per-call price; characters / 4 when it reports no
usage) is recorded as a ``cost`` feedback event through ``record_feedback``, so it is idempotent and folded
like any other event. The decision's ``info.answered_by`` names the backend that answered; feedback
without a ``model`` defaults to it. A ``direct`` decision (a /v1 call naming a backend, made by
``gateway.decide_direct``) is called the same way, without fallback: it has no policy to ask.

The request body goes upstream untouched but for ``model`` (``tools``, ``response_format``, ``n``,
``user``, ``seed``, ``stream_options`` and any field the gateway does not know); a stream always asks the
backend for its usage chunk, which reaches the client only when it asked for it too.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import anyio
import httpx
from sqlalchemy.ext.asyncio import AsyncSession

from app import gateway
from app.backend_keys import SecretKeyMissing
from app.backends import AttemptRecord, BackendFailure, Target
from app.cascade import next_step, reselect
from app.context import AppContext
from app.errors import BackendsFailed, Declined
from app.judge import ask_judge, reward_for
from app.schemas import CascadeNextRequest, RouteRequest, RouteResponse
from app.store.models import Attempt, DecisionRow, Router, Tenant
from routers.replay_format import whole_tokens

log = logging.getLogger(__name__)

CHAT_PATH = "/chat/completions"
IMAGE_PATH = "/images/generations"
BODY_FIELD = "banditgate"  # the answer's field naming its decision (see ``body_field``)


Decided = tuple[RouteResponse, Router | None]  # a logged decision and its router (None: a direct call)


@dataclass
class Forwarded:
    """The answer of a forwarded decision. For a ``set`` decision (an ensemble) ``target``, ``payload``
    and ``cost`` are the first member that answered's, and ``members`` lists every member's outcome."""

    route: RouteResponse
    target: Target
    payload: dict[str, Any]
    cost: float
    attempts: list[AttemptRecord]
    members: list[Member] | None = None
    judged: list[JudgedStep] | None = None


@dataclass
class JudgedStep:
    model: str
    score: float | None
    passed: bool
    cost: float


@dataclass
class Member:
    backend: str
    payload: dict[str, Any] | None
    cost: float | None
    error: str | None = None


@dataclass
class Stream:
    route: RouteResponse
    target: Target
    events: AsyncIterator[bytes]


def body_field(route: RouteResponse, model: str) -> dict[str, Any]:
    """The ``banditgate`` field of a /v1 answer (JSON body, first stream chunk): the decision id to post
    feedback for without reading headers, the router that decided (null: a direct call), the decision's
    mode and the backend(s) that answered."""
    return {"decision_id": route.decision_id, "router": route.router, "mode": route.mode, "model": model}


def asks_usage(body: dict[str, Any]) -> bool:
    """Whether a streaming client asked for the usage chunk (``stream_options.include_usage``)."""
    options = body.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


def estimated_usage(prompt_chars: int, answer_chars: int) -> dict[str, int]:
    """An OpenAI ``usage`` object from characters / 4, for a backend that reported none."""
    tin, tout = whole_tokens(prompt_chars), whole_tokens(answer_chars)
    return {"prompt_tokens": tin, "completion_tokens": tout, "total_tokens": tin + tout}


def path_for(body: dict[str, Any]) -> str:
    return CHAT_PATH if "messages" in body else IMAGE_PATH


async def load_target(ctx: AppContext, name: str, path: str, attempts: list[AttemptRecord]) -> Target:
    """The backend ``name`` ready to call (from the catalog cache); a BackendFailure (not retried) when
    it cannot be."""
    target: Target | None = None
    try:
        target = await ctx.catalog.target(name)
        problem = "is not in the catalog" if target is None else ""
    except SecretKeyMissing as exc:
        problem = f"cannot be called: {exc}"
    if target is not None and (target.kind == "image") != (path == IMAGE_PATH):
        problem = f"is a {target.kind} backend and cannot serve {path}"
    if problem or target is None:
        failure = BackendFailure(name, "unusable", problem, retryable=False)
        attempts.append(AttemptRecord(name, len(attempts) + 1, "unusable", None, 0.0, str(failure)))
        raise failure
    return target


async def next_model(
    ctx: AppContext, session: AsyncSession, decision_id: str, request: RouteRequest, tried: list[str]
) -> str | None:
    """The policy's choice for the same prompt once ``tried`` are excluded (None: nothing left)."""
    row = await session.get(DecisionRow, decision_id)
    router = await session.get(Router, row.router_id) if row is not None else None
    if row is None or router is None:
        return None
    decision = await reselect(ctx, session, row, router, tried, request.candidates)
    arm = decision.arm if decision is not None else None
    return arm if arm is not None and arm not in tried else None


async def _call(
    ctx: AppContext,
    session: AsyncSession,
    request: RouteRequest,
    route: RouteResponse,
    body: dict[str, Any],
    path: str,
    attempts: list[AttemptRecord],
    stream: bool,
    called: Sequence[str] = (),
) -> tuple[Target, dict[str, Any] | httpx.Response]:
    """Call the decision's model, then the policy's next choices (never one of ``called``, the models a
    cascade already called for this decision); raise the gateway's 502/504."""
    if route.model is None:
        raise Declined(
            f"router {route.router!r} declined to choose a model (decision {route.decision_id})",
            decision_id=route.decision_id,
        )
    tried: list[str] = list(called)
    failures: list[BackendFailure] = []
    model: str | None = route.model
    while model is not None:
        tried.append(model)
        try:
            target = await load_target(ctx, model, path, attempts)
            await session.commit()  # end the read transaction: no pooled connection held during the call
            if stream:
                return target, await ctx.backends.open_stream(target, path, body, attempts)
            return target, await ctx.backends.call_json(target, path, body, attempts)
        except BackendFailure as exc:
            failures.append(exc)
        if len(failures) > ctx.settings.forward_max_fallbacks or route.mode == gateway.DIRECT:
            break  # a direct call is fallback-free: the client named its backend
        model = await next_model(ctx, session, route.decision_id, request, tried)
    await save_attempts(session, route.decision_id, attempts)
    raise gave_up(route.decision_id, failures)


def gave_up(decision_id: str, failures: list[BackendFailure]) -> BackendsFailed:
    """The error when every backend tried failed, naming each (a 504 if all timed out, else a 502)."""
    detail = "; ".join(str(f) for f in failures) + f" (decision {decision_id})"
    return BackendsFailed(
        detail, decision_id=decision_id, timed_out=all(f.outcome == "timeout" for f in failures)
    )


async def save_attempts(session: AsyncSession, decision_id: str, attempts: list[AttemptRecord]) -> None:
    session.add_all(Attempt(decision_id=decision_id, **asdict(a)) for a in attempts)
    await session.commit()


def usage_tokens(usage: Any, prompt_chars: int, answer_chars: int) -> tuple[int, int]:
    """(input, output) tokens from an OpenAI ``usage`` object (chat or images), else characters / 4."""
    if isinstance(usage, dict):
        tin = usage.get("prompt_tokens", usage.get("input_tokens"))
        tout = usage.get("completion_tokens", usage.get("output_tokens"))
        if isinstance(tin, int) and isinstance(tout, int):
            return max(tin, 0), max(tout, 0)
    return whole_tokens(prompt_chars), whole_tokens(answer_chars)


def contents(payload: dict[str, Any]) -> list[str]:
    """The text of each chat choice's message."""
    parts: list[str] = []
    for choice in payload.get("choices") or []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            parts.append(message["content"])
    return parts


def answer_text(payload: dict[str, Any]) -> str:
    """The text of a chat completion's choices, joined by newlines."""
    return "\n".join(contents(payload))


def answer_chars(payload: dict[str, Any]) -> int:
    return sum(len(part) for part in contents(payload))


def mixture_output(route_mode: str, text: str) -> str | None:
    """Mixture routers learn from what the generator produced: the gateway feeds the answer's text (it
    is embedded into the cost event's ``output_embedding``) so clients need not send it back."""
    return text if route_mode == "mixture" and text.strip() else None


async def settle(
    ctx: AppContext,
    session: AsyncSession,
    tenant: Tenant,
    decision_id: str,
    target: Target,
    attempts: list[AttemptRecord],
    cost: float | None,
    output_text: str | None = None,
) -> None:
    """Store the attempts, mark who answered, and record the cost event (when the call completed), in
    one transaction; for mixture routers the event also carries the answer, which the gateway embeds.
    The answer does not wait for the event to come back over the bus: the policy still learns it only
    from the stream, in stream order."""
    row = await session.get(DecisionRow, decision_id)  # the session that decided holds it already
    if row is None:
        return
    row.info = {**(row.info or {}), "answered_by": target.name}
    session.add_all(Attempt(decision_id=decision_id, **asdict(a)) for a in attempts)
    if cost is None:
        await session.commit()
        return
    router = await ctx.catalog.router_by_id(row.router_id) if row.router_id is not None else None
    feedback = gateway.Outcome(
        decision_id=decision_id, model=target.name, kind="cost", cost=cost, output_text=output_text
    )
    await gateway.store_feedback(ctx, session, tenant, [(feedback, row, router, target.name)], wait=False)


async def forward_json(
    ctx: AppContext,
    session: AsyncSession,
    tenant: Tenant,
    request: RouteRequest,
    body: dict[str, Any],
    decided: Decided | None = None,
) -> Forwarded:
    """Route (unless ``decided`` is the decision already made, with its router), call, settle; an
    ensemble or a judged cascade when the decision or its router asks for one."""
    route, router = decided if decided is not None else await gateway.decide(ctx, session, tenant, request)
    attempts: list[AttemptRecord] = []
    path = path_for(body)
    if route.mode == "set" and len(route.models) > 1:
        return await _forward_set(ctx, session, tenant, request, route, body, path)
    target, payload = await _call(ctx, session, request, route, body, path, attempts, stream=False)
    assert isinstance(payload, dict)
    cost = answer_cost(target, request, payload, path)
    output = mixture_output(route.mode, answer_text(payload)) if path == CHAT_PATH else None
    await settle(ctx, session, tenant, route.decision_id, target, attempts, cost, output)
    if router is not None and router.judge_url and path == CHAT_PATH:
        return await _judged_cascade(
            ctx, session, tenant, request, route, body, router, target, payload, cost, attempts
        )
    return Forwarded(route, target, payload, cost, attempts)


async def _judged_cascade(
    ctx: AppContext,
    session: AsyncSession,
    tenant: Tenant,
    request: RouteRequest,
    route: RouteResponse,
    body: dict[str, Any],
    router: Router,
    target: Target,
    payload: dict[str, Any],
    cost: float,
    attempts: list[AttemptRecord],
) -> Forwarded:
    """Ask the router's judge about each answer; on a fail, call the cascade's next model (app/judge.py)."""
    steps: list[JudgedStep] = []
    all_attempts = list(attempts)
    while True:
        verdict = await ask_judge(
            ctx.backends.http,
            router,
            ctx.settings.judge_timeout_s,
            route.decision_id,
            target.name,
            request.text(),
            answer_text(payload),
        )
        steps.append(JudgedStep(target.name, verdict.score, verdict.passed, cost))
        reward = None if verdict.score is None else reward_for(verdict.score, router)
        if verdict.score is None or verdict.passed or len(steps) >= ctx.settings.judge_max_steps:
            if reward is not None:
                step = gateway.Outcome(
                    decision_id=route.decision_id, model=target.name, kind="cascade-step", reward=reward
                )
                await gateway.record_feedback(ctx, session, tenant, [step])
            break
        following = await next_step(
            ctx, session, tenant, route.decision_id, CascadeNextRequest(model=target.name, reward=reward)
        )
        if following.stop or following.model is None:
            break
        step_route = route.model_copy(update={"model": following.model, "models": [following.model]})
        step_attempts: list[AttemptRecord] = []
        try:
            called = [step.model for step in steps]
            target, answer = await _call(
                ctx, session, request, step_route, body, CHAT_PATH, step_attempts, False, called
            )
        except BackendsFailed:  # the next backend failed: return the last answer that came back
            all_attempts.extend(step_attempts)
            break
        assert isinstance(answer, dict)
        payload = answer
        cost = answer_cost(target, request, payload, CHAT_PATH)
        await settle(ctx, session, tenant, route.decision_id, target, step_attempts, cost)
        all_attempts.extend(step_attempts)
    return Forwarded(route, target, payload, sum(s.cost for s in steps), all_attempts, judged=steps)


def answer_cost(target: Target, request: RouteRequest, payload: dict[str, Any], path: str) -> float:
    """USD of an answer: its reported usage (else characters / 4) at the backend's prices."""
    if path == IMAGE_PATH:
        tin, tout = usage_tokens(payload.get("usage"), 0, 0)
    else:
        tin, tout = usage_tokens(payload.get("usage"), len(request.text()), answer_chars(payload))
    return target.cost(tin, tout)


async def _forward_set(
    ctx: AppContext,
    session: AsyncSession,
    tenant: Tenant,
    request: RouteRequest,
    route: RouteResponse,
    body: dict[str, Any],
    path: str,
) -> Forwarded:
    """An ensemble: call every model of the decision in parallel (each with its own retries, no
    fallback), record each answer's cost, answer with all of them; 502/504 only if none answered."""
    attempts: list[AttemptRecord] = []
    targets: list[Target] = []
    failures: list[BackendFailure] = []
    for model in route.models:  # one session: load sequentially, then call concurrently
        try:
            targets.append(await load_target(ctx, model, path, attempts))
        except BackendFailure as exc:
            failures.append(exc)
    await session.commit()  # end the read transaction: no pooled connection held during the calls
    per_member: list[list[AttemptRecord]] = [[] for _ in targets]
    results = await asyncio.gather(
        *(ctx.backends.call_json(t, path, body, a) for t, a in zip(targets, per_member, strict=True)),
        return_exceptions=True,
    )
    members = [Member(f.backend, None, None, str(f)) for f in failures]
    answered: list[tuple[Target, dict[str, Any], float]] = []
    for target, own, result in zip(targets, per_member, results, strict=True):
        attempts.extend(own)
        if isinstance(result, BackendFailure):
            failures.append(result)
            members.append(Member(target.name, None, None, str(result)))
        elif isinstance(result, BaseException):
            raise result
        else:
            cost = answer_cost(target, request, result, path)
            answered.append((target, result, cost))
            members.append(Member(target.name, result, cost))
    for number, attempt in enumerate(attempts, start=1):
        attempt.number = number
    if not answered:
        await save_attempts(session, route.decision_id, attempts)
        raise gave_up(route.decision_id, failures)
    first, payload, cost = answered[0]
    row = await session.get(DecisionRow, route.decision_id)
    if row is not None:
        row.info = {
            **(row.info or {}),
            "answered_by": first.name,
            "ensemble": [t.name for t, _, _ in answered],
        }
    session.add_all(Attempt(decision_id=route.decision_id, **asdict(a)) for a in attempts)
    costs = [
        gateway.Outcome(decision_id=route.decision_id, model=t.name, kind="cost", cost=c)
        for t, _, c in answered
    ]
    resolved = await gateway.resolve_feedback(session, tenant, costs)
    await gateway.store_feedback(ctx, session, tenant, resolved, wait=False)
    return Forwarded(route, first, payload, cost, attempts, members)


def _rewrite(
    line: str, target: Target, drop_usage_chunks: bool, seen: dict[str, Any], field: dict[str, Any]
) -> str | None:
    """One SSE line on its way to the client: ``model`` set to the backend's name, ``field`` added to
    the first chunk as ``banditgate``; the usage-only chunk the gateway asked for itself is kept for
    accounting and dropped."""
    if not line.startswith("data:"):
        return line
    data = line[5:].strip()
    if data == "[DONE]":
        seen["done"] = True
        return line
    try:
        chunk = json.loads(data)
    except json.JSONDecodeError:
        return line
    if not isinstance(chunk, dict):
        return line
    if isinstance(chunk.get("usage"), dict):
        seen["usage"] = chunk["usage"]
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict) and isinstance(delta.get("content"), str):
            seen["chars"] = seen.get("chars", 0) + len(delta["content"])
            seen.setdefault("text", []).append(delta["content"])
    if drop_usage_chunks and not chunk.get("choices") and "usage" in chunk:
        return None
    chunk["model"] = target.name
    if "chunk" not in seen:
        seen["chunk"] = {k: chunk[k] for k in ("id", "created") if k in chunk}
        chunk[BODY_FIELD] = field
    return "data: " + json.dumps(chunk, separators=(",", ":"))


def _estimated_usage_chunk(
    seen: dict[str, Any], target: Target, field: dict[str, Any], prompt_chars: int
) -> str:
    """The usage chunk a client asked for when the backend sent none: characters / 4, said so in
    ``banditgate.usage_estimated``."""
    seen["usage"] = estimated_usage(prompt_chars, int(seen.get("chars", 0)))
    chunk = {
        **seen.get("chunk", {}),
        "object": "chat.completion.chunk",
        "model": target.name,
        "choices": [],
        "usage": seen["usage"],
        BODY_FIELD: {**field, "usage_estimated": True},
    }
    return "data: " + json.dumps(chunk, separators=(",", ":")) + "\n\n"


async def forward_stream(
    ctx: AppContext,
    session: AsyncSession,
    tenant: Tenant,
    request: RouteRequest,
    body: dict[str, Any],
    decided: Decided | None = None,
) -> Stream | Forwarded:
    """Open the upstream event stream (with retries and fallbacks before its first byte) and return the
    events to pass through. A client that disconnects cancels the iterator, which closes the upstream
    response: the backend sees its connection closed.

    An ensemble (a ``set`` decision) or a judged cascade needs whole answers before it can answer, so it
    is run as without ``stream`` and returned as ``Forwarded``; the caller streams that answer."""
    route, router = decided if decided is not None else await gateway.decide(ctx, session, tenant, request)
    if (route.mode == "set" and len(route.models) > 1) or (router is not None and router.judge_url):
        unstreamed = {**body, "stream": False}
        return await forward_json(ctx, session, tenant, request, unstreamed, decided=(route, router))
    attempts: list[AttemptRecord] = []
    given = body.get("stream_options")
    options: dict[str, Any] = given if isinstance(given, dict) else {}
    asked_usage = asks_usage(body)
    upstream_body = {**body, "stream": True, "stream_options": {**options, "include_usage": True}}
    target, response = await _call(ctx, session, request, route, upstream_body, CHAT_PATH, attempts, True)
    assert isinstance(response, httpx.Response)
    prompt_chars = len(request.text())
    field = body_field(route, target.name)

    async def events() -> AsyncIterator[bytes]:
        seen: dict[str, Any] = {}
        outcome = "cancelled"
        message = ""
        try:
            async for line in response.aiter_lines():
                out = _rewrite(line, target, not asked_usage, seen, field)
                if seen.get("done") and asked_usage and "usage" not in seen:
                    yield _estimated_usage_chunk(seen, target, field, prompt_chars).encode("utf-8")
                if out is not None:
                    yield (out + "\n").encode("utf-8")
            outcome = "ok" if seen.get("done") else "connection"
            message = f"backend {target.name!r} closed the stream before [DONE]"
        except httpx.HTTPError as exc:
            outcome = "connection"
            message = f"backend {target.name!r} broke the stream: {type(exc).__name__}: {exc}"
        finally:
            await response.aclose()
            if outcome == "connection":
                attempts.append(AttemptRecord(target.name, len(attempts) + 1, outcome, None, 0.0, message))
            elif outcome == "cancelled":
                attempts.append(
                    AttemptRecord(target.name, len(attempts) + 1, outcome, None, 0.0, "client disconnected")
                )
            cost = None
            if outcome == "ok":
                tin, tout = usage_tokens(seen.get("usage"), prompt_chars, int(seen.get("chars", 0)))
                cost = target.cost(tin, tout)
            with anyio.CancelScope(shield=True):
                try:
                    async with ctx.sessionmaker() as own:
                        output = mixture_output(route.mode, "".join(seen.get("text", [])))
                        await settle(ctx, own, tenant, route.decision_id, target, attempts, cost, output)
                except Exception:
                    log.exception("recording the stream of decision %s failed", route.decision_id)
        if outcome == "connection":
            error = {"error": {"message": message, "type": "backend_error", "code": 502}}
            yield f"data: {json.dumps(error)}\n\n".encode()

    return Stream(route, target, events())
