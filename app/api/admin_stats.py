"""Admin: what a router learned and what it cost, per time bucket (the dashboard's charts)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Query

from app.admin_views import ModelBucket, RouterStats, StatsBucket
from app.api.admin_routers import get_router
from app.api.admin_tenants import get_tenant
from app.deps import AdminOnly, Ctx, Session
from app.store.stats import BucketStats, ModelStats, queries_before, router_buckets
from app.timewindow import bucket_starts, parse_bucket, parse_window

router = APIRouter(prefix="/admin/tenants/{tenant}/routers", tags=["admin: stats"], dependencies=[AdminOnly])

# Hyperparameter names under which a policy takes its active-learning query budget.
QUERY_BUDGET_KEYS = ("query_budget", "budget")


def query_budget(hyperparameters: dict[str, Any]) -> tuple[float | None, str | None]:
    for key in QUERY_BUDGET_KEYS:
        value = hyperparameters.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value), key
    return None, None


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
    tenant: str,
    name: str,
    ctx: Ctx,
    session: Session,
    since: str | None = Query(None, description="ISO 8601 start (inclusive); default until - 24 h"),
    until: str | None = Query(None, description="ISO 8601 end (exclusive); default now"),
    bucket: str = Query("1h", description="bucket width: seconds, or 30s, 5m, 1h, 1d"),
) -> RouterStats:
    """Per time bucket: decisions, feedback, mean reward, cost, each model's share of traffic and mean
    reward, query rounds against the query budget, and regret estimated on query rounds."""
    owner = await get_tenant(session, tenant)
    row = await get_router(session, owner, name)
    window = parse_window(since, until)
    bucket_s = parse_bucket(bucket)
    starts = bucket_starts(window, bucket_s, ctx.settings.stats_max_buckets)
    found = await router_buckets(session, row.id, window, bucket_s)
    before = await queries_before(session, row.id, window.since)
    budget, budget_key = query_budget(row.hyperparameters)

    buckets: list[StatsBucket] = []
    queries, regret_rounds, regret_sum = before, 0, 0.0
    for start in starts:
        b = found.get(start, BucketStats(start))
        queries += b.queries
        regret_rounds += b.regret_rounds
        regret_sum += b.regret_sum
        names = list(dict.fromkeys([*row.arms, *sorted(b.models)]))
        buckets.append(
            StatsBucket(
                start=datetime.fromtimestamp(start, UTC),
                decisions=b.decisions,
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
        query_budget=budget,
        query_budget_key=budget_key,
        queries_before=before,
        queries_total=queries,
        decisions=sum(b.decisions for b in every),
        feedback=sum(b.feedback for b in every),
        reward_mean=mean(sum(b.reward_sum for b in every), sum(b.rewarded for b in every)),
        cost_total=sum(b.cost_total for b in every),
        regret_mean=mean(regret_sum, regret_rounds),
        buckets=buckets,
    )
