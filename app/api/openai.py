"""OpenAI-compatible endpoints: ``POST /v1/chat/completions``, ``POST /v1/images/generations``,
``GET /v1/models`` and ``GET /v1/models/{id}``.

Existing OpenAI clients work unchanged with ``base_url=<gateway>/v1`` and a tenant key. ``model`` is
``router`` (the tenant's default router), ``router/<name>``, or the name of a backend that is an arm of
one of the tenant's routers: that backend is called directly (a ``direct`` decision of no router: logged,
costed, no routing, no fallback; see ``decide.decide_direct``). The gateway forwards the request body
untouched but for ``model`` (see app/routing/forward.py) and answers with the backend's response, whose
``model`` is the backend that answered. The decision id for ``POST /feedback`` is in the header
``x-banditgate-decision-id`` and in the body's ``banditgate`` field (``answers.body_field``). Errors
are in OpenAI's shape (app/api/errors.py).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Body, HTTPException, status
from fastapi.responses import Response, StreamingResponse
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.api.contract import documented
from app.api.deps import Ctx, CurrentTenant, Session
from app.api.errors import InvalidParam, ModelNotFound
from app.context import AppContext
from app.input_types import ForwardBody, Text
from app.jsonable import jsonable
from app.routing import answers, decide, forward, probes
from app.routing.turn import Turn, direct_turn, routed_turn
from app.schemas import OpenAIModel, OpenAIModelList, RouteRequest, RouteResponse
from app.store.models import Backend, Router, Tenant

router = APIRouter(prefix="/v1", tags=["OpenAI-compatible"])

OpenAIBody = Annotated[ForwardBody, Body(description="the OpenAI request body")]
ROUTER_MODEL = "router"
CATALOG_OWNER = "banditgate"


def router_name(model: str) -> str | None:
    """``router`` -> None (the default router), ``router/<name>`` -> name."""
    if model == ROUTER_MODEL:
        return None
    name = model[len(ROUTER_MODEL) + 1 :]
    if not name:
        raise InvalidParam("model", "model 'router/' names no router: use 'router' or 'router/<name>'")
    return name


def is_router_model(model: str) -> bool:
    return model == ROUTER_MODEL or model.startswith(ROUTER_MODEL + "/")


def route_request(body: dict[str, Any], router: str | None, **text: Any) -> RouteRequest:
    metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    try:
        seed = body.get("seed")
        return RouteRequest(router=router, metadata=metadata, seed=seed, **text)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, jsonable(errors)) from exc


async def turn_for(
    ctx: AppContext, session: AsyncSession, tenant: Tenant, path: str, body: dict[str, Any], **text: Any
) -> Turn:
    """The request's turn through routing: its router resolved (``router``, ``router/<name>``) for it
    to decide, or, for a backend named as ``model``, with that backend's direct decision already
    logged (a backend that cannot serve ``path`` is refused first)."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidParam("model", "'model' must be 'router', 'router/<name>' or one of GET /v1/models")
    if is_router_model(model):
        return await routed_turn(ctx, session, tenant, route_request(body, router_name(model), **text), body)
    if model not in await decide.tenant_backends(session, tenant):
        raise ModelNotFound(model)
    request = route_request(body, None, **text)
    turn = await direct_turn(ctx, session, tenant, request, body, model, path)
    await decide.decide_direct(turn, model)
    return turn


def _headers(route: RouteResponse, backend: str, cost: float | None = None) -> dict[str, str]:
    """``x-banditgate-query`` lists the models whose rewards the policy asks for too (active learning);
    the gateway calls them in the background (app/routing/probes.py, listed by ``GET /feedback/pending``): an
    evaluator that can judge them posts ``kind: query`` feedback."""
    headers = {"x-banditgate-decision-id": route.decision_id, "x-banditgate-model": backend}
    if cost is not None:
        headers["x-banditgate-cost-usd"] = f"{cost:.10g}"
    if route.query:
        headers["x-banditgate-query"] = ",".join(route.query)
    return headers


JSON_ANSWER = {"application/json": {"schema": {"type": "object"}}}
STREAMED_ANSWER = {"text/event-stream": {"schema": {"type": "string"}}}


@router.post(
    "/chat/completions",
    response_model=None,
    responses={
        200: {
            "description": "The completion, or with `stream: true` its server-sent events",
            "content": {**JSON_ANSWER, **STREAMED_ANSWER},
        },
        **documented(404, 502, 503, 504),
    },
)
async def chat_completions(body: OpenAIBody, ctx: Ctx, session: Session, tenant: CurrentTenant) -> Response:
    """Chat completions, streamed (server-sent events) when ``stream`` is true."""
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        raise InvalidParam("messages", "'messages' must be a non-empty list")
    turn = await turn_for(ctx, session, tenant, answers.CHAT_PATH, body, messages=body["messages"])
    if body.get("stream"):
        streamed = await forward.forward_stream(turn)
        if isinstance(streamed, answers.Forwarded):  # an ensemble or a judged cascade: answered whole
            probes.schedule(turn, streamed)
            payload, headers = merged(streamed, "choices")
            if answers.asks_usage(body) and payload.get("usage") is None:
                answered = answers.answer_chars(payload)
                payload["usage"] = answers.estimated_usage(len(turn.request.text()), answered)
                payload[answers.BODY_FIELD]["usage_estimated"] = True
            return StreamingResponse(
                completion_events(payload, answers.asks_usage(body)),
                media_type="text/event-stream",
                headers=headers,
            )
        probes.schedule(turn, streamed)
        return StreamingResponse(
            streamed.events,
            media_type="text/event-stream",
            headers=_headers(streamed.route, streamed.target.name),
        )
    done = await forward.forward_json(turn)
    probes.schedule(turn, done)
    return answer(done, "choices")


