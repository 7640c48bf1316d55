"""Cost as an objective for any single-choice policy: a composition wrapper.

``CostAware(inner, cost_weight, cost_target)`` lets the inner policy score every candidate arm, then
chooses by the cost-adjusted index

    J_a(x) = I_a(x) - lambda_t c_a(x),      g_t = argmax_a J_a(x)   (ties uniformly at random, with
                                                                   the context's generator)

where I_a(x) is the inner policy's own per-arm index for this prompt (``Decision.scores[a]["index"]``:
the reward UCB of kNN-UCB / BALROG, LinUCB, PAK-UCB; the posterior draw of Thompson sampling; the mean of
greedy), c_a(x) the expected USD cost of this call (``Context.costs[a]``; for an arm without a price, the
optimistic lower confidence bound of its observed costs, ``routers.pacing.CostEstimates``) and lambda_t:

- ``cost_weight`` alone: lambda_t = cost_weight, fixed (reward units per USD: the exchange rate between
  reward and money, the "lambda" of ``bench run --lambda``).
- ``cost_target`` (USD per request, on average): lambda_t is the online Lagrange multiplier of the
  budget constraint, ``routers.pacing.DualPacer`` (projected dual gradient step on the overspend;
  Agrawal and Devanur 2016, Balseiro, Lu and Mirrokni 2023). With both, ``cost_weight`` is the initial
  value and the floor of lambda_t: the router never values money less than cost_weight, and spends less
  than the target when that is what cost_weight prefers.

An untried arm has I_a = +inf and stays first whatever its cost (UCB's optimism: it must be seen once).
Per-arm scores gain ``cost`` (c_a), ``cost_term`` (lambda_t c_a) and ``adjusted_index`` (J_a);
``Decision.info["cost_multiplier"]`` is lambda_t. A decision of the inner policy without a per-arm index
(epsilon-greedy's exploration step) is kept as it is (``info["cost_adjusted"] = False``): exploration
stays uniform. Policies that never report an index (``random``, ``always``) and cascades (``retry=true``)
are refused at construction with a ``PolicyConfigError``. BALROG's queries keep their arms, minus the one
the wrapper chose.

Everything the wrapper learns (lambda_t, the cost estimates) is folded from observations only, never
from ``select``: replicas folding the same events choose alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from routers.base import Context, Decision, Observation, Policy, PolicyConfigError, argmax_random_tie
from routers.hyperparameters import Hyperparameters, NonNegative, Positive
from routers.pacing import CostEstimates, DualPacer
from routers.wrapper import PolicyWrapper


class CostHyperparameters(Hyperparameters):
    """The cost-aware wrapper's keys (module docstring); any of them set applies the wrapper."""

    cost_weight: NonNegative | None = Field(None, description="lambda (reward per USD); null: 0")
    cost_target: Positive | None = Field(None, description="mean USD per request to pace to")
    pacing_rate: Positive = Field(0.05, description="the pacer's step, in reward units")
    cost_confidence: NonNegative = Field(2.0, description="z of an unpriced arm's cost LCB")


COST_KEYS: tuple[str, ...] = tuple(CostHyperparameters.model_fields)

UNINDEXED = ("random", "always")


class CostAware(PolicyWrapper):
    """The wrapper of the module docstring; ``name`` is the inner policy's."""

    key: ClassVar[str] = "cost"
    cost_aware: ClassVar[bool] = True

    def __init__(self, inner: Policy, **settings: Any) -> None:
        super().__init__(inner, "cost_weight / cost_target")
        if inner.name in UNINDEXED:
            raise PolicyConfigError(
                f"cost_weight / cost_target need a policy that scores every arm; {inner.name!r} reports no "
                "per-arm index"
            )
        p = CostHyperparameters.parse(settings)
        self.cost_weight = p.cost_weight or 0.0
        self.pacer = (
            None if p.cost_target is None else DualPacer(p.cost_target, p.pacing_rate, self.cost_weight)
        )
        self.estimates = CostEstimates(p.cost_confidence)
        self.settings = p.model_copy(update={"cost_weight": self.cost_weight}).config()

    @property
    def multiplier(self) -> float:
        """lambda_t: the pacer's multiplier under a cost target, else ``cost_weight``."""
        return self.cost_weight if self.pacer is None else self.pacer.multiplier

    def expected_cost(self, arm: str, context: Context) -> float:
        """c_a(x): the context's price of this call, else the learned optimistic estimate."""
        if context.costs is not None and arm in context.costs:
            return float(context.costs[arm])
        return self.estimates.lower_bound(arm)

    def select(self, context: Context) -> Decision:
        """g_t = argmax_a I_a(x) - lambda_t c_a(x) over the arms the inner policy scored."""
        decision = self.inner.select(context)
        lam = self.multiplier
        scored = [a for a, s in decision.scores.items() if "index" in s]
        if not decision.arms or not scored:
            decision.info = {**decision.info, "cost_multiplier": lam, "cost_adjusted": False}
            return decision
        scores: dict[str, dict[str, float]] = {}
        adjusted = np.empty(len(scored))
        for i, arm in enumerate(scored):
            cost = self.expected_cost(arm, context)
            term = lam * cost
            adjusted[i] = decision.scores[arm]["index"] - term
            scores[arm] = {
                **decision.scores[arm],
                "cost": cost,
                "cost_term": term,
                "adjusted_index": float(adjusted[i]),
            }
        chosen = scored[argmax_random_tie(adjusted, self._draws(context))]
        return Decision(
            arms=[chosen],
            scores=scores,
            mode=decision.mode,
            adaptive=decision.adaptive,
            query=[a for a in decision.query if a != chosen],
            info={**decision.info, "cost_multiplier": lam, "cost_adjusted": True},
        )

    def _fold(self, observation: Observation) -> None:
        """Fold the cost into lambda_t and the cost estimates."""
        if observation.arm in self.inner.arms:
            self.estimates.update(observation)
        if self.pacer is not None:
            self.pacer.update(observation)

    def _state(self) -> dict[str, Any]:
        return {
            "pacer": None if self.pacer is None else self.pacer.state(),
            "estimates": self.estimates.state(),
        }

    def _load(self, state: Mapping[str, Any]) -> None:
        if self.pacer is not None and state.get("pacer") is not None:
            self.pacer.load(state["pacer"])
        self.estimates.load(state.get("estimates", {}))
