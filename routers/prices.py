"""What one call costs: token counts x a model's prices, and the cost-aware policies' per-arm view of it.

The cost of one call (docs/datasets.md), the rule the gateway bills by and the replay benchmark charges:

    cost = tokens_in * usd_per_mtok_in / 1e6 + tokens_out * usd_per_mtok_out / 1e6 + usd_per_call

with absent token counts estimated as characters / ``CHARS_PER_TOKEN``, and a model's
``default_tokens_out`` (``DEFAULT_TOKENS_OUT`` unless set) for an answer not seen yet.

A policy sees the expected USD cost of one call to arm a for the current prompt as ``Context.costs[a]``
when the caller supplies it (prices x estimated tokens), else as the policy's ``prices[a]``
hyperparameter (USD per call). Prices are data: they arrive per request or as configuration, never in
code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from routers.base import Context, PolicyConfigError

CHARS_PER_TOKEN = 4
DEFAULT_TOKENS_OUT = 256


class CallPrices(Protocol):
    """A model's prices: USD per million input / output tokens and per call."""

    @property
    def usd_per_mtok_in(self) -> float: ...

    @property
    def usd_per_mtok_out(self) -> float: ...

    @property
    def usd_per_call(self) -> float: ...


def call_cost(prices: CallPrices, tokens_in: float, tokens_out: float) -> float:
    """USD for one call: tokens x price per million tokens, plus the per-call price."""
    return (
        tokens_in * prices.usd_per_mtok_in / 1e6
        + tokens_out * prices.usd_per_mtok_out / 1e6
        + prices.usd_per_call
    )


def estimated_tokens(chars: int) -> float:
    """An expected token count from characters (not rounded: an expectation)."""
    return chars / CHARS_PER_TOKEN


def whole_tokens(chars: int) -> int:
    """A token count from characters, rounded up, as a backend that reports no usage is billed."""
    return math.ceil(chars / CHARS_PER_TOKEN)


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
