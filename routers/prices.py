"""Per-call costs of the arms for one prompt: the cost-aware policies' view of prices.

The expected USD cost of one call to arm a for the current prompt is ``Context.costs[a]`` when the caller
supplies it (prices x estimated tokens), else the policy's ``prices[a]`` hyperparameter (USD per call).
Prices are data: they arrive per request or as configuration, never in code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from routers.base import Context, PolicyConfigError, require


def validate_prices(prices: Mapping[str, Any] | None) -> dict[str, float]:
    """``prices`` as ``{model: usd}`` with finite, non-negative floats (``{}`` when None)."""
    if prices is None:
        return {}
    require(isinstance(prices, Mapping), f"prices must be a mapping model -> USD, got {prices!r}")
    out: dict[str, float] = {}
    for arm, value in prices.items():
        require(
            isinstance(value, int | float) and np.isfinite(value) and value >= 0,
            f"prices[{arm!r}] must be a finite number >= 0, got {value!r}",
        )
        out[str(arm)] = float(value)
    return out


def call_costs(arms: Sequence[str], context: Context, prices: Mapping[str, float]) -> np.ndarray:
    """c_a for each arm: ``context.costs[a]`` if given, else ``prices[a]``; neither is an error."""
    given = context.costs or {}
    out = np.empty(len(arms))
    for i, arm in enumerate(arms):
        if arm in given:
            out[i] = float(given[arm])
        elif arm in prices:
            out[i] = prices[arm]
        else:
            raise PolicyConfigError(
                f"no cost for arm {arm!r}: pass Context.costs or the prices hyperparameter"
            )
    return out
