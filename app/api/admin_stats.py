"""Admin: what a router learned and what it cost, per time bucket (the dashboard's charts)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query

from app.admin_views import ModelBucket, RouterStats, StatsBucket
from app.api.deps import AdminOnly, Ctx, Session
from app.catalog_admin import get_router, get_tenant
from app.input_types import Text
from app.schemas import JudgeMeasured
from app.shadow_stats import shadow_stats
from app.store.models import Router
from app.store.stats import BucketStats, ModelStats, history_before, router_buckets
from app.timewindow import bucket_starts, parse_bucket, parse_window
from app.trusted_stats import trusted_stats
from app.warm_start_stats import warm_start_stats
from routers.base import PolicyConfigError
from routers.registry import build_policy

router = APIRouter(prefix="/admin/tenants/{tenant}/routers", tags=["admin: stats"], dependencies=[AdminOnly])


@dataclass(frozen=True)
class QueryBudget:
    """An active-learning policy's query budget, as its configuration states it."""

    total: int | None = None  # query rounds allowed in all
    ratio: float | None = None  # fraction of decisions that may be query rounds
    source: str | None = None  # the hyperparameters it comes from


def query_budget(row: Router) -> QueryBudget:
    """Read from the policy's configuration with defaults filled in (the registry builds it). A policy
    has a query budget when its configuration has ``max_queries`` (the active-learning family: the
    total is ``max_queries``, else ``floor(budget * horizon)``, and ``budget`` is the ratio) or
    ``query_budget`` (a total). A ``budget`` alone is not one: C2MAB-V's is a cost budget per round."""
    try:
        config = dict(
            getattr(build_policy(row.policy, row.arms, row.seed, row.hyperparameters), "config", {})
        )
    except PolicyConfigError:
        config = dict(row.hyperparameters)
    if isinstance(config.get("query_budget"), int | float):
        return QueryBudget(total=int(config["query_budget"]), source="query_budget")
    if "max_queries" not in config:
        return QueryBudget()
    ratio = config.get("budget")
    ratio = float(ratio) if isinstance(ratio, int | float) else None
    if isinstance(config["max_queries"], int):
        return QueryBudget(int(config["max_queries"]), ratio, "max_queries")
    horizon = config.get("horizon")
    if ratio is not None and isinstance(horizon, int):
        return QueryBudget(math.floor(ratio * horizon), ratio, "budget * horizon")
    return QueryBudget(None, ratio, "budget" if ratio is not None else None)


def mean(total: float, count: int) -> float | None:
    return total / count if count else None


def model_bucket(stats: ModelStats, decisions: int) -> ModelBucket:
    return ModelBucket(
        decisions=stats.decisions,
        share=mean(stats.decisions, decisions),
        feedback=stats.feedback,
        reward_mean=mean(stats.reward_sum, stats.rewarded),
    )


@router.get("/{name}/stats", response_model=RouterStats)
async def router_stats(
    tenant: Text,
    name: Text,
    ctx: Ctx,
    session: Session,
    since: Text | None = Query(None, description="ISO 8601 start (inclusive); default until - 24 h"),
    until: Text | None = Query(None, description="ISO 8601 end (exclusive); default now"),
    bucket: Annotated[Text, Query(description="bucket width: seconds, or 30s, 5m, 1h, 1d")] = "1h",
) -> RouterStats:
    """Per time bucket: decisions, feedback, mean reward, cost, each model's share of traffic and mean
    reward, query rounds against the query budget, and regret estimated on query rounds. ``trusted``:
    lambda_t and the spend against the cost target, the incumbent check's margin, the shares of
    decisions forced onto, chosen on and off the incumbent, the cost saved against it, and ``conflict``:
    whether a cost target cannot be met under the floor, with the spend the floor holds (the floor wins
    over the cost target: the incumbent check guards the cost-aware choice). ``warm_start``:
    per model, the offline (logged) observations stored, folded into the served state, and their mean
    reward. ``shadow``: shadow calls, their spend, refusals per reason and share of served decisions,
    with each model's evidence (n, mean, LCB) in the folded state."""
    owner = await get_tenant(session, tenant)
    row = await get_router(session, owner, name)
    window = parse_window(since, until)
    bucket_s = parse_bucket(bucket, ctx.settings.stats_max_bucket_s)
    starts = bucket_starts(window, bucket_s, ctx.settings.stats_max_buckets)
    found = await router_buckets(session, row.id, window, bucket_s)
    decisions_before, before = await history_before(session, row.id, window.since)
    budget = query_budget(row)

    buckets: list[StatsBucket] = []
    decisions, queries, regret_rounds, regret_sum = decisions_before, before, 0, 0.0
    for start in starts:
        b = found.get(start, BucketStats(start))
        decisions += b.decisions
        queries += b.queries
        regret_rounds += b.regret_rounds
        regret_sum += b.regret_sum
        names = list(dict.fromkeys([*row.arms, *sorted(b.models)]))
        buckets.append(
            StatsBucket(
                start=datetime.fromtimestamp(start, UTC),
                decisions=b.decisions,
                decisions_cumulative=decisions,
                declined=b.declined,
                queries=b.queries,
                queries_cumulative=queries,
                feedback=b.feedback,
                reward_mean=mean(b.reward_sum, b.rewarded),
                cost_total=b.cost_total,
                cost_mean=mean(b.cost_total, b.costed),
                regret_rounds=b.regret_rounds,
                regret_mean=mean(b.regret_sum, b.regret_rounds),
                regret_running=mean(regret_sum, regret_rounds),
                models={m: model_bucket(b.model(m), b.decisions) for m in names},
            )
        )
    every = list(found.values())
    return RouterStats(
        tenant=owner.name,
        router=row.name,
        policy=row.policy,
        arms=list(row.arms),
        since=window.since,
        until=window.until,
        bucket_s=bucket_s,
        query_budget=budget.total,
        query_budget_ratio=budget.ratio,
        query_budget_key=budget.source,
        decisions_before=decisions_before,
        queries_before=before,
        queries_total=queries,
        decisions=sum(b.decisions for b in every),
        feedback=sum(b.feedback for b in every),
        feedback_by_kind=dict(sorted(sum((Counter(b.kinds) for b in every), Counter()).items())),
        reward_mean=mean(sum(b.reward_sum for b in every), sum(b.rewarded for b in every)),
        cost_total=sum(b.cost_total for b in every),
        regret_mean=mean(regret_sum, regret_rounds),
        trusted=await trusted_stats(ctx, session, row, window),
        warm_start=await warm_start_stats(ctx, session, row),
        shadow=await shadow_stats(ctx, session, row, window),
        judge=None if row.judge_measured is None else JudgeMeasured.model_validate(row.judge_measured),
        buckets=buckets,
    )
