"""A test double for the active-learning policies: LinUCB with their query-budget hyperparameters
(``budget`` ratio, ``horizon``, ``max_queries``) that asks for every other arm's reward on every
``every``-th decision until the budget is spent. Lets the stats and the dashboard be tested on query
rounds before a real active-learning policy is registered.

``create_app`` registers it as ``linucb-querying`` and builds the gateway (``uvicorn --factory
tests.querying_policy:create_app``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

from fastapi import FastAPI

from app.main import create_app as create_gateway
from routers.base import Context, Decision
from routers.hyperparameters import Count, Fraction, Hyperparameters, PositiveCount
from routers.linear import LinUCB, LinUCBHyperparameters
from routers.registry import POLICIES

NAME = "linucb-querying"


class QueryingHyperparameters(LinUCBHyperparameters):
    """LinUCB's, plus the query budget of the active-learning policies."""

    budget: Fraction = 0.2
    horizon: PositiveCount | None = None
    max_queries: Count | None = None
    every: PositiveCount = 4


class QueryingLinUCB(LinUCB):
    hyperparameters: ClassVar[type[Hyperparameters]] = QueryingHyperparameters

    def __init__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> None:
        super().__init__(arms, seed, **hyperparameters)
        p = QueryingHyperparameters.parse(hyperparameters)
        budget, horizon, max_queries = p.budget, p.horizon, p.max_queries
        self.cap = (
            max_queries
            if max_queries is not None
            else (math.floor(budget * horizon) if horizon is not None else None)
        )
        self.every, self.selections, self.queries = p.every, 0, 0

    def select(self, context: Context) -> Decision:
        decision = super().select(context)
        self.selections += 1
        if self.selections % self.every or (self.cap is not None and self.queries >= self.cap):
            return decision
        self.queries += 1
        return replace(decision, query=[a for a in self.arms if a not in decision.arms])


def create_app() -> FastAPI:
    POLICIES[NAME] = QueryingLinUCB
    return create_gateway()
