"""Response models of the admin views: router statistics, the decision and feedback logs."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from app.schemas import JudgeMeasured
from app.timewindow import UtcTime


class ModelBucket(BaseModel):
    decisions: int = Field(description="decisions whose first model is this one")
    share: float | None = Field(description="decisions / all decisions of the bucket; null when none")
    feedback: int = Field(
        description="feedback events about this model (bandit, query, cascade-step; not the cost records)"
    )
    reward_mean: float | None = Field(description="mean bandit/cascade-step reward; null when none")


class StatsBucket(BaseModel):
    start: UtcTime
    decisions: int
    decisions_cumulative: int = Field(description="decisions of this router up to the end of this bucket")
    declined: int = Field(description="decisions that called no model")
    queries: int = Field(description="decisions that asked for other models' rewards (query non-empty)")
    queries_cumulative: int = Field(description="query rounds of this router up to the end of this bucket")
    feedback: int = Field(
        description="feedback events (bandit, query, cascade-step, shadow; not the cost records)"
    )
    reward_mean: float | None = Field(description="mean bandit/cascade-step reward")
    cost_total: float
    cost_mean: float | None = Field(description="mean cost of the feedback events that reported one")
    regret_rounds: int = Field(description="query rounds where the first model's reward is known")
    regret_mean: float | None = Field(description="mean (best observed - first model's reward) on them")
    regret_running: float | None = Field(description="the same mean over every bucket up to this one")
    models: dict[str, ModelBucket]


class PacingStats(BaseModel):
    cost_multiplier: float = Field(description="lambda_t: the reward units per USD the router plays now")
    cost_weight: float = Field(description="lambda_0, also the floor of lambda_t")
    cost_target: float | None = Field(description="USD per request the pacer steers to; null: fixed lambda")
    requests: int | None = Field(description="requests (decisions with a cost) the pacer has counted")
    spent: float | None = Field(description="USD those requests cost")
    spend_per_request: float | None = Field(description="spent / requests, the running spend per request")
    spend_vs_target: float | None = Field(description="spend_per_request / cost_target")


class SafetyStats(BaseModel):
    incumbent: str | None = Field(description="the incumbent reported (configured, else the last decision's)")
    max_loss: float = Field(description="alpha: the router keeps >= (1 - alpha) x the incumbent's reward")
    margin: float | None = Field(
        description="largest margin of leaving the incumbent now, per-model bounds (>= 0: allowed); null without another arm"
    )
    floor_margin: float | None = Field(description="slack of the floor over the folded rounds so far")
    incumbent_rounds: int | None = Field(description="folded rounds that played the incumbent")
    other_rounds: int | None = Field(description="folded rounds that played another model")
    checked: int = Field(description="decisions in the window checked against an incumbent")
    forced: int = Field(description="of them, played on the incumbent because the check forced it")
    chosen: int = Field(description="of them, played on the incumbent by the policy's own choice")
    off_incumbent: int = Field(description="of them, played on another model")
    forced_share: float | None
    chosen_share: float | None
    off_share: float | None
    cost: float | None = Field(description="USD of the checked decisions that reported a cost")
    incumbent_cost: float | None = Field(
        description="estimated USD of calling only the incumbent on them: its own cost where it was called, "
        "else its prices at the prompt's characters / 4 tokens and its default_tokens_out"
    )
    cost_saved: float | None = Field(description="incumbent_cost - cost")
    cost_saved_share: float | None = Field(description="cost_saved / incumbent_cost")


class CostConflict(BaseModel):
    """A cost target under an incumbent check: the floor wins, and this says when it costs the target."""

    floor_over_target: bool = Field(
        description="true: the cost target cannot be met under the floor, which holds the spend above it "
        "(the pacer's spend per request is over the target and the check held decisions on the incumbent)"
    )
    cost_target: float = Field(description="USD per request the pacer steers to")
    spend_per_request: float | None = Field(description="the spend the router runs at, which the floor holds")
    spend_vs_target: float | None = Field(description="spend_per_request / cost_target")
    held: int = Field(description="decisions in the window the check held on the incumbent above the target")
    held_share: float | None = Field(description="held / decisions checked against an incumbent")
    held_cost: float | None = Field(description="USD of the held decisions' cost events")
    evidence: str = Field(
        description="what counts a held decision: floor_over_target (the decision's own record) or, where "
        "decisions do not record it, incumbent_forced"
    )
    message: str | None = Field(description="the conflict in one sentence; null when there is none")


class TrustedStats(BaseModel):
    last_event_id: int = Field(description="the newest event folded into the state these figures read")
    events_folded: int = Field(description="events folded into that state")
    pacing: PacingStats | None = Field(description="null: the router plays no cost multiplier")
    safety: SafetyStats | None = Field(description="null: the router has no incumbent check")
    conflict: CostConflict | None = Field(
        description="null unless the router has both a cost target and an incumbent check"
    )


class WarmStartModel(BaseModel):
    stored: int = Field(description="offline events of this model in the router's event log")
    folded: int = Field(description="of them, learned by the state that serves the router")
    pending: int = Field(description="of them, newer than the newest event that state folded")
    reward_mean: float | None = Field(description="mean reward of the stored events; null when none has one")


class WarmStartStats(BaseModel):
    last_event_id: int = Field(description="the newest event folded into the state these figures read")
    learned_after: int = Field(
        description="watermark of the newest reset or import: offline events at or below it are stored, "
        "not learned (0: none)"
    )
    stored: int = Field(description="offline (warm-start) events of the router, all time")
    folded: int = Field(description="of them, learned by the served state")
    pending: int = Field(description="of them, not folded yet by this process")
    models: dict[str, WarmStartModel]


class ShadowModel(BaseModel):
    calls: int = Field(0, description="shadow calls of this model in the window (refused ones not counted)")
    spend: float = Field(0.0, description="USD those calls cost")
    graded: int = Field(0, description="of them, graded by kind: shadow feedback")
    evidence_n: int | None = Field(
        None,
        description="rewards of this model folded into the served state, of any kind (served, query, "
        "shadow, offline); null: the policy keeps no per-model evidence (no incumbent check)",
    )
    evidence_mean: float | None = Field(None, description="their mean; null when none")
    evidence_lcb: float | None = Field(None, description="their Hoeffding lower bound; null when none")


class ShadowStats(BaseModel):
    shadow: float | None = Field(
        description="the router's `shadow` hyperparameter (share of decisions sampled)"
    )
    budget_usd_per_day: float | None = Field(description="`shadow_usd_per_day`; null: unbounded")
    spent_last_day: float = Field(
        description="USD of the router's shadow calls over the last 24 h (what the budget counts)"
    )
    calls: int = Field(description="shadow calls made in the window (pending, answered or failed)")
    pending: int
    answered: int
    failed: int
    spend: float = Field(description="USD of the window's shadow calls (also in `cost_total`)")
    refused: dict[str, int] = Field(
        description="shadow calls refused in the window, per reason (concurrency, budget)"
    )
    served: int = Field(description="decisions in the window that called a model")
    share: float | None = Field(description="calls / served; null without served decisions")
    last_event_id: int = Field(description="the newest event folded into the state the evidence reads")
    models: dict[str, ShadowModel]


class RouterStats(BaseModel):
    tenant: str
    router: str
    policy: str
    arms: list[str]
    since: UtcTime
    until: UtcTime
    bucket_s: int
    query_budget: int | None = Field(
        description="query rounds the policy may use in all; null if unbounded or none"
    )
    query_budget_ratio: float | None = Field(description="fraction of decisions that may be query rounds")
    query_budget_key: str | None = Field(description="the hyperparameters the budget comes from")
    decisions_before: int = Field(description="decisions before `since`")
    queries_before: int = Field(description="query rounds before `since`")
    queries_total: int = Field(description="query rounds up to `until`")
    decisions: int
    feedback: int = Field(
        description="feedback events (bandit, query, cascade-step, shadow; not the cost records)"
    )
    feedback_by_kind: dict[str, int] = Field(
        description="events per kind: the feedback's, and `cost`, the gateway's records of what each call "
        "it forwarded or probed cost"
    )
    reward_mean: float | None
    cost_total: float
    regret_mean: float | None
    trusted: TrustedStats | None = Field(
        description="cost pacing and the incumbent check (docs/policies/trusted-routing.md); null when "
        "the router's hyperparameters set neither"
    )
    warm_start: WarmStartStats | None = Field(
        None,
        description="offline (warm-start) observations per model (docs/policies/trusted-routing.md); null "
        "when the router has none",
    )
    shadow: ShadowStats | None = Field(
        None,
        description="shadow evaluation (docs/guide.md): calls, spend and refusals in the window, and the "
        "evidence per model; null when the router sets no shadow hyperparameter and made no shadow call",
    )
    judge: JudgeMeasured | None = Field(
        None,
        description="the router's judge as last measured on a labelled set (POST .../judge/labels); null "
        "if never",
    )
    buckets: list[StatsBucket]


class FeedbackItem(BaseModel):
    id: int
    decision_id: str | None = Field(
        description="null: an offline event (a warm-start log row), of no decision"
    )
    row_id: str | None = Field(None, description="an offline event's row id (unique per router)")
    tenant: str
    router: str | None = Field(description="null: feedback about a direct call, folded by no router")
    model: str
    kind: str
    reward: float | None
    cost: float | None
    payload: dict[str, Any]
    created_at: UtcTime


class DecisionItem(BaseModel):
    id: str
    tenant: str
    router: str | None = Field(description="null: a direct call (model: '<backend>' on /v1), of no router")
    router_version: int
    policy: str
    model: str | None = Field(description="the first model called; null when the policy declined")
    models: list[str]
    query: list[str]
    scores: dict[str, Any] = Field(description="the per-model scores that explain the choice")
    info: dict[str, Any]
    reward: float | None = Field(
        description="mean bandit/cascade-step reward reported about the first model; null: none yet"
    )
    cost: float | None = Field(description="USD of every cost reported about the decision; null: none yet")
    prompt_chars: int
    metadata: dict[str, Any]
    created_at: UtcTime


class DecisionDetail(DecisionItem):
    feedback: list[FeedbackItem]


class DecisionPage(BaseModel):
    items: list[DecisionItem]
    next_cursor: str | None = Field(description="pass as `cursor` for the next (older) page; null at the end")


class FeedbackPage(BaseModel):
    items: list[FeedbackItem]
    next_cursor: str | None = Field(description="pass as `cursor` for the next (older) page; null at the end")
