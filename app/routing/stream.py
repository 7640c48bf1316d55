"""Streaming pass-through: the upstream event stream with ``model`` rewritten and the usage chunk
kept for accounting; settled when the stream ends, even on a disconnect."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx

from app.backends import AttemptRecord, Target
from app.routing.answers import (
    BODY_FIELD,
    CHAT_PATH,
    Stream,
    asks_usage,
    body_field,
    estimated_usage,
    mixture_output,
)
from app.routing.costs import record_call, usage_tokens
from app.routing.fallback import call_with_fallback
from app.routing.turn import Turn

log = logging.getLogger(__name__)


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


async def stream_answer(turn: Turn) -> Stream:
    """Open the upstream event stream of the turn's decision (with retries and fallbacks before its
    first byte) and return the events to pass through. A client that disconnects cancels the iterator,
    which closes the upstream response: the backend sees its connection closed."""
    ctx, request, route, body = turn.ctx, turn.request, turn.decided, turn.body
    assert body is not None
    attempts: list[AttemptRecord] = []
    given = body.get("stream_options")
    options: dict[str, Any] = given if isinstance(given, dict) else {}
    asked_usage = asks_usage(body)
    upstream_body = {**body, "stream": True, "stream_options": {**options, "include_usage": True}}
    target, response = await call_with_fallback(turn, route, upstream_body, CHAT_PATH, attempts, True)
    assert isinstance(response, httpx.Response)
    prompt_chars = len(request.text())
    field = body_field(route, target.name)

    async def events() -> AsyncIterator[bytes]:
        seen: dict[str, Any] = {}
        outcome = "cancelled"
        message = ""
        upstream: str | None = None
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
            message = f"backend {target.name!r} broke the stream: {type(exc).__name__}"
            upstream = ctx.backends.excerpt(str(exc))
        finally:
            await response.aclose()
            if outcome == "connection":
                attempts.append(
                    AttemptRecord(target.name, len(attempts) + 1, outcome, None, 0.0, message, upstream)
                )
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
                    output = mixture_output(route.mode, "".join(seen.get("text", [])))
                    await record_call(turn, target, attempts, cost, output)
                except Exception:
                    log.exception("recording the stream of decision %s failed", route.decision_id)
        if outcome == "connection":
            error = {"error": {"message": message, "type": "backend_error", "code": 502}}
            yield f"data: {json.dumps(error)}\n\n".encode()

    return Stream(route, target, events())
