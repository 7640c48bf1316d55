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
Its state is a ``routers.wrapper.PolicyWrapper`` state (``config`` and ``seed`` at the top, the inner
config with ``retry`` and ``max_calls`` on it, so an imported state rebuilds the cascade); states saved
before, ``{"policy", "retry": {"max_calls"}, "inner"}``, still load.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, ClassVar

from pydantic import Field

from routers.base import Context, Decision, Policy, candidate_arms, require
from routers.hyperparameters import Hyperparameters, PositiveCount, combine, model_of, registry_factory
from routers.logistic_ucb import call_budget
from routers.wrapper import PolicyWrapper


class RetryCascade(PolicyWrapper):
    """An adaptive cascade over an inner single-choice policy (see the module doc)."""

    key: ClassVar[str] = "retry"
    makes_cascade: ClassVar[bool] = True

    def __init__(self, inner: Policy, max_calls: int = 5) -> None:
        super().__init__(inner, "retry")
        require(
            isinstance(max_calls, int) and max_calls >= 1, f"max_calls must be an int >= 1, got {max_calls!r}"
        )
        self.max_calls = max_calls
        # the router's hyperparameters that rebuild this cascade (``config`` puts them on the inner's)
        self.settings = {"retry": True, "max_calls": max_calls}

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

    @classmethod
    def restore(cls, inner: Policy, state: Mapping[str, Any]) -> RetryCascade:
        """From ``state["retry"]``: ``{"config": {"retry", "max_calls"}}``, or ``{"max_calls"}`` as
        states saved before the cascade was a ``PolicyWrapper`` have it."""
        settings = state.get("config", state)
        return cls(inner, int(settings["max_calls"]))


class RetryHyperparameters(Hyperparameters):
    """The keys ``retrying`` adds to a policy's own."""

    retry: bool = Field(False, description="an adaptive till-succeed cascade over the policy")
    max_calls: PositiveCount = Field(5, description="calls per prompt of the cascade")


RETRY_KEYS: tuple[str, ...] = tuple(RetryHyperparameters.model_fields)


def retrying(policy_cls: Any) -> Callable[..., Policy]:
    """A registry factory for ``policy_cls`` with the extra hyperparameters ``retry`` and ``max_calls``."""
    model = combine(f"{policy_cls.__name__}RetryHyperparameters", model_of(policy_cls), RetryHyperparameters)

    def factory(arms: Sequence[str] = (), seed: int | None = 0, **hyper: Any) -> Policy:
        params = model.parse(hyper)
        assert isinstance(params, RetryHyperparameters)
        own = {k: v for k, v in hyper.items() if k not in RETRY_KEYS}
        inner: Policy = policy_cls(arms=arms, seed=seed, **own)
        return RetryCascade(inner, params.max_calls) if params.retry else inner  # type: ignore[return-value]

    return registry_factory(
        factory,
        prefix="retrying",
        wraps=policy_cls,
        model=model,
        from_state=partial(RetryCascade.restore_around, restore_inner=policy_cls.from_state),
    )