async def completion_events(completion: dict[str, Any], include_usage: bool) -> AsyncIterator[bytes]:
    """A whole chat completion as the server-sent events of a stream: one ``chat.completion.chunk`` per
    choice carrying its message as the delta and its finish reason (the first with the ``banditgate``
    field), the usage chunk when the client asked for it (``stream_options.include_usage``), then
    ``[DONE]``."""
    base: dict[str, Any] = {
        k: completion[k] for k in ("id", "created", "model", "system_fingerprint") if k in completion
    }
    base["object"] = "chat.completion.chunk"
    for number, choice in enumerate(completion.get("choices") or []):
        message = choice.get("message") or {}
        delta = {"role": message.get("role", "assistant"), "content": message.get("content")}
        item = {"index": choice.get("index", 0), "delta": delta, "finish_reason": choice.get("finish_reason")}
        if "model" in choice:  # an ensemble member's answer says whose it is
            item["model"] = choice["model"]
        chunk = {**base, "choices": [item]}
        if number == 0 and answers.BODY_FIELD in completion:
            chunk[answers.BODY_FIELD] = completion[answers.BODY_FIELD]
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    if include_usage and completion.get("usage") is not None:
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': completion['usage']})}\n\n".encode()
    yield b"data: [DONE]\n\n"


def answer(done: answers.Forwarded, items: str) -> Response:
    """The backend's answer with ``model`` set to it (see ``merged``), written by orjson: the payload is
    what orjson parsed (app/backends.py) plus the gateway's own fields, so it always can be."""
    payload, headers = merged(done, items)
    return Response(orjson.dumps(payload), media_type="application/json", headers=headers)


def merged(done: answers.Forwarded, items: str) -> tuple[dict[str, Any], dict[str, str]]:
    """(payload, headers) of an answer. An ensemble (a ``set`` decision) answers with every member's
    ``items`` (chat ``choices`` or image ``data``) in one list, each tagged with its ``model``; ``model``
    and ``x-banditgate-model`` list the members that answered, the cost is their sum."""
    if done.members is None:
        field = answers.body_field(done.route, done.target.name)
        payload = {**done.payload, "model": done.target.name, answers.BODY_FIELD: field}
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
    payload = {**done.payload, items: items_out, "model": model}
    payload[answers.BODY_FIELD] = answers.body_field(done.route, model)
    return payload, _headers(done.route, model, cost)


@router.post(
    "/images/generations",
    response_model=None,
    responses={
        200: {"description": "The backend's images", "content": JSON_ANSWER},
        **documented(404, 502, 503, 504),
    },
)
async def image_generations(body: OpenAIBody, ctx: Ctx, session: Session, tenant: CurrentTenant) -> Response:
    """Image generations; the prompt is routed, the backend's answer returned with its ``model``."""
    if not isinstance(body.get("prompt"), str):
        raise InvalidParam("prompt", "'prompt' must be a string")
    turn = await turn_for(ctx, session, tenant, answers.IMAGE_PATH, body, prompt=body["prompt"])
    done = await forward.forward_json(turn)
    probes.schedule(turn, done)
    return answer(done, "data")


async def _model_list(session: AsyncSession, tenant: Tenant) -> list[OpenAIModel]:
    """``router`` (when the tenant has a default router), ``router/<name>`` for each of its routers,
    then each backend that is an arm of one of them."""
    routers = (await session.scalars(select(Router).where(Router.tenant_id == tenant.id))).all()
    models: list[OpenAIModel] = []
    for row in sorted(routers, key=lambda r: r.name):
        created = int(row.created_at.timestamp())
        if row.is_default:
            models.insert(0, OpenAIModel(id=ROUTER_MODEL, created=created, owned_by=tenant.name))
        models.append(OpenAIModel(id=f"{ROUTER_MODEL}/{row.name}", created=created, owned_by=tenant.name))
    names = await decide.tenant_backends(session, tenant)
    backends = (await session.scalars(select(Backend).where(Backend.name.in_(names)))).all()
    for backend in sorted(backends, key=lambda b: b.name):
        created = int(backend.created_at.timestamp())
        models.append(OpenAIModel(id=backend.name, created=created, owned_by=CATALOG_OWNER))
    return models


@router.get("/models", response_model=OpenAIModelList)
async def list_models(session: Session, tenant: CurrentTenant) -> OpenAIModelList:
    """What this key may send as ``model``: its routers, and the backends it may call directly."""
    return OpenAIModelList(data=await _model_list(session, tenant))


@router.get("/models/{model_id:path}", response_model=OpenAIModel)
async def retrieve_model(model_id: Text, session: Session, tenant: CurrentTenant) -> OpenAIModel:
    """One entry of ``GET /v1/models``; a 404 naming the model otherwise. Backend names may hold '/'."""
    for model in await _model_list(session, tenant):
        if model.id == model_id:
            return model
    raise ModelNotFound(model_id)
