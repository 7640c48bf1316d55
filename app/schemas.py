"""Request and response models: the public HTTP contract. Storage models live in app/store/models.py."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from embeddings.prompt_text import DEFAULT_STRATEGY, MAX_TOKENS, MIN_TOKENS, STRATEGIES, EmbedText, Prompt

Name = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")
FiniteNonNeg = Field(0.0, ge=0, allow_inf_nan=False)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- tenants and keys ----------------------------------------------------------------------------------


class TenantCreate(Strict):
    name: str = Name


class TenantOut(BaseModel):
    id: int
    name: str
    created_at: datetime


class KeyCreate(Strict):
    name: str = Field("", max_length=100)


class KeyOut(BaseModel):
    id: int
    prefix: str
    name: str
    created_at: datetime
    revoked_at: datetime | None = None


class KeyCreated(KeyOut):
    key: str = Field(description="the API key; shown only in this response")


# --- backends --------------------------------------------------------------------------------------------


class BackendFields(Strict):
    kind: Literal["chat", "image"] = "chat"
    base_url: str = Field(min_length=1, max_length=2000, pattern=r"^https?://")
    upstream_model: str | None = Field(None, max_length=200, description="model name sent upstream")
    usd_per_mtok_in: float = FiniteNonNeg
    usd_per_mtok_out: float = FiniteNonNeg
    usd_per_call: float = FiniteNonNeg
    default_tokens_out: int = Field(256, gt=0, le=1_000_000)
    timeout_s: float = Field(60.0, gt=0, le=3600, allow_inf_nan=False)
    api_key: str | None = Field(None, description="write-only: stored, never returned")


class BackendCreate(BackendFields):
    name: str = Name


class BackendUpdate(Strict):
    kind: Literal["chat", "image"] | None = None
    base_url: str | None = Field(None, min_length=1, max_length=2000, pattern=r"^https?://")
    upstream_model: str | None = None
    usd_per_mtok_in: float | None = Field(None, ge=0, allow_inf_nan=False)
    usd_per_mtok_out: float | None = Field(None, ge=0, allow_inf_nan=False)
    usd_per_call: float | None = Field(None, ge=0, allow_inf_nan=False)
    default_tokens_out: int | None = Field(None, gt=0, le=1_000_000)
    timeout_s: float | None = Field(None, gt=0, le=3600, allow_inf_nan=False)
    api_key: str | None = None


class BackendOut(BaseModel):
    id: int
    name: str
    kind: str
    base_url: str
    upstream_model: str | None
    usd_per_mtok_in: float
    usd_per_mtok_out: float
    usd_per_call: float
    default_tokens_out: int
    timeout_s: float
    has_api_key: bool
    created_at: datetime
    updated_at: datetime


# --- routers ---------------------------------------------------------------------------------------------


def _check_range(value: list[float] | None) -> list[float] | None:
    if value is None:
        return value
    if len(value) != 2 or not all(math.isfinite(v) for v in value) or not value[0] < value[1]:
        raise ValueError("reward_range must be [lo, hi] with finite lo < hi")
    return value


class EmbedTextConfig(Strict):
    """What of each prompt the router's embedder reads (embeddings/prompt_text.py, README "Router settings")."""

    strategy: str = Field(DEFAULT_STRATEGY, description=f"one of {', '.join(STRATEGIES)}")
    max_tokens: int | None = Field(
        None,
        ge=MIN_TOKENS,
        le=MAX_TOKENS,
        description="budget in the embedder's word pieces (4 characters a piece without a tokenizer), "
        "clipped to what it reads; null = all it reads",
    )

    @model_validator(mode="after")
    def _known(self) -> EmbedTextConfig:
        self.rule()  # raises EmbedTextError (a ValueError: a 422) for an unknown strategy
        return self

    def rule(self) -> EmbedText:
        return EmbedText(self.strategy, self.max_tokens)


class RouterCreate(Strict):
    name: str = Name
    policy: str = Field(min_length=1, max_length=100)
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    arms: list[str] = Field(min_length=1, max_length=256, description="backend names")
    reward_range: list[float] = Field(default_factory=lambda: [0.0, 1.0])
    seed: int = Field(0, ge=0, le=2**63 - 1)
    is_default: bool = False
    judge_url: str | None = Field(
        None, max_length=2000, pattern=r"^https?://", description="HTTP judge for gateway-driven cascades"
    )
    judge_threshold: float = Field(0.5, allow_inf_nan=False, description="a judge score at or above passes")
    embed_text: EmbedTextConfig | None = Field(
        None, description="what of each prompt is embedded; null = default"
    )

    _range = field_validator("reward_range")(_check_range)


