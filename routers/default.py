"""The policy a router gets when it names none: ``default`` in the registry.

The default is data: a registered policy name and its hyperparameters, chosen on the tuning halves of the
dev sets (the rule and the table that chose it: docs/policies/default.md): plain kNN-UCB, no floor, no
cost term. Without a named incumbent there is nothing the team runs today to hold a floor against, and the
two stand-ins measured lose to the plain policy where price does not follow quality: a floor against the
dearest model (``max_loss=0.01``, ``incumbent_by=price``) fell to 0.76 x the best single model on GSM8K
with the two prices swapped, and one against the model of highest lower bound so far
(``incumbent_by=evidence``) locked onto whichever model was seen first (0.47 x on arena-bench). Name an
incumbent to get the floor: ``default:incumbent=M`` applies it at max_loss 0.02,
``default:incumbent=M,max_loss=0.05,objective=savings`` minimises cost under it.

``resolve(hyperparameters)`` gives the concrete (policy, hyperparameters) with the given ones on top of
the default's, so that

- ``bench run --policy default`` and ``--policy default:cost_target=0.002`` build exactly what a router
  created without ``policy`` (and with those ``hyperparameters``) gets; a key given as null drops the
  default's value (the policy's own default applies);
- the admin API stores the *resolved* policy and hyperparameters on the router, not the name
  ``default``: a router keeps its behaviour when a later release changes the default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from routers.base import Policy

NAME = "default"
POLICY = "knn-ucb"
HYPERPARAMETERS: Mapping[str, Any] = MappingProxyType({})


def resolve(hyperparameters: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """(the default's policy name, its hyperparameters overridden by ``hyperparameters``); a key whose
    given value is None is dropped (the policy's own default applies)."""
    merged = {**HYPERPARAMETERS, **dict(hyperparameters or {})}
    return POLICY, {k: v for k, v in merged.items() if v is not None}


def resolve_named(policy: str | None, hyperparameters: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """What a router stores for a requested ``policy``: ``None`` or ``"default"`` resolve to the
    default (``resolve``); any other name is kept with its hyperparameters as given."""
    if policy is None or policy == NAME:
        return resolve(hyperparameters)
    return policy, dict(hyperparameters)


def _registry() -> Any:
    # The registry lists this factory, so it is imported here, when a policy is built, not at import time.
    from routers import registry

    return registry


def _concrete() -> Any:
    return _registry().POLICIES[POLICY]


class DefaultFactory:
    """The registry's ``default``: builds ``POLICY`` with ``resolve(hyperparameters)``. ``policy_class``
    is the concrete one's, so the bench passes it the run's T where it takes a horizon."""

    __name__ = NAME

    def __call__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> Policy:
        name, merged = resolve(hyperparameters)
        policy: Policy = _registry().build_policy(name, arms, seed, merged)
        return policy

    @property
    def policy_class(self) -> Any:
        factory = _concrete()
        return getattr(factory, "policy_class", getattr(factory, "func", factory))

    @property
    def hyperparameters(self) -> Any:
        """The concrete policy's typed hyperparameters (``routers.hyperparameters.model_of`` reads it)."""
        return _registry().model_of(_concrete())

    @property
    def keywords(self) -> dict[str, Any]:
        """The default's own values, shown as the defaults of ``GET /admin/policies`` (as a preset's)."""
        return dict(HYPERPARAMETERS)

    @staticmethod
    def from_state(state: Mapping[str, Any]) -> Policy:
        """A default policy's state names the concrete policy; restore it as that one."""
        restored: Policy = _concrete().from_state(state)
        return restored


default_policy = DefaultFactory()
