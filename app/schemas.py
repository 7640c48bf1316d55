"""Request and response models: the public HTTP contract. Storage models live in app/store/models.py."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.input_types import (
    ROW_ID_CHARS,
    BackendName,
    DbInt,
    DecisionId,
    ForwardBody,
    HttpUrl,
    HyperparameterValues,
    JsonObject,
    KeyName,
    ModelName,
    PolicyName,
    Role,
    RouterName,
    Secret,
    StateUpload,
    TenantName,
    Text,
    UpstreamModel,
    check_forwarded,
)
from app.judge_prompt import MAX_RUBRIC_CHARS, MAX_TEMPLATE_CHARS, template_problem
from app.settings import RATE_LIMIT_MAX
from app.timewindow import UtcTime
from embeddings.prompt_text import DEFAULT_STRATEGY, MAX_TOKENS, MIN_TOKENS, STRATEGIES, EmbedText, Prompt

FiniteNonNeg = Field(0.0, ge=0, allow_inf_nan=False)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- tenants and keys ----------------------------------------------------------------------------------


class TenantCreate(Strict):
    name: TenantName


class TenantLimits(Strict):
    """Each of a tenant's keys' rate limits; null (or left out) = the server's default
    (``BANDITGATE_RATE_LIMIT_RPS``, ``_BURST``, ``_CONCURRENCY``)."""

    rate_limit_rps: float | None = Field(
        None, gt=0, le=RATE_LIMIT_MAX, allow_inf_nan=False, description="requests per second per key"
    )
    rate_limit_burst: int | None = Field(
        None, ge=1, le=RATE_LIMIT_MAX, description="requests a key may send at once (token bucket size)"
    )
    rate_limit_concurrency: int | None = Field(
        None, ge=1, le=RATE_LIMIT_MAX, description="requests in flight per key"
    )


class EffectiveLimits(BaseModel):
    rate_limit_rps: float
    rate_limit_burst: int
    rate_limit_concurrency: int


class TenantLimitsOut(BaseModel):
    configured: TenantLimits = Field(description="the tenant's own values (null = the default)")
    effective: EffectiveLimits = Field(description="what each of its keys gets now")


class TenantOut(BaseModel):
    id: int
    name: str
    created_at: UtcTime
    limits: TenantLimits = Field(description="the tenant's own rate limits (null = the default)")


class KeyCreate(Strict):
    name: KeyName = ""


class KeyOut(BaseModel):
    id: int
    prefix: str
    name: str
    created_at: UtcTime
    revoked_at: UtcTime | None = None


class KeyCreated(KeyOut):
    key: str = Field(description="the API key; shown only in this response")


# --- backends --------------------------------------------------------------------------------------------


class BackendFields(Strict):
    kind: Literal["chat", "image"] = "chat"
    base_url: HttpUrl
    upstream_model: UpstreamModel | None = Field(None, description="model name sent upstream")
    usd_per_mtok_in: float = FiniteNonNeg
    usd_per_mtok_out: float = FiniteNonNeg
    usd_per_call: float = FiniteNonNeg
    default_tokens_out: int = Field(256, gt=0, le=1_000_000)
    timeout_s: float = Field(60.0, gt=0, le=3600, allow_inf_nan=False)
    api_key: Secret | None = Field(None, description="write-only: stored, never returned")


class BackendCreate(BackendFields):
    name: BackendName


class BackendUpdate(Strict):
    kind: Literal["chat", "image"] | None = None
    base_url: HttpUrl | None = None
    upstream_model: UpstreamModel | None = None
    usd_per_mtok_in: float | None = Field(None, ge=0, allow_inf_nan=False)
    usd_per_mtok_out: float | None = Field(None, ge=0, allow_inf_nan=False)
    usd_per_call: float | None = Field(None, ge=0, allow_inf_nan=False)
    default_tokens_out: int | None = Field(None, gt=0, le=1_000_000)
    timeout_s: float | None = Field(None, gt=0, le=3600, allow_inf_nan=False)
    api_key: Secret | None = None


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
    created_at: UtcTime
    updated_at: UtcTime


# --- routers ---------------------------------------------------------------------------------------------


def _check_range(value: list[float] | None) -> list[float] | None:
    if value is None:
        return value
    if len(value) != 2 or not all(math.isfinite(v) for v in value) or not value[0] < value[1]:
        raise ValueError("reward_range must be [lo, hi] with finite lo < hi")
    return value


class EmbedTextConfig(Strict):
    """What of each prompt the router's embedder reads (embeddings/prompt_text.py, docs/guide.md "Router settings")."""

    strategy: Text = Field(DEFAULT_STRATEGY, description=f"one of {', '.join(STRATEGIES)}")
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