class RouterUpdate(Strict):
    policy: str | None = Field(None, min_length=1, max_length=100)
    hyperparameters: dict[str, Any] | None = None
    arms: list[str] | None = Field(None, min_length=1, max_length=256)
    reward_range: list[float] | None = None
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    is_default: bool | None = None
    judge_url: str | None = Field(
        None, max_length=2000, pattern=r"^(https?://.*)?$", description="'' removes it"
    )
    judge_threshold: float | None = Field(None, allow_inf_nan=False)
    embed_text: EmbedTextConfig | None = Field(None, description="{} restores the default")

    _range = field_validator("reward_range")(_check_range)


class RouterOut(BaseModel):
    id: int
    tenant: str
    name: str
    policy: str
    hyperparameters: dict[str, Any]
    arms: list[str]
    reward_range: list[float]
    seed: int
    is_default: bool
    version: int
    judge_url: str | None = None
    judge_threshold: float = 0.5
    embed_text: EmbedTextConfig = Field(default_factory=EmbedTextConfig)
    created_at: datetime
    updated_at: datetime


class RouterStateOut(BaseModel):
    router: str
    policy: str
    version: int
    watermark: int = Field(description="events with id <= watermark are in the starting snapshot")
    events_folded: int = Field(description="events this process has folded into the policy")
    last_event_id: int
    state: dict[str, Any] = Field(description="the policy's state_dict, arrays base64-encoded")


class RouterStateImport(Strict):
    state: dict[str, Any]


# --- routing and feedback -----------------------------------------------------------------------------


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str = Field(min_length=1, max_length=50)
    content: str | list[dict[str, Any]] | None = None


class RouteRequest(Strict):
    router: str | None = Field(None, description="router name; omitted = the tenant's default router")
    prompt: str | None = Field(None, description="the prompt text (or give messages)")
    messages: list[ChatMessage] | None = Field(None, min_length=1, description="OpenAI-style chat messages")
    candidates: list[str] | None = Field(
        None, min_length=1, description="restrict the choice to these models"
    )
    metadata: dict[str, Any] = Field(default_factory=dict)
    seed: int | None = Field(
        None,
        ge=0,
        le=2**63 - 1,
        description="the decision's randomness comes from (router seed, this seed) instead of the decision "
        "id: the same requests in the same order to a router in the same state get the same decisions "
        "(OpenAI's 'seed'; /v1 endpoints take it from the body)",
    )
    forward: bool = Field(False, description="call the chosen backend and return its answer too")
    request: dict[str, Any] | None = Field(
        None,
        description="with forward: the OpenAI-style body sent upstream (messages -> chat completions, "
        "prompt -> image generations); its messages/prompt are routed when 'prompt'/'messages' are omitted",
    )

    @model_validator(mode="after")
    def _one_input(self) -> RouteRequest:
        if self.forward:
            if self.request is None:
                raise ValueError("forward: true needs 'request', the OpenAI-style body to send upstream")
            if self.prompt is None and self.messages is None:
                if isinstance(self.request.get("messages"), list) and self.request["messages"]:
                    self.messages = [ChatMessage.model_validate(m) for m in self.request["messages"]]
                elif isinstance(self.request.get("prompt"), str):
                    self.prompt = self.request["prompt"]
        elif self.request is not None:
            raise ValueError("'request' is only used with forward: true")
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of 'prompt' or 'messages'")
        return self

    def text(self) -> str:
        """The prompt, or the messages' text joined by newlines in order (sizes and costs are counted on
        it; what is embedded is the router's embed-text rule applied to ``turns()``)."""
        if self.prompt is not None:
            return self.prompt
        return "\n".join(text for _, text in self.message_turns())

    def turns(self) -> Prompt:
        """The prompt, or ``message_turns()``: what the embed-text rule reads."""
        return self.prompt if self.prompt is not None else self.message_turns()

    def message_turns(self) -> list[tuple[str, str]]:
        """(role, text) of each message with text (its text parts joined by newlines)."""
        turns: list[tuple[str, str]] = []
        for message in self.messages or []:
            if isinstance(message.content, str):
                turns.append((message.role, message.content))
            elif isinstance(message.content, list):
                parts = [str(p.get("text", "")) for p in message.content if p.get("type") == "text"]
                if parts:
                    turns.append((message.role, "\n".join(parts)))
        return turns


class RouteResponse(BaseModel):
    decision_id: str
    router: str | None = Field(description="the router that decided; null for a direct /v1 call")
    policy: str
    model: str | None = Field(description="the first model to call; null when the policy declines")
    models: list[str] = Field(description="models to call, in order (cascades and sets list several)")
    mode: str = Field(description="single | cascade | set | mixture; direct for a /v1 call of a backend")
    scores: dict[str, dict[str, float | None]] = Field(
        description="per-model explanation (for UCB policies: estimate, bonus, index); null = +infinity"
    )
    query: list[str] = Field(description="models the policy asks feedback for as well (active learning)")
    info: dict[str, Any] = Field(default_factory=dict)


