"""What a router did over time, aggregated in SQL (Postgres and SQLite alike).

Every number is attributed to the time bucket of its *decision* (the feedback about a decision counts
in the bucket where the decision was made), so traffic, rewards, costs and regret of a bucket describe
the same requests. Buckets are aligned to the Unix epoch: bucket = floor(epoch seconds / width) * width.

- traffic share of a model: decisions whose first model (``models[0]``, the one called first) is that
  model / decisions in the bucket; a decision that called no model counts as ``declined``.
- reward: mean of the rewards reported with kind ``bandit`` or ``cascade-step`` (answers the caller
  got); ``query`` and ``shadow`` feedback (rewards of models not served) are left out of it.
- cost: sum and mean of the costs of every feedback event, query and shadow calls included (they were
  paid for).
- feedback: the events that report how an answer went (``bandit``, ``query``, ``cascade-step``,
  ``shadow``); the gateway's own ``cost`` records of the calls it forwarded or probed are not feedback,
  and are counted apart in ``kinds`` with the others.
- queries: decisions whose ``query`` list is non-empty.
- regret on query rounds: when a decision asked for the other models' rewards, regret = the best reward
  observed for that decision (any kind) - the reward of its first model; averaged over the query rounds
  that reported the first model's reward. Outside query rounds the other rewards are unknown.
- incumbent (conservative routers, ``incumbent_stats``): the decisions whose ``info`` names the
  ``incumbent`` they were checked against; ``info.incumbent_forced`` marks the ones the check moved onto
  it, and ``models[0]`` tells on from off. Costs: per incumbent, the cost events of the decisions that
  reported a cost, and the incumbent's own cost events on them (played or probed).
- floor over a cost target (``floor_hold``): the decisions on which the incumbent check held the spend
  up while the router's pacer was above its cost target: ``info.floor_over_target`` where the decisions
  record it (true or false), else those that ``info.incumbent_forced`` moved onto the incumbent; with
  the cost events of those decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import BigInteger, ColumnElement, Integer, case, cast, func, literal_column, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.store.models import DecisionRow, FeedbackEvent
from app.timewindow import Window

SERVED_KINDS = ("bandit", "cascade-step")
COST_KIND = "cost"  # the gateway's record of a call's cost: not feedback from the caller


def epoch_seconds(column: Any, dialect: str) -> ColumnElement[int]:
    """Whole seconds since the epoch of a timestamp column (floored)."""
    if dialect == "postgresql":
        return cast(func.floor(func.extract("epoch", column)), BigInteger)
    return cast(func.strftime("%s", column), Integer)


def bucket_of(column: Any, dialect: str, bucket_s: int) -> ColumnElement[int]:
    # An inlined integer, not a bound parameter: SELECT and GROUP BY must be the same expression.
    width: ColumnElement[int] = literal_column(str(int(bucket_s)))
    return (epoch_seconds(column, dialect) // width) * width


@dataclass
class ModelStats:
    decisions: int = 0
    feedback: int = 0
    reward_sum: float = 0.0
    rewarded: int = 0


@dataclass
class BucketStats:
    start: int
    decisions: int = 0
    declined: int = 0
    queries: int = 0
    feedback: int = 0
    rewarded: int = 0
    reward_sum: float = 0.0
    cost_total: float = 0.0
    costed: int = 0
    regret_rounds: int = 0
    regret_sum: float = 0.0
    models: dict[str, ModelStats] = field(default_factory=dict)
    kinds: dict[str, int] = field(default_factory=dict)  # feedback events per kind, cost records included

    def model(self, name: str) -> ModelStats:
        return self.models.setdefault(name, ModelStats())


async def history_before(session: AsyncSession, router_id: int, moment: Any) -> tuple[int, int]:
    """Decisions and query rounds of this router before ``moment`` (for cumulative counts)."""
    found = (
        await session.execute(
            select(func.count(), func.sum(case((func.json_array_length(DecisionRow.query) > 0, 1), else_=0)))
            .select_from(DecisionRow)
            .where(DecisionRow.router_id == router_id, DecisionRow.created_at < moment)
        )
    ).one()
    return int(found[0] or 0), int(found[1] or 0)


async def router_buckets(
    session: AsyncSession, router_id: int, window: Window, bucket_s: int
) -> dict[int, BucketStats]:
    """Per-bucket aggregates of one router's decisions and their feedback inside ``window``."""
    dialect = session.bind.dialect.name if session.bind is not None else "postgresql"
    D, F = DecisionRow, FeedbackEvent
    decisions = (
        select(
            D.id.label("id"),
            bucket_of(D.created_at, dialect, bucket_s).label("bucket"),
            D.models[0].as_string().label("model"),
            case((func.json_array_length(D.query) > 0, 1), else_=0).label("queried"),
        )
        .where(D.router_id == router_id, D.created_at >= window.since, D.created_at < window.until)
        .subquery("d")
    )
    d = decisions.c
    out: dict[int, BucketStats] = {}

    def at(bucket: Any) -> BucketStats:
        start = int(bucket)
        return out.setdefault(start, BucketStats(start))

    for bucket, model, n, queried in await session.execute(
        select(d.bucket, d.model, func.count(), func.sum(d.queried)).group_by(d.bucket, d.model)
    ):
        stats = at(bucket)
        stats.decisions += int(n)
        stats.queries += int(queried or 0)
        if model is None:
            stats.declined += int(n)
        else:
            stats.model(model).decisions += int(n)

    served = F.kind.in_(SERVED_KINDS) & F.reward.is_not(None)
    served_reward = case((served, F.reward))
    for bucket, model, kind, n, rewarded, reward_sum, costed, cost_sum in await session.execute(
        select(
            d.bucket,
            F.model,
            F.kind,
            func.count(F.id),
            func.count(served_reward),
            func.sum(served_reward),
            func.count(F.cost),
            func.sum(F.cost),
        )
        .join(F, F.decision_id == d.id)
        .group_by(d.bucket, F.model, F.kind)
    ):
        stats = at(bucket)
        per_model = stats.model(model)
        stats.kinds[kind] = stats.kinds.get(kind, 0) + int(n)
        if kind != COST_KIND:
            stats.feedback += int(n)
            per_model.feedback += int(n)
        stats.rewarded += int(rewarded)
        per_model.rewarded += int(rewarded)
        stats.reward_sum += float(reward_sum or 0.0)
        per_model.reward_sum += float(reward_sum or 0.0)
        stats.costed += int(costed)
        stats.cost_total += float(cost_sum or 0.0)

    rounds = (
        select(
            d.bucket.label("bucket"),
            func.max(F.reward).label("best"),
            func.max(case((F.model == d.model, F.reward))).label("chosen"),
        )
        .join(F, F.decision_id == d.id)
        .where(d.queried == 1, F.reward.is_not(None))
        .group_by(d.id, d.bucket)
        .subquery("r")
    )
    r = rounds.c
    for bucket, n, regret_sum in await session.execute(
        select(r.bucket, func.count(), func.sum(r.best - r.chosen))
        .where(r.chosen.is_not(None))
        .group_by(r.bucket)
    ):
        stats = at(bucket)
        stats.regret_rounds += int(n)
        stats.regret_sum += float(regret_sum or 0.0)
    return out


