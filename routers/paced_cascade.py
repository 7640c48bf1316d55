"""``cost_target`` for the cascades (PromptWise, greedy-till-succeed): their own lambda, paced.

A cascade's cost term is its cost weight lambda (``cost_weight``, reward units per USD): PromptWise
stops when max_a (q_a - lambda c_a) <= 0 (Hu et al. 2025, Eq. 2, Alg. 1) and greedy-till-succeed calls
argmax_a (rbar_a - lambda c_a). With ``cost_target`` (USD per request, on average) lambda becomes the
online Lagrange multiplier lambda_t of ``routers.pacing.DualPacer``, the same dual step as the
single-choice policies' (``routers.cost_aware``; Agrawal and Devanur 2016, Balseiro, Lu and Mirrokni
2023), so one knob means the same thing for every policy:

    lambda <- max(lambda_min, lambda + eta (c - target))   the first cost of a request (decision key)
    lambda <- max(lambda_min, lambda + eta c)              every later step's cost of that request
    eta     = pacing_rate / target^2                       lambda_min = lambda_0 = cost_weight

A request is a decision (``Observation.decision_key``): every step of one cascade carries its key (the
gateway: the decision id, every step's ``cost`` event; ``bench run``: the round, every
``cascade-step``), so the request is counted once and every step's cost is spent in it. Overspending
raises lambda: the cascade stops (or declines) earlier and prefers cheaper calls per expected success.

``PacedCascade`` sets the inner policy's ``cost_weight`` attribute to lambda_t after every folded
observation and on restore (its ``config`` keeps the configured lambda_0), so ``select`` only reads folded state and replicas at the same watermark play the same
lambda_t (reported as ``Decision.info["cost_multiplier"]``). Under a target every request is answered: a
first step that PromptWise would decline ("no arm worth its cost", q_a <= lambda_t c_a for every arm)
calls argmin_a c_a / q_a, its own Eq. 2 order, instead (``info["answered_under_target"]``). A declined
prompt leaves no cost event, so the pacer could not count it as a request of zero cost: it would
steer the spend per *answered* request to the target, and raising lambda to decline more would be its
only way below the cheapest cascade (measured on the Sudoku-like set: target $1.00, 35% of prompts
answered, $0.35 per prompt). Later steps still stop by Eq. 2 with lambda_t: the target decides how far
a cascade escalates. As with the single-choice policies, a target below the cheapest model's price
cannot be met. Cascades that ignore ``cost_weight`` (``random-till-succeed``, ``lowest-cost``,
``highest-cost``) are not registered with it: ``cost_target`` there is an unknown hyperparameter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from routers.base import Context, Decision, Observation, Policy, PolicyConfigError
from routers.hyperparameters import Hyperparameters, Positive, combine, model_of, registry_factory
from routers.logistic_ucb import DECLINED, cheapest_per_success
from routers.pacing import DualPacer
from routers.wrapper import PolicyWrapper


class PacingHyperparameters(Hyperparameters):
    """The keys ``paced`` adds to a cascade's own."""

    cost_target: Positive | None = Field(None, description="USD per request the paced lambda aims at")
    pacing_rate: Positive | None = Field(
        None, description="dual step size, in units of 1 / target^2 (unset: 0.05)"
    )


PACING_KEYS: tuple[str, ...] = tuple(PacingHyperparameters.model_fields)


class PacedCascade(PolicyWrapper):
    """The wrapper of the module docstring; ``name`` is the inner policy's."""

    key: ClassVar[str] = "paced"
    cost_aware: ClassVar[bool] = True

    def __init__(self, inner: Policy, cost_target: float, pacing_rate: float = 0.05) -> None:
        super().__init__(inner, "cost_target")
        weight = getattr(inner, "cost_weight", None)
        if weight is None:
            raise PolicyConfigError(f"cost_target needs a policy with a cost_weight; {inner.name!r} has none")
        self.cost_weight = float(weight)
        self.pacer = DualPacer(cost_target, pacing_rate, self.cost_weight)
        self.settings = {"cost_target": cost_target, "pacing_rate": pacing_rate}

    @property
    def multiplier(self) -> float:
        """lambda_t, the inner policy's cost weight now."""
        return self.pacer.multiplier

    def select(self, context: Context) -> Decision:
        """The inner policy's step, played with lambda_t as its cost weight; a first step it declines
        for cost calls argmin_a c_a / q_a instead (module docstring)."""
        decision = self.inner.select(context)
        info = {**decision.info, "cost_multiplier": self.multiplier}
        declined = not decision.arms and not context.tried and decision.info.get("reason") == DECLINED
        if not declined:
            decision.info = info
            return decision
        arms = list(decision.scores)
        cost = np.array([decision.scores[a]["cost"] for a in arms])
        q = np.array([decision.scores[a]["q"] for a in arms])
        chosen = arms[cheapest_per_success(cost, q, self._draws(context))]
        return Decision(
            arms=[chosen],
            scores=decision.scores,
            mode=decision.mode,
            adaptive=decision.adaptive,
            info={**info, "reason": None, "answered_under_target": True},
        )

    def _fold(self, observation: Observation) -> None:
        self.pacer.update(observation)
        self.inner.cost_weight = self.pacer.multiplier  # type: ignore[attr-defined]

    def _state(self) -> dict[str, Any]:
        return {"pacer": self.pacer.state()}

    def _load(self, state: Mapping[str, Any]) -> None:
        self.pacer.load(state["pacer"])
        self.inner.cost_weight = self.pacer.multiplier  # type: ignore[attr-defined]


def paced(factory: Any) -> Callable[..., Policy]:
    """A registry factory for a cascade class (or a ``functools.partial`` preset of one) that also
    accepts ``cost_target`` and ``pacing_rate``; without a ``cost_target`` it builds the plain policy."""
    cls = getattr(factory, "func", factory)
    model = combine(f"{cls.__name__}PacingHyperparameters", model_of(factory), PacingHyperparameters)

    def build(arms: Sequence[str] = (), seed: int | None = 0, **hyper: Any) -> Policy:
        model.parse(hyper)
        own = {k: v for k, v in hyper.items() if k not in PACING_KEYS}
        inner: Policy = factory(arms=arms, seed=seed, **own)
        if hyper.get("cost_target") is None:
            if hyper.get("pacing_rate") is not None:
                raise PolicyConfigError("pacing_rate needs a cost_target")
            return inner
        pacing = {k: hyper[k] for k in PACING_KEYS if hyper.get(k) is not None}
        return PacedCascade(inner, **pacing)  # type: ignore[return-value]

    return registry_factory(
        build,
        prefix="paced",
        wraps=cls,
        model=model,
        from_state=partial(PacedCascade.restore_around, restore_inner=cls.from_state),
        # a preset's fixed values (promptwise-rbf: kernel="rbf"), as the registry reads them off a partial
        keywords=getattr(factory, "keywords", None) or {},
    )
