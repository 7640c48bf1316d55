"""The messages that travel on the event bus, and their wire encoding (one JSON field per message).

``FeedbackMessage`` carries everything a replica needs to fold an event (the decision's embedding
included), so folding never reads the database. An ``offline`` event (a warm-start log row) has no
decision: its message carries the row's own embedding, and its row id in ``decision_id`` (the key the
policy's observation gets). ``RouterChanged`` tells replicas that a router's
configuration or learned state was replaced (update, reset, import): they drop their copy and reload.
``CatalogChanged`` tells them to drop their cached keys, routers and backends (app/catalog.py).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class FeedbackMessage:
    event_id: int
    router_id: int
    decision_id: str
    model: str
    kind: str
    reward: float | None
    cost: float | None
    embedding: np.ndarray
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RouterChanged:
    router_id: int
    version: int


@dataclass(frozen=True)
class CatalogChanged:
    """An API key, tenant, backend or router was added, changed or removed: replicas clear their
    cached copies (app/catalog.py). ``what`` names the change, for logs."""

    what: str


Message = FeedbackMessage | RouterChanged | CatalogChanged


def encode_message(message: Message) -> str:
    if isinstance(message, CatalogChanged):
        return json.dumps({"type": "catalog", "what": message.what})
    if isinstance(message, RouterChanged):
        return json.dumps({"type": "router", "router_id": message.router_id, "version": message.version})
    return json.dumps(
        {
            "type": "feedback",
            "event_id": message.event_id,
            "router_id": message.router_id,
            "decision_id": message.decision_id,
            "model": message.model,
            "kind": message.kind,
            "reward": message.reward,
            "cost": message.cost,
            "embedding": base64.b64encode(np.asarray(message.embedding, np.float32).tobytes()).decode(),
            "payload": message.payload,
        }
    )


def decode_message(raw: str | bytes) -> Message:
    data = json.loads(raw)
    if data["type"] == "catalog":
        return CatalogChanged(what=str(data.get("what", "")))
    if data["type"] == "router":
        return RouterChanged(router_id=int(data["router_id"]), version=int(data["version"]))
    return FeedbackMessage(
        event_id=int(data["event_id"]),
        router_id=int(data["router_id"]),
        decision_id=str(data["decision_id"]),
        model=str(data["model"]),
        kind=str(data["kind"]),
        reward=data["reward"],
        cost=data["cost"],
        embedding=np.frombuffer(base64.b64decode(data["embedding"]), dtype=np.float32).copy(),
        payload=data.get("payload") or {},
    )