REPLACED_JUDGE_FIELDS = ("judge_url", "judge_threshold")


def refuse_replaced_judge_fields(data: Any) -> Any:
    """A body naming the replaced ``judge_url`` / ``judge_threshold`` is a 422 that says what to send."""
    if isinstance(data, dict) and any(name in data for name in REPLACED_JUDGE_FIELDS):
        raise ValueError(
            'judge_url and judge_threshold were replaced by judge: send {"judge": {"url": <judge_url>, '
            '"threshold": <judge_threshold>}} ({} removes it; docs/guide.md, "Judges")'
        )
    return data


class JudgeConfig(Strict):
    """A router's judge (docs/guide.md, "Judges"): ``{"url", "threshold"}``, an HTTP endpoint of the
    tenant's (app/routing/judge.py); or ``{"backend", "rubric", "threshold"[, "template"]}``, one of the
    catalog's chat backends that the gateway asks to grade each answer (app/judge_prompt.py). ``{}`` is
    no judge."""

    url: HttpUrl | None = Field(None, description="an HTTP judge the tenant hosts")
    backend: BackendName | None = Field(None, description="a chat backend that grades answers")
    rubric: Text | None = Field(
        None, min_length=1, max_length=MAX_RUBRIC_CHARS, description="what a good answer is (backend judges)"
    )
    template: Text | None = Field(
        None,
        max_length=MAX_TEMPLATE_CHARS,
        description="the grading prompt, with {prompt}, {answer} and {rubric}; null = the shipped one",
    )
    threshold: float = Field(
        0.5,
        allow_inf_nan=False,
        description="a score at or above passes: in [0, 1] for a backend judge, in the router's "
        "reward_range for a url judge",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> JudgeConfig:
        if self.url is not None and self.backend is not None:
            raise ValueError("a judge is either a url or a backend, not both")
        if self.backend is None and (self.rubric is not None or self.template is not None):
            raise ValueError("rubric and template belong to a backend judge; name its backend")
        if self.backend is not None and self.rubric is None:
            raise ValueError("a backend judge needs a rubric")
        if self.template is not None and (problem := template_problem(self.template)) is not None:
            raise ValueError(problem)
        return self

    @property
    def empty(self) -> bool:
        return self.url is None and self.backend is None

    def stored(self) -> dict[str, Any] | None:
        """The routers.judge column's value (None: no judge)."""
        return None if self.empty else self.model_dump(exclude_none=True)


MAX_JUDGE_LABELS = 500


class JudgeLabel(Strict):
    prompt: Text = Field(min_length=1, description="the request, as the judge reads it")
    answer: Text = Field(description="an answer to grade")
    reward: float = Field(allow_inf_nan=False, description="its true reward, in the router's reward_range")


class JudgeLabels(Strict):
    """A labelled set to measure a router's judge on (docs/guide.md, "Judges")."""

    labels: list[JudgeLabel] = Field(min_length=1, max_length=MAX_JUDGE_LABELS)
    apply: bool = Field(
        False,
        description="also set the router's judge_tpr / judge_tnr hyperparameters to the measured rates "
        "(policies that correct for the judge: promptwise); the policy relearns from the log",
    )


class JudgeMeasured(BaseModel):
    """A router's judge measured on a labelled set: a label is a success when its true reward reaches the
    judge's threshold (in reward units), a verdict a pass when the judge's score does."""

    judge: dict[str, Any] = Field(description="the judge measured (its configuration then)")
    labels: int
    failed: int = Field(description="labels the judge gave no score (left out of the rates)")
    successes: int = Field(description="scored labels whose true reward reaches the threshold")
    failures: int = Field(description="scored labels whose true reward is below it")
    tpr: float | None = Field(
        description="P(pass | success): set PromptWise's judge_tpr to it; null: no success"
    )
    tnr: float | None = Field(description="P(fail | failure): PromptWise's judge_tnr; null: no failure")
    pearson: float | None = Field(
        description="correlation of the judge's reward with the true reward; null under 2 scores or no spread"
    )
    cost: float = Field(description="USD of the judge's calls")
    measured_at: UtcTime


class RouterCreate(Strict):
    name: RouterName
    policy: PolicyName | None = Field(
        None,
        description="registered policy name; omitted or 'default' = the default policy (docs/policies/default.md), "
        "stored as the concrete policy and hyperparameters it resolves to",
    )
    hyperparameters: HyperparameterValues = Field(default_factory=dict)
    arms: list[BackendName] = Field(min_length=1, max_length=256, description="backend names")
    reward_range: list[float] = Field(default_factory=lambda: [0.0, 1.0])
    seed: DbInt = 0
    is_default: bool = False
    judge: JudgeConfig | None = Field(
        None, description="the judge of gateway-driven cascades (chat routers); null or {} = none"
    )
    embed_text: EmbedTextConfig | None = Field(
        None, description="what of each prompt is embedded; null = default"
    )

    _range = field_validator("reward_range")(_check_range)
    _replaced = model_validator(mode="before")(refuse_replaced_judge_fields)


class RouterUpdate(Strict):
    policy: PolicyName | None = None
    hyperparameters: HyperparameterValues | None = None
    arms: list[BackendName] | None = Field(None, min_length=1, max_length=256)
    reward_range: list[float] | None = None
    seed: DbInt | None = None
    is_default: bool | None = None
    judge: JudgeConfig | None = Field(None, description="replaces the judge; {} removes it")
    embed_text: EmbedTextConfig | None = Field(None, description="{} restores the default")

    _range = field_validator("reward_range")(_check_range)
    _replaced = model_validator(mode="before")(refuse_replaced_judge_fields)


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
    judge: JudgeConfig | None = None
    embed_text: EmbedTextConfig = Field(default_factory=EmbedTextConfig)
    created_at: UtcTime
    updated_at: UtcTime


class RouterStateOut(BaseModel):
    router: str
    policy: str
    version: int
    watermark: int = Field(description="events with id <= watermark are in the starting snapshot")
    events_folded: int = Field(description="events this process has folded into the policy")
    last_event_id: int
    state: dict[str, Any] = Field(description="the policy's state_dict, arrays base64-encoded")


class Prior(Strict):
    """A declared prior quality of one model: ``weight`` pseudo-observations of reward ``mean``."""

    model_config = ConfigDict(extra="forbid", strict=True)
    mean: float = Field(
        allow_inf_nan=False, description="prior mean reward, inside the router's reward_range"
    )
    weight: float = Field(gt=0, allow_inf_nan=False, description="as many observations as this (> 0)")


class RouterPriors(Strict):
    priors: dict[BackendName, Prior] = Field(
        max_length=256,
        description="{model: {mean, weight}} for arms of the router; replaces the priors set before ({}: none)",
    )


class RouterStateImport(Strict):
    """What ``GET .../state`` exports, posted back as it is: only ``state`` is read; the export's other
    fields are accepted and ignored (the router imported into keeps its own name and counts)."""

    state: StateUpload = Field(description="an export's state (limit: BANDITGATE_STATE_IMPORT_MAX_BYTES)")
    router: RouterName | None = Field(None, description="ignored: the exported router's name")
    policy: PolicyName | None = Field(None, description="ignored: the state's own policy is imported")
    version: DbInt | None = Field(None, description="ignored")
    watermark: DbInt | None = Field(None, description="ignored")
    events_folded: DbInt | None = Field(None, description="ignored")
    last_event_id: DbInt | None = Field(None, description="ignored")


# --- routing and feedback -----------------------------------------------------------------------------


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Role
    content: str | list[dict[str, Any]] | None = None

    _content = field_validator("content")(check_forwarded)

    @model_validator(mode="after")
    def _extras(self) -> ChatMessage:
        check_forwarded(self.model_extra or {})
        return self


class RouteRequest(Strict):
    router: RouterName | None = Field(None, description="router name; omitted = the tenant's default router")
    prompt: Text | None = Field(None, description="the prompt text (or give messages)")
    messages: list[ChatMessage] | None = Field(None, min_length=1, description="OpenAI-style chat messages")
    candidates: list[ModelName] | None = Field(
        None, min_length=1, description="restrict the choice to these models"
    )
    metadata: JsonObject = Field(
        default_factory=dict, description="stored with the decision (limit: BANDITGATE_METADATA_MAX_BYTES)"
    )
    seed: DbInt | None = Field(
        None,
        description="the decision's randomness comes from (router seed, this seed) instead of the decision "
        "id: the same requests in the same order to a router in the same state get the same decisions "
        "(OpenAI's 'seed'; /v1 endpoints take it from the body)",
    )
    forward: bool = Field(False, description="call the chosen backend and return its answer too")
    request: ForwardBody | None = Field(
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
# without reward), kept apart from the client's ``bandit`` reward for the same model. ``shadow``: the
# grade of a shadow call's answer (listed by GET /feedback/pending), evidence never served.
FeedbackKind = Literal["bandit", "query", "cascade-step", "cost", "shadow"]


class FeedbackRequest(Strict):
    decision_id: DecisionId
    model: ModelName | None = Field(None, description="defaults to the decision's first model")
    kind: FeedbackKind = "bandit"
    reward: float | None = Field(None, allow_inf_nan=False, description="within the router's reward range")
    cost: float | None = Field(None, ge=0, allow_inf_nan=False, description="USD spent on this call")
    output_embedding: list[float] | None = Field(
        None, max_length=8192, description="the answer's embedding (mixture policies)"
    )
    output_text: Text | None = Field(
        None, min_length=1, description="the answer's text; the gateway embeds it into output_embedding"
    )
    metadata: JsonObject = Field(
        default_factory=dict, description="stored with the event (limit: BANDITGATE_METADATA_MAX_BYTES)"
    )

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


class OfflineRow(Strict):
    """One logged outcome uploaded as a warm start (``POST /admin/tenants/{t}/routers/{r}/observations``)."""

    id: Text = Field(
        min_length=1,
        max_length=ROW_ID_CHARS,
        description="the row's id, unique per router: a row id already uploaded is a duplicate",
    )
    prompt: Text | None = Field(
        None, min_length=1, description="embedded on upload by the router's embed-text rule"
    )
    embedding: list[float] | None = Field(
        None,
        min_length=1,
        max_length=8192,
        description="the prompt's embedding (the gateway's embedder's dimension)",
    )
    model: ModelName = Field(description="an arm of the router")
    reward: float = Field(allow_inf_nan=False, description="within the router's reward range")
    cost: float | None = Field(None, ge=0, allow_inf_nan=False, description="USD the logged call cost")

    @model_validator(mode="after")
    def _one_context(self) -> OfflineRow:
        if (self.prompt is None) == (self.embedding is None):
            raise ValueError("a row needs exactly one of 'prompt' or 'embedding'")
        if self.embedding is not None and not all(math.isfinite(v) for v in self.embedding):
            raise ValueError("embedding must contain finite numbers")
        return self


class ObservationsAccepted(BaseModel):
    rows: int = Field(description="rows in the upload")
    new: int = Field(description="rows written as new offline events (every replica folds them)")
    duplicates: int = Field(description="rows whose id this router already holds: not learned again")
    last_event_id: int | None = Field(description="the newest event id written by this upload (null: none)")


class DirectCallsImported(BaseModel):
    scanned: int = Field(description="direct-call feedback events read after `after`")
    new: int = Field(description="rows written as new offline events")
    duplicates: int = Field(description="rows this router already holds (imported before)")
    skipped: int = Field(
        description="events not about an arm of the router, or without a reward in its range"
    )
    next_after: int | None = Field(description="pass as `after` for the next page; null: none left")


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
        description="the judge's score (a url judge's pass = the router's highest reward, fail = its lowest; "
        "a backend judge's in [0, 1]); null if the judge failed"
    )
    passed: bool
    cost: float = Field(description="USD of the step: the call's and its judge's")
    judge_cost: float = Field(
        0.0, description="USD of the judge's call (a backend judge's; 0 for a url judge)"
    )


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
    model: ModelName | None = Field(
        None, description="the step that failed; defaults to the last model offered"
    )
    reward: float | None = Field(None, allow_inf_nan=False, description="the failed step's reward")
    cost: float | None = Field(None, ge=0, allow_inf_nan=False, description="USD the failed step cost")
    metadata: JsonObject = Field(
        default_factory=dict, description="stored with the step (limit: BANDITGATE_METADATA_MAX_BYTES)"
    )


class CascadeNextResponse(BaseModel):
    decision_id: str
    model: str | None = Field(description="the next model to call; null = stop")
    stop: bool = Field(description="true when no model is left (or the policy declines to go on)")
    tried: list[str] = Field(description="models already called for this decision, in order")
    scores: dict[str, dict[str, float | None]] = Field(default_factory=dict)


class PendingProbe(BaseModel):
    """An answer the gateway got off the client's path, waiting for an evaluator's reward of its
    ``kind``. The prompt is not stored: match it by ``prompt_hash`` (the decision's hash of the prompt
    text)."""

    probe_id: int
    decision_id: str
    model: str
    kind: Literal["query", "shadow"] = Field(
        description="query: an active-learning probe (grade with kind 'query'); shadow: a shadow call "
        "(grade with kind 'shadow')"
    )
    prompt_hash: str
    answer: str | None
    cost: float | None
    created_at: UtcTime


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
