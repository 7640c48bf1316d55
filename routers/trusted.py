"""Registry factories that give any single-choice policy the trusted-routing hyperparameters.

``trusted(factory)`` wraps a registry factory (a class, or ``retrying(cls)``) so that the router's
hyperparameters may also carry

- ``cost_weight``, ``cost_target``, ``pacing_rate``, ``cost_confidence``: ``routers.cost_aware.CostAware``;
- ``incumbent``, ``incumbent_by``, ``max_loss``, ``objective``, ``delta``, ``reward_min``, ``reward_max``:
  ``routers.conservative.Conservative`` (without ``incumbent``, the highest-priced arm is the incumbent
  unless ``incumbent_by`` says ``evidence``);
- ``priors`` ({model: {"mean", "weight"}}, ``routers.priors``): declared prior quality as
  pseudo-observations, given to the conservative wrapper when it applies and to the policy itself when
  it keeps per-model statistics (``set_priors``: greedy, epsilon-greedy, Thompson sampling); a
  per-prompt policy ignores it. ``priors`` alone applies no wrapper;
- ``shadow``, ``shadow_usd_per_day``: ``routers.shadow.Shadow`` (shadow evaluation: a fraction of the
  decisions also call one model off the client's path, as evidence).

A wrapper applies when any of its keys is set (not None; ``cost_weight = 0`` or ``shadow = 0`` alone is the
plain policy).

The order is fixed: ``Shadow(Conservative(CostAware(policy)))`` (the check guards whatever the cost-aware
choice proposes; the shadow model is picked around the decision the floor let through, from its evidence). Without any of these keys the factory returns the plain policy, whose state is unchanged. The
factory's ``hyperparameters`` model is the policy's own plus the wrappers' (``CostHyperparameters``,
``ConservativeHyperparameters``, ``PriorHyperparameters``, ``ShadowHyperparameters``), so every key is typed and known before
anything is built; the remaining keys go to the policy's own constructor; a wrapper key that the wrapper
does not accept for this policy (``cost_target`` on ``random``) is a ``PolicyConfigError``.
``from_state`` restores every form, so ``registry.restore_policy`` works unchanged. In a bench spec:
``knn-ucb:cost_target=0.002``, ``knn-ucb:incumbent=gpt-4,max_loss=0.02``,
``knn-ucb:incumbent=gpt-4,max_loss=0.05,objective=savings``, ``knn-ucb:shadow=0.1``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from routers.base import Policy
from routers.conservative import CONSERVATIVE_KEYS, Conservative, ConservativeHyperparameters
from routers.cost_aware import COST_KEYS, CostAware, CostHyperparameters
from routers.hyperparameters import combine, model_of, registry_factory
from routers.priors import PRIOR_KEYS, PriorHyperparameters, parse_priors
from routers.shadow import SHADOW_KEYS, Shadow, ShadowHyperparameters

OFF_AT_ZERO = ("cost_weight", "shadow")  # keys whose value 0 alone leaves their wrapper out


def wrap(inner: Policy, hyper: Mapping[str, Any]) -> Policy:
    """Apply the wrappers that ``hyper`` (wrapper keys only) asks for, innermost first. A key set to
    None, or ``cost_weight`` = 0, counts as absent; any other key of a wrapper applies it (and has it
    validated). ``priors`` go to the policy (``set_priors``) and to the conservative wrapper."""
    given = {k: v for k, v in hyper.items() if v is not None and not (k in OFF_AT_ZERO and v == 0)}
    priors = parse_priors(hyper.get("priors"))
    set_priors = getattr(inner, "set_priors", None)
    if priors and callable(set_priors):
        set_priors(priors)
    policy = inner
    if any(k in given for k in COST_KEYS):
        policy = CostAware(policy, **{k: hyper[k] for k in COST_KEYS if k in hyper})  # type: ignore[assignment]
    if any(k in given for k in CONSERVATIVE_KEYS):
        safe = {k: hyper[k] for k in CONSERVATIVE_KEYS if k in hyper}
        policy = Conservative(policy, priors=priors, **safe)  # type: ignore[assignment]
    if any(k in given for k in SHADOW_KEYS):
        policy = Shadow(policy, **{k: hyper[k] for k in SHADOW_KEYS if k in hyper})  # type: ignore[assignment]
    return policy


def restore_wrapped(state: Mapping[str, Any], restore_inner: Callable[[Mapping[str, Any]], Policy]) -> Policy:
    """Inverse of ``wrap(...).state_dict()``."""
    for wrapper in (Shadow, Conservative, CostAware):
        if wrapper.key in state:
            inner = restore_wrapped(state["inner"], restore_inner)
            return wrapper.restore(inner, state[wrapper.key])  # type: ignore[return-value]
    return restore_inner(state)


def trusted(factory: Any) -> Callable[..., Policy]:
    """A registry factory: ``factory`` plus the wrapper hyperparameters of the module docstring."""
    keys = (*COST_KEYS, *CONSERVATIVE_KEYS, *PRIOR_KEYS, *SHADOW_KEYS)
    own_model = model_of(factory)
    model = combine(
        own_model.__name__.replace("Hyperparameters", "") + "TrustedHyperparameters",
        own_model,
        CostHyperparameters,
        ConservativeHyperparameters,
        PriorHyperparameters,
        ShadowHyperparameters,
    )

    def build(arms: Sequence[str] = (), seed: int | None = 0, **hyper: Any) -> Policy:
        model.parse(hyper)  # every key known, typed and in range before anything is built
        own = {k: v for k, v in hyper.items() if k not in keys}
        inner: Policy = factory(arms=arms, seed=seed, **own)
        return wrap(inner, {k: v for k, v in hyper.items() if k in keys})

    def from_state(state: Mapping[str, Any]) -> Policy:
        return restore_wrapped(state, factory.from_state)

    return registry_factory(
        build,
        prefix="trusted",
        wraps=factory,
        policy_class=getattr(factory, "policy_class", factory),
        model=model,
        from_state=from_state,
    )