@dataclass
class IncumbentCosts:
    """Per incumbent: the costed decisions checked against it and what they cost."""

    decisions: int = 0
    cost: float = 0.0  # every cost event of these decisions (probes and cascade steps included)
    incumbent_cost: float = 0.0  # the incumbent's own cost events on the decisions that have one
    unobserved: int = 0  # decisions without a cost event of the incumbent
    unobserved_chars: int = 0  # their prompt characters (to price the incumbent's call)


@dataclass
class IncumbentStats:
    """The checked decisions of a conservative router inside a window (``info.incumbent`` set)."""

    checked: int = 0
    forced: int = 0  # the check played the incumbent instead of the policy's choice
    on_incumbent: int = 0  # the first model called was the incumbent (forced or chosen)
    costs: dict[str, IncumbentCosts] = field(default_factory=dict)

    @property
    def chosen(self) -> int:
        return self.on_incumbent - self.forced

    @property
    def off_incumbent(self) -> int:
        return self.checked - self.on_incumbent


async def incumbent_stats(session: AsyncSession, router_id: int, window: Window) -> IncumbentStats:
    """Counts of a conservative router's checked decisions in ``window`` (forced, on and off the
    incumbent, from each decision's ``info``) and, per incumbent, the cost of the decisions that
    reported any cost with what the incumbent's calls cost where they were made."""
    D, F = DecisionRow, FeedbackEvent
    incumbent = D.info["incumbent"].as_string()
    checked = (
        select(
            D.id.label("id"),
            incumbent.label("incumbent"),
            D.models[0].as_string().label("model"),
            case((D.info["incumbent_forced"].as_boolean(), 1), else_=0).label("forced"),
            D.prompt_chars.label("chars"),
        )
        .where(
            D.router_id == router_id,
            D.created_at >= window.since,
            D.created_at < window.until,
            incumbent.is_not(None),
        )
        .subquery("c")
    )
    c = checked.c
    out = IncumbentStats()
    n, forced, on = (
        await session.execute(
            select(func.count(), func.sum(c.forced), func.sum(case((c.model == c.incumbent, 1), else_=0)))
        )
    ).one()
    out.checked, out.forced, out.on_incumbent = int(n), int(forced or 0), int(on or 0)

    own = case((F.model == c.incumbent, F.cost))
    per_decision = (
        select(
            c.incumbent.label("incumbent"),
            c.chars.label("chars"),
            func.count(F.cost).label("costed"),
            func.sum(F.cost).label("cost"),
            func.count(own).label("own_costed"),
            func.sum(own).label("own_cost"),
        )
        .join(F, F.decision_id == c.id)
        .group_by(c.id, c.incumbent, c.chars)
        .subquery("p")
    )
    p = per_decision.c
    unobserved = p.own_costed == 0
    for name, decisions, cost, own_cost, missing, chars in await session.execute(
        select(
            p.incumbent,
            func.count(),
            func.sum(p.cost),
            func.sum(p.own_cost),
            func.sum(case((unobserved, 1), else_=0)),
            func.sum(case((unobserved, p.chars), else_=0)),
        )
        .where(p.costed > 0)
        .group_by(p.incumbent)
    ):
        out.costs[str(name)] = IncumbentCosts(
            int(decisions), float(cost or 0.0), float(own_cost or 0.0), int(missing or 0), int(chars or 0)
        )
    return out


