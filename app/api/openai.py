"""OpenAI-compatible endpoints: ``POST /v1/chat/completions`` and ``POST /v1/images/generations``.

Existing OpenAI clients work unchanged with ``base_url=<gateway>/v1`` and a tenant key: ``model`` is
``router`` (the tenant's default router) or ``router/<name>``. The gateway routes the prompt, forwards the
request to the chosen backend (see app/forwarding.py) and answers with the backend's response, whose
``model`` is the backend that answered. The header ``x-banditgate-decision-id`` carries the decision id
for ``POST /feedback``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Body, HTTPException, status
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError

from app import forwarding, probes
from app.deps import Ctx, CurrentTenant, Session
from app.jsonable import jsonable
from app.schemas import RouteRequest, RouteResponse

router = APIRouter(prefix="/v1", tags=["OpenAI-compatible"])

OpenAIBody = Annotated[dict[str, Any], Body(description="the OpenAI request body")]
ROUTER_MODEL = "router"


def router_name(model: Any) -> str | None:
    """``router`` -> None (the default router), ``router/<name>`` -> name; anything else is a 422."""
    if model == ROUTER_MODEL:
        return None
    if isinstance(model, str) and model.startswith(ROUTER_MODEL + "/") and len(model) > len(ROUTER_MODEL) + 1:
        return model[len(ROUTER_MODEL) + 1 :]
    raise HTTPException(
        status.HTTP_422_UNPROCESSABLE_CONTENT,
        f"model must be 'router' (the tenant's default router) or 'router/<name>', not {model!r}",
    )


def route_request(body: dict[str, Any], **text: Any) -> RouteRequest:
    metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    try:
        seed = body.get("seed")
        return RouteRequest(router=router_name(body.get("model")), metadata=metadata, seed=seed, **text)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, jsonable(errors)) from exc


def _headers(route: RouteResponse, backend: str, cost: float | None = None) -> dict[str, str]:
    """``x-banditgate-query`` lists the models whose rewards the policy asks for too (active learning);
    the gateway calls them in the background (app/probes.py, listed by ``GET /feedback/pending``): an
    evaluator that can judge them posts ``kind: query`` feedback."""
    headers = {"x-banditgate-decision-id": route.decision_id, "x-banditgate-model": backend}
    if cost is not None:
        headers["x-banditgate-cost-usd"] = f"{cost:.10g}"
    if route.query:
        headers["x-banditgate-query"] = ",".join(route.query)
    return headers


@router.post("/chat/completions", response_model=None)
async def chat_completions(body: OpenAIBody, ctx: Ctx, session: Session, tenant: CurrentTenant) -> Response:
    """Chat completions, streamed (server-sent events) when ``stream`` is true."""
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "'messages' must be a non-empty list")
    request = route_request(body, messages=body["messages"])
    if body.get("stream"):
        stream = await forwarding.forward_stream(ctx, session, tenant, request, body)
        if isinstance(stream, forwarding.Forwarded):  # an ensemble or a judged cascade: answered whole
            probes.schedule(ctx, tenant, request, stream.route, body, probes.answered_by(stream))
            payload, headers = merged(stream, "choices")
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(
                completion_events(payload, include_usage), media_type="text/event-stream", headers=headers
            )
        probes.schedule(ctx, tenant, request, stream.route, body, [stream.target.name])
        return StreamingResponse(
            stream.events,
            media_type="text/event-stream",
            headers=_headers(stream.route, stream.target.name),
        )
    done = await forwarding.forward_json(ctx, session, tenant, request, body)
    probes.schedule(ctx, tenant, request, done.route, body, probes.answered_by(done))
    return answer(done, "choices")


async def completion_events(completion: dict[str, Any], include_usage: bool) -> AsyncIterator[bytes]:
    """A whole chat completion as the server-sent events of a stream: one ``chat.completion.chunk`` per
    choice carrying its message as the delta and its finish reason, the usage chunk when the client asked
    for it (``stream_options.include_usage``), then ``[DONE]``."""
    base: dict[str, Any] = {
        k: completion[k] for k in ("id", "created", "model", "system_fingerprint") if k in completion
    }
    base["object"] = "chat.completion.chunk"
    for choice in completion.get("choices") or []:
        message = choice.get("message") or {}
        delta = {"role": message.get("role", "assistant"), "content": message.get("content")}
        item = {"index": choice.get("index", 0), "delta": delta, "finish_reason": choice.get("finish_reason")}
        if "model" in choice:  # an ensemble member's answer says whose it is
            item["model"] = choice["model"]
        yield f"data: {json.dumps({**base, 'choices': [item]})}\n\n".encode()
    if include_usage and completion.get("usage") is not None:
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': completion['usage']})}\n\n".encode()
    yield b"data: [DONE]\n\n"


def answer(done: forwarding.Forwarded, items: str) -> JSONResponse:
    """The backend's answer with ``model`` set to it (see ``merged``)."""
    payload, headers = merged(done, items)
    return JSONResponse(payload, headers=headers)


def merged(done: forwarding.Forwarded, items: str) -> tuple[dict[str, Any], dict[str, str]]:
    """(payload, headers) of an answer. An ensemble (a ``set`` decision) answers with every member's
    ``items`` (chat ``choices`` or image ``data``) in one list, each tagged with its ``model``; ``model``
    and ``x-banditgate-model`` list the members that answered, the cost is their sum."""
    if done.members is None:
        payload = {**done.payload, "model": done.target.name}
        return payload, _headers(done.route, done.target.name, done.cost)
    items_out: list[Any] = []
    names: list[str] = []
    for member in done.members:
        if member.payload is None:
            continue
        names.append(member.backend)
        for item in member.payload.get(items) or []:
            tagged = {**item, "model": member.backend} if isinstance(item, dict) else item
            if items == "choices" and isinstance(tagged, dict):
                tagged["index"] = len(items_out)
            items_out.append(tagged)
    model = ",".join(names)
    cost = sum(m.cost or 0.0 for m in done.members)
    return {**done.payload, items: items_out, "model": model}, _headers(done.route, model, cost)


@router.post("/images/generations", response_model=None)
async def image_generations(body: OpenAIBody, ctx: Ctx, session: Session, tenant: CurrentTenant) -> Response:
    """Image generations; the prompt is routed, the backend's answer returned with its ``model``."""
    if not isinstance(body.get("prompt"), str):
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "'prompt' must be a string")
    request = route_request(body, prompt=body["prompt"])
    done = await forwarding.forward_json(ctx, session, tenant, request, body)
    probes.schedule(ctx, tenant, request, done.route, body, probes.answered_by(done))
    return answer(done, "data")