# ``cost``: the gateway's own record of what a forwarded call cost (folded as a bandit observation
# without reward), kept apart from the client's ``bandit`` reward for the same model.
FeedbackKind = Literal["bandit", "query", "cascade-step", "cost"]


class FeedbackRequest(Strict):
    decision_id: str = Field(min_length=1, max_length=64)
    model: str | None = Field(None, description="defaults to the decision's first model")
    kind: FeedbackKind = "bandit"
    reward: float | None = Field(None, allow_inf_nan=False, description="within the router's reward range")
    cost: float | None = Field(None, ge=0, allow_inf_nan=False, description="USD spent on this call")
    output_embedding: list[float] | None = Field(
        None, max_length=8192, description="the answer's embedding (mixture policies)"
    )
    output_text: str | None = Field(
        None, min_length=1, description="the answer's text; the gateway embeds it into output_embedding"
    )
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _something(self) -> FeedbackRequest:
        if (
            self.reward is None
            and self.cost is None
            and self.output_embedding is None
            and self.output_text is None
        ):
            raise ValueError(
                "feedback needs at least one of 'reward', 'cost', 'output_embedding' or 'output_text'"
            )
        if self.output_embedding is not None and self.output_text is not None:
            raise ValueError("give 'output_embedding' or 'output_text', not both")
        if self.output_embedding is not None and not all(math.isfinite(v) for v in self.output_embedding):
            raise ValueError("output_embedding must contain finite numbers")
        return self


class FeedbackAccepted(BaseModel):
    event_id: int
    decision_id: str
    model: str
    kind: str
    duplicate: bool = Field(
        description="true when this feedback was already recorded (the first id is returned)"
    )


class FeedbackBatch(Strict):
    events: list[FeedbackRequest] = Field(min_length=1)


class FeedbackBatchAccepted(BaseModel):
    events: list[FeedbackAccepted]


class AttemptOut(BaseModel):
    model: str
    number: int
    outcome: str = Field(description="ok | http_error | timeout | connection | bad_response | cancelled")
    http_status: int | None
    latency_ms: float
    error: str | None = None


class EnsembleMemberOut(BaseModel):
    backend: str
    response: dict[str, Any] | None
    cost: float | None
    error: str | None = None


class JudgedStepOut(BaseModel):
    model: str
    score: float | None = Field(
        description="the judge's score (pass = 1, fail = 0); null if the judge failed"
    )
    passed: bool
    cost: float


class ForwardedRouteResponse(RouteResponse):
    backend: str = Field(description="the backend that answered (the policy's next choice after a failure)")
    response: dict[str, Any] = Field(description="the backend's answer, as it sent it")
    cost: float = Field(description="USD of the call, from the backend's reported usage and its prices")
    attempts: list[AttemptOut]
    ensemble: list[EnsembleMemberOut] | None = Field(
        None, description="set decisions: every member's answer (or error) and cost; null otherwise"
    )
    judged: list[JudgedStepOut] | None = Field(
        None, description="routers with a judge: every cascade step, in order; `cost` is their sum"
    )


class CascadeNextRequest(Strict):
    model: str | None = Field(None, description="the step that failed; defaults to the last model offered")
    reward: float | None = Field(None, allow_inf_nan=False, description="the failed step's reward")
    cost: float | None = Field(None, ge=0, allow_inf_nan=False, description="USD the failed step cost")
    metadata: dict[str, Any] = Field(default_factory=dict)


class CascadeNextResponse(BaseModel):
    decision_id: str
    model: str | None = Field(description="the next model to call; null = stop")
    stop: bool = Field(description="true when no model is left (or the policy declines to go on)")
    tried: list[str] = Field(description="models already called for this decision, in order")
    scores: dict[str, dict[str, float | None]] = Field(default_factory=dict)


class PendingProbe(BaseModel):
    """A probe answer waiting for an evaluator's ``kind: query`` reward. The prompt is not stored: match
    it by ``prompt_hash`` (the decision's hash of the prompt text)."""

    probe_id: int
    decision_id: str
    model: str
    prompt_hash: str
    answer: str | None
    cost: float | None
    created_at: datetime


class PendingProbes(BaseModel):
    probes: list[PendingProbe]
    next_cursor: int | None = Field(description="pass as ?cursor= for the next page; null on the last")


# --- OpenAI-compatible model list ----------------------------------------------------------------------


class OpenAIModel(BaseModel):
    id: str = Field(description="'router', 'router/<name>' or a backend's name: what to send as 'model'")
    object: Literal["model"] = "model"
    created: int = Field(description="Unix time the router or backend was created")
    owned_by: str = Field(description="the tenant for its routers, 'banditgate' for catalog backends")


class OpenAIModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[OpenAIModel]