@dataclass
class FloorHold:
    """The decisions in a window on which the incumbent check held the spend up (``floor_hold``)."""

    recorded: int = 0  # decisions that record info.floor_over_target (true or false)
    held: int = 0  # flagged true where recorded, else forced onto the incumbent
    cost: float | None = None  # their cost events, USD (None: none reported a cost)

    @property
    def evidence(self) -> str:
        """Which record ``held`` counts: ``floor_over_target`` or ``incumbent_forced``."""
        return "floor_over_target" if self.recorded else "incumbent_forced"


async def floor_hold(session: AsyncSession, router_id: int, window: Window) -> FloorHold:
    """Counts and cost of the held decisions of the module docstring, inside ``window``."""
    D, F = DecisionRow, FeedbackEvent
    flag = D.info["floor_over_target"].as_boolean()
    in_window = (D.router_id == router_id, D.created_at >= window.since, D.created_at < window.until)
    recorded = await session.scalar(select(func.count(flag)).where(*in_window))
    out = FloorHold(recorded=int(recorded or 0))
    held_rule = flag if out.recorded else D.info["incumbent_forced"].as_boolean()
    held = select(D.id).where(*in_window, held_rule).subquery("h")
    out.held = int(await session.scalar(select(func.count()).select_from(held)) or 0)
    cost = await session.scalar(select(func.sum(F.cost)).where(F.decision_id.in_(select(held.c.id))))
    out.cost = None if cost is None else float(cost)
    return out
