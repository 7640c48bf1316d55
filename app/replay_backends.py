"""Replay backends: every model of a logged dataset served as an OpenAI-compatible backend.

The dataset is read by the format's one reader (``replay_dataset.files.read_dataset``, docs/datasets.md),
as ``bench run`` reads it: the same rows, checked alike.

``replay_app(dataset)`` serves model ``m`` at ``/<m>/v1/chat/completions`` (streaming too) and
``/<m>/v1/images/generations``. The prompt (the messages' text joined by newlines, as the gateway embeds
it) is looked up in the rows: the answer is the logged response, or a short placeholder naming the row,
with the logged token counts as ``usage``; absent counts are estimated as the offline benchmark does
(``ReplayRow.token_counts``: input = prompt characters / 4, output = response characters / 4, or the
model's ``default_tokens_out`` when no response is logged), rounded up to whole tokens. Model names may
contain ``/``. ``banditgate replay-backends`` runs it; ``banditgate demo`` mounts it at ``/replay`` over a synthetic dataset (app/demo_dataset.py).

Model ``replay-judge`` (``REPLAY_JUDGE``, unless the dataset has a model of that name) is a judge that
reads logged grades: asked with the shipped grading prompt (app/judge_prompt.py), it finds the answer
among the models' logged (or placeholder) answers and replies ``{"score": s}``, s = the answer's mean
logged reward scaled from the reward range to [0, 1]; an answer it does not know gets a reply without a
score. A router's ``judge: {"backend": <a backend at /replay-judge/v1>, ...}`` thus judges as
``bench run --judge score:sigma=0`` does.

Every call needs ``Authorization: Bearer <api_key>`` (``BANDITGATE_REPLAY_API_KEY``; the demo generates
one and registers its backends with it): served inside a public gateway they would otherwise be free
model endpoints for anyone. Bodies are bounded by the request limits (app/api/http_limits.py).
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, Header, HTTPException, status
from fastapi.responses import JSONResponse, Response, StreamingResponse

from app.api.http_limits import HttpLimits, RequestLimits
from app.auth import bearer_token, matches_secret
from app.judge_prompt import answer_in
from app.schemas import ChatMessage, RouteRequest
from replay_dataset.files import ModelPrice, ReplayRow, read_dataset
from routers.prices import whole_tokens

STREAM_CHUNKS = 4
REPLAY_JUDGE = "replay-judge"


@dataclass
class ReplayDataset:
    """A replay dataset to serve: its models, reward range and usable rows, looked up by prompt (the
    first row of a repeated prompt answers for it)."""

    models: list[ModelPrice]
    reward_range: tuple[float, float]
    rows: list[ReplayRow]
    description: str = ""
    by_prompt: dict[str, ReplayRow] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for row in self.rows:
            self.by_prompt.setdefault(row.prompt, row)

    @classmethod
    def read(cls, directory: str | Path) -> ReplayDataset:
        """Read a replay dataset's files (``replay_dataset.files.read_dataset``: a ``DatasetError`` names
        the file, line and problem)."""
        data = read_dataset(directory)
        return cls(data.meta.models, data.meta.reward_range, data.rows, data.meta.description)

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.models]

    def model(self, name: str) -> ModelPrice | None:
        return next((m for m in self.models if m.name == name), None)


def replay_answer(dataset: ReplayDataset, model: ModelPrice, prompt: str) -> tuple[str, int, int]:
    """(answer text, input tokens, output tokens) for ``prompt`` as ``model`` logged it."""
    row = dataset.by_prompt.get(prompt)
    if row is None:
        text = f"[{model.name}] no logged answer for this prompt (replay placeholder)"
        return text, whole_tokens(len(prompt)), math.ceil(model.default_tokens_out)
    logged = row.responses.get(model.name)
    text = logged if logged is not None else f"[{model.name}] replayed answer to row {row.id}"
    counts = row.token_counts(model)  # the offline benchmark's counts, in whole tokens
    return text, math.ceil(counts.tokens_in), math.ceil(counts.tokens_out)


def logged_grades(dataset: ReplayDataset) -> dict[str, float]:
    """Each answer the models answer (``replay_answer``'s text) -> its mean logged reward scaled to [0, 1]
    (the first row and model of a repeated text)."""
    lo, hi = dataset.reward_range
    grades: dict[str, float] = {}
    for row in dataset.rows:
        for model in dataset.models:
            samples = row.rewards.get(model.name)
            if samples:
                text, _, _ = replay_answer(dataset, model, row.prompt)
                mean = sum(samples) / len(samples)
                grades.setdefault(text, min(max((mean - lo) / (hi - lo), 0.0), 1.0))
    return grades


def judge_reply(grades: dict[str, float], message: str) -> str:
    """``REPLAY_JUDGE``'s reply to a grading message: the logged grade of the answer it holds."""
    answer = answer_in(message)
    grade = grades.get(answer) if answer is not None else None
    return "no logged answer to grade" if grade is None else json.dumps({"score": grade})


def prompt_of(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    if isinstance(messages, list) and messages:
        request = RouteRequest(messages=[ChatMessage.model_validate(m) for m in messages])
        return request.text()
    return str(body.get("prompt", ""))


def _chunks(text: str, n: int) -> Iterator[str]:
    size = max(1, math.ceil(len(text) / n))
    for start in range(0, len(text), size):
        yield text[start : start + size]


def _stream(model: str, text: str, usage: dict[str, int], include_usage: bool) -> Iterator[bytes]:
    base = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def event(data: dict[str, Any]) -> bytes:
        return f"data: {json.dumps({**base, **data})}\n\n".encode()

    yield event(
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    )
    for piece in _chunks(text, STREAM_CHUNKS):
        yield event({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
    yield event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if include_usage:
        yield event({"choices": [], "usage": usage})
    yield b"data: [DONE]\n\n"


def replay_app(dataset: ReplayDataset, api_key: str | None, limits: HttpLimits) -> FastAPI:
    """The dataset's models as backends that answer only ``Bearer api_key`` (none when it is None)."""

    def require_key(authorization: Annotated[str | None, Header()] = None) -> None:
        token = bearer_token(authorization)
        if token is None or not matches_secret(token, api_key):
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                "the replay backends need 'Authorization: Bearer <BANDITGATE_REPLAY_API_KEY>'",
                headers={"WWW-Authenticate": "Bearer"},
            )

    app = FastAPI(
        title="banditgate replay backends",
        description=dataset.description,
        dependencies=[Depends(require_key)],
    )
    app.add_middleware(RequestLimits, limits=limits)

    def model_or_404(name: str) -> ModelPrice:
        model = dataset.model(name)
        if model is None:
            raise HTTPException(
                status.HTTP_404_NOT_FOUND, f"model {name!r} not in the dataset ({dataset.names})"
            )
        return model

    @app.get("/{name:path}/v1/models")
    async def models(name: str) -> dict[str, Any]:
        model = model_or_404(name)
        return {"object": "list", "data": [{"id": model.name, "object": "model", "owned_by": "replay"}]}

    grades: dict[str, float] = {}

    def judged(body: dict[str, Any]) -> tuple[ModelPrice, str, int, int]:
        if not grades:
            grades.update(logged_grades(dataset))
        message = prompt_of(body)
        text = judge_reply(grades, message)
        return ModelPrice(REPLAY_JUDGE), text, whole_tokens(len(message)), whole_tokens(len(text))

    @app.post("/{name:path}/v1/chat/completions", response_model=None)
    async def chat(name: str, body: dict[str, Any] = Body(...)) -> Response:
        if name == REPLAY_JUDGE and dataset.model(name) is None:
            model, text, tin, tout = judged(body)
        else:
            model = model_or_404(name)
            text, tin, tout = replay_answer(dataset, model, prompt_of(body))
        usage = {"prompt_tokens": tin, "completion_tokens": tout, "total_tokens": tin + tout}
        if body.get("stream"):
            include = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(
                _stream(model.name, text, usage, include), media_type="text/event-stream"
            )
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model.name,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                ],
                "usage": usage,
            }
        )

    @app.post("/{name:path}/v1/images/generations")
    async def images(name: str, body: dict[str, Any] = Body(...)) -> dict[str, Any]:
        model = model_or_404(name)
        text, _, _ = replay_answer(dataset, model, prompt_of(body))
        return {
            "created": int(time.time()),
            "data": [{"revised_prompt": text, "url": f"replay://{model.name}"}],
        }

    return app
