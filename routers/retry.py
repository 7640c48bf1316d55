"""Retry: turn any single-choice policy into an adaptive "till-succeed" cascade.

``RetryCascade(inner, max_calls)`` asks the inner policy for its best arm among the models not yet tried
for this prompt; the caller calls it, reports the outcome (the inner policy learns from it at once, so a
failure refits it before the next choice), and selects again with the called models in
``Context.tried``. It stops after ``max_calls`` calls (``Context.constraints["max_calls"]`` overrides) or
when no untried model is left; the caller stops on success. This is the till-succeed form of PAK-UCB in
PromptWise's experiments (spec section 5.3).

``retrying(cls)`` wraps a policy class into a registry factory with two extra hyperparameters, ``retry``
(default False: the plain policy) and ``max_calls`` (5); the factory's ``from_state`` restores both forms,
so ``registry.restore_policy`` works unchanged. Wire a policy as ``POLICIES["pak-ucb"] = retrying(PAKUCB)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

from routers.base import Context, Decision, Observation, Policy, PolicyConfigError, candidate_arms, require
from routers.logistic_ucb import call_budget


class RetryCascade:
    """An adaptive cascade over an inner single-choice policy (see the module doc)."""

    cost_aware: ClassVar[bool] = False

    def __init__(self, inner: Policy, max_calls: int = 5) -> None:
        require(
            isinstance(max_calls, int) and max_calls >= 1, f"max_calls must be an int >= 1, got {max_calls!r}"
        )
        self.inner = inner
        self.max_calls = max_calls
        self.name = inner.name  # type: ignore[misc]

    @property
    def arms(self) -> list[str]:
        return self.inner.arms

    def select(self, context: Context) -> Decision:
        """The inner policy's choice among untried arms; ``arms=[]`` once ``max_calls`` calls were made."""
        if len(context.tried) >= call_budget(context, self.max_calls):
            return Decision(arms=[], mode="cascade", adaptive=True, info={"reason": "max_calls"})
        untried = candidate_arms(self.inner.arms, context)
        if not untried:
            return Decision(arms=[], mode="cascade", adaptive=True, info={"reason": "no candidate arm"})
        decision = self.inner.select(replace(context, arms=untried))
        arms = [a for a in decision.arms[:1] if a in untried]
        return Decision(
            arms=arms,
            scores=decision.scores,
            mode="cascade",
            adaptive=True,
            query=decision.query,
            info={**decision.info, "retry": True},
        )

    def update(self, observation: Observation) -> None:
        self.inner.update(observation)

    def add_arm(self, arm: str) -> None:
        self.inner.add_arm(arm)

    def remove_arm(self, arm: str) -> None:
        self.inner.remove_arm(arm)

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.inner.name,
            "retry": {"max_calls": self.max_calls},
            "inner": self.inner.state_dict(),
        }

    @classmethod
    def from_state(
        cls, state: Mapping[str, Any]
    ) -> Policy:  # pragma: no cover - use retrying(...).from_state
        raise PolicyConfigError("restore a retry cascade through its registry factory")


def retrying(policy_cls: Any) -> Callable[..., Policy]:
    """A registry factory for ``policy_cls`` with the extra hyperparameters ``retry`` and ``max_calls``."""

    def factory(
        arms: Sequence[str] = (), seed: int | None = 0, retry: bool = False, max_calls: int = 5, **hyper: Any
    ) -> Policy:
        require(isinstance(retry, bool), f"retry must be a bool, got {retry!r}")
        inner: Policy = policy_cls(arms=arms, seed=seed, **hyper)
        return RetryCascade(inner, max_calls) if retry else inner  # type: ignore[return-value]

    def from_state(state: Mapping[str, Any]) -> Policy:
        if "retry" not in state:
            restored: Policy = policy_cls.from_state(state)
            return restored
        inner = policy_cls.from_state(state["inner"])
        return RetryCascade(inner, int(state["retry"]["max_calls"]))  # type: ignore[return-value]

    factory.from_state = from_state  # type: ignore[attr-defined]
    factory.policy_class = policy_cls  # type: ignore[attr-defined]
    factory.__name__ = f"retrying_{getattr(policy_cls, '__name__', 'policy')}"
    return factory
