"""What a forwarded decision answers: ``Forwarded`` (whole), ``Stream``, ensemble members, judged
steps, and the helpers that read an OpenAI answer's text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from app.backends import AttemptRecord, Target
from app.schemas import RouteResponse
from routers.prices import whole_tokens

CHAT_PATH = "/chat/completions"


IMAGE_PATH = "/images/generations"


BODY_FIELD = "banditgate"  # the answer's field naming its decision (see ``body_field``)


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
    cost: float  # the call's and the judge's
    judge_cost: float = 0.0


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
