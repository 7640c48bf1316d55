"""Response models of the admin views: router statistics, the decision and feedback logs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class ModelBucket(BaseModel):
    decisions: int = Field(description="decisions whose first model is this one")
    share: float | None = Field(description="decisions / all decisions of the bucket; null when none")
    feedback: int = Field(description="feedback events about this model (any kind)")
    reward_mean: float | None = Field(description="mean bandit/cascade-step reward; null when none")


class StatsBucket(BaseModel):
    start: datetime
    decisions: int
    decisions_cumulative: int = Field(description="decisions of this router up to the end of this bucket")
    declined: int = Field(description="decisions that called no model")
    queries: int = Field(description="decisions that asked for other models' rewards (query non-empty)")
    queries_cumulative: int = Field(description="query rounds of this router up to the end of this bucket")
    feedback: int
    reward_mean: float | None = Field(description="mean bandit/cascade-step reward")
    cost_total: float
    cost_mean: float | None = Field(description="mean cost of the feedback events that reported one")
    regret_rounds: int = Field(description="query rounds where the first model's reward is known")
    regret_mean: float | None = Field(description="mean (best observed - first model's reward) on them")
    regret_running: float | None = Field(description="the same mean over every bucket up to this one")
    models: dict[str, ModelBucket]


class RouterStats(BaseModel):
    tenant: str
    router: str
    policy: str
    arms: list[str]
    since: datetime
    until: datetime
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
    feedback: int
    reward_mean: float | None
    cost_total: float
    regret_mean: float | None
    buckets: list[StatsBucket]


class FeedbackItem(BaseModel):
    id: int
    decision_id: str
    tenant: str
    router: str | None = Field(description="null: feedback about a direct call, folded by no router")
    model: str
    kind: str
    reward: float | None
    cost: float | None
    payload: dict[str, Any]
    created_at: datetime


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
    prompt_chars: int
    metadata: dict[str, Any]
    created_at: datetime


class DecisionDetail(DecisionItem):
    feedback: list[FeedbackItem]


class DecisionPage(BaseModel):
    items: list[DecisionItem]
    next_cursor: str | None = Field(description="pass as `cursor` for the next (older) page; null at the end")


class FeedbackPage(BaseModel):
    items: list[FeedbackItem]
    next_cursor: str | None = Field(description="pass as `cursor` for the next (older) page; null at the end")
