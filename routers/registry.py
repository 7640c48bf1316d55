"""The one list of policies: ``POLICIES`` maps a policy name to a factory.

A factory is called as ``factory(arms=[...], seed=int, **hyperparameters)`` and returns a policy that
implements ``routers.base.Policy``. Each factory has a typed hyperparameter model
(``routers.hyperparameters``: ``hyperparameter_model(name)``, published as a JSON schema by
``hyperparameter_schema``); a bad value or an unknown key raises ``PolicyConfigError`` naming the key,
which the admin API turns into a 422. ``check_router`` adds what only a router's creation knows: the
hyperparameters that name an arm name one of the router's, and ``dim`` is the embedder's. Adding a
policy is one module plus one line here. Presets are factories too (``functools.partial`` over a class
with some hyperparameters fixed; their schema shows the fixed values as defaults).
Single-choice policies are registered through ``routers.trusted.trusted``, so their hyperparameters may
also set ``cost_weight`` / ``cost_target`` (cost-aware choice, budget pacing) and ``incumbent`` /
``max_loss`` (safe exploration against an incumbent model) and ``shadow`` (shadow evaluation); the set policies through
``routers.set_target.targeted`` (``cost_target`` sets their budget) and the cascades that weigh cost
through ``routers.paced_cascade.paced`` (``cost_target`` paces their lambda); see
docs/policies/trusted-routing.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from routers import default
from routers.base import Policy, PolicyConfigError
from routers.cascade_baselines import GreedyTillSucceed, HighestCost, LowestCost, RandomTillSucceed
from routers.combinatorial import C2MABV
from routers.hyperparameters import Hyperparameters, model_of
from routers.kernel_ucb import PakUCB
from routers.knn_ucb import Balrog, KnnUCB
from routers.linear import LinUCB
from routers.logistic_ucb import PromptWise
from routers.mixture import MixtureGreedy, MixtureUCBCAB, MixtureUCBOGD, VanillaUCB
from routers.paced_cascade import paced
from routers.policy_base import PolicyBase
from routers.retry import retrying
from routers.set_baselines import CUCB, EpsGreedySet, ThompsonSet
from routers.set_target import targeted
from routers.simple import Always, EpsGreedy, Greedy, RandomPolicy, Thompson
from routers.trusted import trusted

PolicyFactory = Callable[..., Policy]

POLICIES: dict[str, PolicyFactory] = {
    "linucb": trusted(LinUCB),
    "promptwise": paced(PromptWise),
    "promptwise-rbf": paced(partial(PromptWise, kernel="rbf")),
    "random-till-succeed": RandomTillSucceed,
    "greedy-till-succeed": paced(GreedyTillSucceed),
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


def _factory(name: str) -> PolicyFactory:
    factory = POLICIES.get(name)
    if factory is None:
        raise PolicyConfigError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}")
    return factory


def hyperparameter_model(name: str) -> type[Hyperparameters]:
    """The typed hyperparameters of policy ``name`` (its wrappers' keys included)."""
    return model_of(_factory(name))


def preset_values(name: str) -> dict[str, Any]:
    """The hyperparameters a preset fixes (``promptwise-rbf``: kernel="rbf"); {} for other names."""
    return dict(getattr(_factory(name), "keywords", None) or {})


def hyperparameter_schema(name: str) -> dict[str, Any]:
    """The JSON schema of policy ``name``'s hyperparameters; a preset's fixed values are its defaults."""
    schema = hyperparameter_model(name).model_json_schema()
    for key, value in preset_values(name).items():
        schema["properties"][key]["default"] = value
    schema["title"] = name
    return schema


def hyperparameter_defaults(name: str) -> dict[str, Any]:
    """Every optional hyperparameter of ``name`` with its default (a preset's fixed values included)."""
    return {**hyperparameter_model(name).defaults(), **preset_values(name)}


def build_policy(
    name: str, arms: Sequence[str], seed: int | None = 0, hyperparameters: Mapping[str, Any] | None = None
) -> Policy:
    """Construct policy ``name``; every configuration error comes back as ``PolicyConfigError``."""
    factory = _factory(name)
    try:
        return factory(arms=list(arms), seed=seed, **dict(hyperparameters or {}))
    except TypeError as exc:  # a factory called with something it does not take
        raise PolicyConfigError(f"bad hyperparameters for {name!r}: {exc}") from exc


def check_router(
    name: str,
    arms: Sequence[str],
    hyperparameters: Mapping[str, Any],
    embedding_dim: int | None = None,
    arm_references: bool = True,
) -> None:
    """What a router's creation checks beyond ``build_policy``: with ``arm_references``, every
    hyperparameter that names an arm (``always``'s ``model``, ``incumbent``) names one of ``arms``; with
    ``embedding_dim``, a given ``dim`` equals it. ``PolicyConfigError`` naming the key otherwise. Not
    checked when a policy is rebuilt later: an arm removed since keeps the policy's fallback."""
    model = hyperparameter_model(name)
    params = model.parse(hyperparameters)
    if arm_references:
        for key in model.arm_fields():
            value = getattr(params, key)
            if value is not None and value not in arms:
                raise PolicyConfigError(
                    f"hyperparameter {key}: {value!r} is not one of the router's arms ({', '.join(arms)})"
                )
    dim = getattr(params, "dim", None)
    if embedding_dim is not None and dim is not None and dim != embedding_dim:
        raise PolicyConfigError(
            f"hyperparameter dim: {dim} is not the dimension of this gateway's embedder ({embedding_dim}); "
            "leave it out to take it from the first prompt"
        )


def policy_dim(policy: Policy) -> int | None:
    """The context dimension a policy is fixed to (None while it takes it from the first context);
    a wrapper or a retry cascade answers for its inner policy."""
    inner: Any = policy
    while not isinstance(inner, PolicyBase) and hasattr(inner, "inner"):
        inner = inner.inner
    dim = getattr(inner, "dim", None)
    return None if dim is None else int(dim)


def restore_policy(state: Mapping[str, Any]) -> Policy:
    """Rebuild a policy from its ``state_dict()``: the factory's class ``from_state``."""
    name = state.get("policy")
    factory = POLICIES.get(str(name))
    if factory is None:
        raise PolicyConfigError(f"state names unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}")
    cls = getattr(factory, "func", factory)  # a preset is a functools.partial over the class
    from_state = getattr(cls, "from_state", None)
    if from_state is None:
        raise PolicyConfigError(f"policy {name!r} cannot be restored from a state")
    policy: Policy = from_state(state)
    return policy


class DefaultFactory:
    """The registry's ``default`` (routers/default.py): builds ``default.POLICY`` with
    ``default.resolve(hyperparameters)``. ``policy_class`` is the concrete one's, so the bench passes it
    the run's T where it takes a horizon."""

    __name__ = default.NAME

    def __call__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> Policy:
        name, merged = default.resolve(hyperparameters)
        return build_policy(name, arms, seed, merged)

    @property
    def policy_class(self) -> Any:
        factory = POLICIES[default.POLICY]
        return getattr(factory, "policy_class", getattr(factory, "func", factory))

    @property
    def hyperparameters(self) -> type[Hyperparameters]:
        """The concrete policy's typed hyperparameters (``routers.hyperparameters.model_of`` reads it)."""
        return model_of(POLICIES[default.POLICY])

    @property
    def keywords(self) -> dict[str, Any]:
        """The default's own values, shown as the defaults of ``GET /admin/policies`` (as a preset's)."""
        return dict(default.HYPERPARAMETERS)

    @staticmethod
    def from_state(state: Mapping[str, Any]) -> Policy:
        """A default policy's state names the concrete policy; restore it as that one."""
        concrete: Any = POLICIES[default.POLICY]
        restored: Policy = concrete.from_state(state)
        return restored


# a registered policy with the hyperparameters chosen in routers/default.py
POLICIES[default.NAME] = DefaultFactory()
