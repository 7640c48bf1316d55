"""The one list of policies: ``POLICIES`` maps a policy name to a factory.

A factory is called as ``factory(arms=[...], seed=int, **hyperparameters)`` and returns a policy that
implements ``routers.base.Policy``; bad hyperparameters raise ``PolicyConfigError`` (or ``TypeError`` for
unknown names), which the admin API turns into a 422. Adding a policy is one module plus one line here.
Presets are factories too (``functools.partial`` over a class with some hyperparameters fixed).
Single-choice policies are registered through ``routers.trusted.trusted``, so their hyperparameters may
also set ``cost_weight`` / ``cost_target`` (cost-aware choice, budget pacing) and ``incumbent`` /
``max_loss`` (safe exploration against an incumbent model); the set policies through
``routers.set_target.targeted`` (``cost_target`` sets their budget); see docs/policies/trusted-routing.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from routers.base import Policy, PolicyConfigError
from routers.cascade_baselines import GreedyTillSucceed, HighestCost, LowestCost, RandomTillSucceed
from routers.combinatorial import C2MABV
from routers.kernel_ucb import PakUCB
from routers.knn_ucb import Balrog, KnnUCB
from routers.linear import LinUCB
from routers.logistic_ucb import PromptWise
from routers.mixture import MixtureGreedy, MixtureUCBCAB, MixtureUCBOGD, VanillaUCB
from routers.retry import retrying
from routers.set_baselines import CUCB, EpsGreedySet, ThompsonSet
from routers.set_target import targeted
from routers.simple import Always, EpsGreedy, Greedy, RandomPolicy, Thompson
from routers.trusted import trusted

PolicyFactory = Callable[..., Policy]

POLICIES: dict[str, PolicyFactory] = {
    "linucb": trusted(LinUCB),
    "promptwise": PromptWise,
    "promptwise-rbf": partial(PromptWise, kernel="rbf"),
    "random-till-succeed": RandomTillSucceed,
    "greedy-till-succeed": GreedyTillSucceed,
    "lowest-cost": LowestCost,
    "highest-cost": HighestCost,
    "c2mab-v": targeted(C2MABV),
    "cucb": targeted(CUCB),
    "eps-greedy-set": targeted(EpsGreedySet),
    "thompson-set": targeted(ThompsonSet),
    "mixture-ucb-cab": MixtureUCBCAB,
    "mixture-ucb-ogd": MixtureUCBOGD,
    "mixture-greedy": MixtureGreedy,
    "vanilla-ucb": VanillaUCB,
    "knn-ucb": trusted(KnnUCB),
    "balrog": trusted(Balrog),
    "pak-ucb": trusted(retrying(PakUCB)),  # pak-ucb:retry=true turns it into a retry-on-failure cascade
    "random": trusted(RandomPolicy),
    "always": trusted(Always),
    "greedy": trusted(Greedy),
    "eps-greedy": trusted(EpsGreedy),
    "thompson": trusted(Thompson),
}


def build_policy(
    name: str, arms: Sequence[str], seed: int | None = 0, hyperparameters: Mapping[str, Any] | None = None
) -> Policy:
    """Construct policy ``name``; every configuration error comes back as ``PolicyConfigError``."""
    factory = POLICIES.get(name)
    if factory is None:
        raise PolicyConfigError(f"unknown policy {name!r}; known: {sorted(POLICIES)}")
    try:
        return factory(arms=list(arms), seed=seed, **dict(hyperparameters or {}))
    except TypeError as exc:  # unknown or missing keyword
        raise PolicyConfigError(f"bad hyperparameters for {name!r}: {exc}") from exc


def restore_policy(state: Mapping[str, Any]) -> Policy:
    """Rebuild a policy from its ``state_dict()``: the factory's class ``from_state``."""
    name = state.get("policy")
    factory = POLICIES.get(str(name))
    if factory is None:
        raise PolicyConfigError(f"state names unknown policy {name!r}")
    cls = getattr(factory, "func", factory)  # a preset is a functools.partial over the class
    from_state = getattr(cls, "from_state", None)
    if from_state is None:
        raise PolicyConfigError(f"policy {name!r} cannot be restored from a state")
    policy: Policy = from_state(state)
    return policy
