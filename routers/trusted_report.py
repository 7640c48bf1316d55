"""What the stats API reports about a router's trusted-routing wrappers, read from its folded state.

Every figure here is a function of the observations the policy folded (``select`` changes none of
them), so two replicas at the same event watermark report the same numbers:

- pacing (``CostAware`` with ``cost_weight`` / ``cost_target``, ``PacedCascade``): lambda_t, its floor
  ``cost_weight``, the target, and the requests and spend the pacer counted (one request per decision);
- safety (``Conservative``): for incumbent a_0, ``margin`` = margin(a) for any a != a_0 (>= 0 iff the next
  decision may leave the incumbent; -inf, reported as None, while a_0 has no reward folded) and
  ``floor_margin`` = margin(a_0), the slack of the floor over the rounds so far (routers/conservative.py),
  with the folded rounds on and off a_0;
- evidence (``Conservative``, the shadow evaluation's view): per model, n = the rewards folded of any kind
  (served, query, shadow, offline), their mean, and LCB = max(r_min, mean - (r_max - r_min) *
  sqrt(log_term / (2 n))), the Hoeffding lower bound of ``routers.priors.hoeffding_bounds`` on these
  observations alone (no prior pseudo-observations).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from routers.conservative import Conservative
from routers.pacing import DualPacer
from routers.priors import hoeffding_bounds
from routers.wrapper import layers


@dataclass(frozen=True)
class PacingReport:
    cost_multiplier: float  # lambda_t
    cost_weight: float  # lambda_0 and the floor of lambda_t
    cost_target: float | None
    requests: int | None  # requests the pacer counted (None without a target)
    spent: float | None
    spend_per_request: float | None


@dataclass(frozen=True)
class SafetyReport:
    incumbent: str | None
    max_loss: float
    margin: float | None
    floor_margin: float | None
    incumbent_rounds: int | None
    other_rounds: int | None


@dataclass(frozen=True)
class EvidenceReport:
    n: int
    mean: float | None
    lcb: float | None


def finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def pacing_report(policy: Any) -> PacingReport | None:
    """The first layer that plays a cost multiplier (``CostAware``, ``PacedCascade``), else None."""
    for layer in layers(policy):
        if hasattr(layer, "multiplier") and hasattr(layer, "pacer"):
            pacer: DualPacer | None = layer.pacer
            if pacer is None:
                return PacingReport(float(layer.multiplier), float(layer.cost_weight), None, None, None, None)
            return PacingReport(
                float(layer.multiplier),
                float(layer.cost_weight),
                pacer.target,
                pacer.requests,
                pacer.spent,
                pacer.spend_per_request,
            )
    return None


def safety_report(policy: Any, incumbent: str | None) -> SafetyReport | None:
    """The ``Conservative`` layer's figures for its configured incumbent, else for ``incumbent`` (the
    default incumbent is chosen per decision; the caller names the one to report); None without that
    layer."""
    for layer in layers(policy):
        if isinstance(layer, Conservative):
            name = layer.incumbent or incumbent
            if name is None:
                return SafetyReport(None, layer.alpha, None, None, None, None)
            on, off = layer.rounds(name)
            explore, floor = finite(layer.explore_margin(name)), finite(layer.floor_margin(name))
            return SafetyReport(name, layer.alpha, explore, floor, on, off)
    return None


def evidence_report(policy: Any) -> dict[str, EvidenceReport] | None:
    """Per model of the ``Conservative`` layer's arms and observed models: the evidence of the module
    docstring (n = 0: mean and LCB None); None without that layer."""
    for layer in layers(policy):
        if isinstance(layer, Conservative):
            out: dict[str, EvidenceReport] = {}
            for arm in dict.fromkeys([*layer.arms, *sorted(layer.seen)]):
                count, total = layer.seen.get(arm, (0.0, 0.0))
                if count <= 0:
                    out[arm] = EvidenceReport(0, None, None)
                    continue
                lcb, _ = hoeffding_bounds(count, total, layer.log_term, layer.reward_min, layer.reward_max)
                out[arm] = EvidenceReport(int(count), total / count, lcb)
            return out
    return None
