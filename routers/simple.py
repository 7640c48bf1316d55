"""Context-free baselines: uniform random, always one model, greedy, epsilon-greedy, Thompson sampling.

They ignore the prompt embedding. Per arm a they keep n_a (rewards seen), S_a = sum of rewards and
Q_a = sum of squared rewards; the mean is m_a = S_a / n_a. An arm never rewarded is tried first (its
score is +inf; ties, including several +inf, are broken uniformly at random). Declared priors
(``priors``, ``routers.priors``; set through ``set_priors`` by ``routers.trusted``) add w_a
pseudo-observations of mean m_a to n_a and S_a wherever greedy, epsilon-greedy and Thompson sampling read
them (not to Q_a): an arm with a prior is not "never rewarded".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from routers.base import Context, Decision, Observation, argmax_random_tie, candidate_arms
from routers.hyperparameters import ArmName, Fraction, Hyperparameters, NoHyperparameters
from routers.policy_base import PolicyBase
from routers.priors import Prior, parse_priors, with_prior


class AlwaysHyperparameters(Hyperparameters):
    """``always``: the model to call (one of the router's arms when the router is created)."""

    model: ArmName


class EpsGreedyHyperparameters(Hyperparameters):
    """``eps-greedy``: the probability of a uniformly random arm."""

    eps: Fraction = 0.1


class ThompsonHyperparameters(Hyperparameters):
    """``thompson``: the posterior family."""

    prior: Literal["gaussian", "beta"] = "gaussian"


class ArmMeans(PolicyBase):
    """Shared plumbing: per-arm counts and sums, updated by every rewarded observation of a known arm."""

    name: ClassVar[str] = "arm-means"
    hyperparameters: ClassVar[type[Hyperparameters]] = NoHyperparameters

    def __init__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> None:
        super().__init__(arms, seed)
        self._configure(hyperparameters, Hyperparameters)
        self._stats: dict[str, list[float]] = {a: [0.0, 0.0, 0.0] for a in self._arms}
        self.priors: dict[str, Prior] = {}

    def set_priors(self, priors: Any) -> None:
        """Declared priors (``routers.priors``): kept in ``config`` so that a state restores them."""
        self.priors = parse_priors(priors)
        if self.priors:
            self.config["priors"] = {a: dict(p) for a, p in self.priors.items()}
        else:
            self.config.pop("priors", None)

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Any:
        """As ``PolicyBase.from_state``, with the priors of ``config`` set through ``set_priors``."""
        config = dict(state.get("config", {}))
        priors = config.pop("priors", None)
        policy = super().from_state({**state, "config": config})
        policy.set_priors(priors)
        return policy

    def evidence(self, arm: str) -> tuple[float, float]:
        """(n_a, S_a) with the arm's prior pseudo-observations added."""
        n, s, _ = self._stats[arm]
        return with_prior(self.priors, arm, n, s)

    def _on_add_arm(self, arm: str) -> None:
        self._stats.setdefault(arm, [0.0, 0.0, 0.0])

    def _on_remove_arm(self, arm: str) -> None:
        self._stats.pop(arm, None)

    def mean(self, arm: str) -> float:
        """m_a = S_a / n_a, priors included (+inf while n_a = 0: untried arms first)."""
        n, s = self.evidence(arm)
        return s / n if n > 0 else math.inf

    def update(self, observation: Observation) -> None:
        """n_a += 1, S_a += r, Q_a += r^2. Feedback without a reward or for an unknown arm is ignored."""
        if observation.reward is None or observation.arm not in self._stats:
            return
        r = float(observation.reward)
        stats = self._stats[observation.arm]
        stats[0] += 1.0
        stats[1] += r
        stats[2] += r * r

    def _pick(self, arms: list[str], values: np.ndarray, context: Context) -> Decision:
        scores = {
            a: {"estimate": self.mean(a), "index": float(v), "n": self.evidence(a)[0]}
            for a, v in zip(arms, values, strict=True)
        }
        return Decision(arms=[arms[argmax_random_tie(values, self._draws(context))]], scores=scores)

    def _state(self) -> dict[str, Any]:
        return {"stats": {a: list(s) for a, s in self._stats.items()}}

    def _load(self, learned: Mapping[str, Any]) -> None:
        for arm, stats in dict(learned.get("stats", {})).items():
            if arm in self._stats:
                self._stats[arm] = [float(v) for v in stats]


class RandomPolicy(ArmMeans):
    """Uniform random choice among the candidate arms. No hyperparameters."""

    name: ClassVar[str] = "random"

    def select(self, context: Context) -> Decision:
        """g_t ~ Uniform(candidates)."""
        arms = candidate_arms(self._arms, context)
        if not arms:
            return Decision(arms=[], info={"reason": "no candidate arm"})
        return Decision(arms=[arms[int(self._rng(context).integers(len(arms)))]])


class Always(ArmMeans):
    """Always the same model. Hyperparameter: ``model`` (the arm to call; one of the router's arms when
    the router is created, ``routers.registry.check_router``). When that model is not a candidate for a
    prompt (removed later, or excluded by ``Context.arms``), it falls back to a uniformly random candidate
    and says so in ``Decision.info["fallback"]``."""

    name: ClassVar[str] = "always"
    hyperparameters: ClassVar[type[Hyperparameters]] = AlwaysHyperparameters

    def __init__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> None:
        super().__init__(arms, seed, **hyperparameters)
        self.model = str(self.config["model"])

    def select(self, context: Context) -> Decision:
        """g_t = model."""
        arms = candidate_arms(self._arms, context)
        if not arms:
            return Decision(arms=[], info={"reason": "no candidate arm"})
        if self.model in arms:
            return Decision(arms=[self.model])
        return Decision(arms=[arms[int(self._rng(context).integers(len(arms)))]], info={"fallback": True})


class Greedy(ArmMeans):
    """Greedy on the per-arm mean: g_t = argmax_a m_a, untried arms first. No hyperparameters."""

    name: ClassVar[str] = "greedy"

    def select(self, context: Context) -> Decision:
        """g_t = argmax_a m_a (ties at random)."""
        arms = candidate_arms(self._arms, context)
        if not arms:
            return Decision(arms=[], info={"reason": "no candidate arm"})
        return self._pick(arms, np.array([self.mean(a) for a in arms]), context)


class EpsGreedy(ArmMeans):
    """Epsilon-greedy. Hyperparameter: ``eps`` in [0, 1] (default 0.1), the probability of a uniformly
    random arm; otherwise greedy on the per-arm mean (untried arms first)."""

    name: ClassVar[str] = "eps-greedy"
    hyperparameters: ClassVar[type[Hyperparameters]] = EpsGreedyHyperparameters

    def __init__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> None:
        super().__init__(arms, seed, **hyperparameters)
        self.eps = float(self.config["eps"])

    def select(self, context: Context) -> Decision:
        """With probability eps: uniform; else argmax_a m_a."""
        arms = candidate_arms(self._arms, context)
        if not arms:
            return Decision(arms=[], info={"reason": "no candidate arm"})
        rng = self._rng(context)
        if rng.random() < self.eps:
            return Decision(arms=[arms[int(rng.integers(len(arms)))]], info={"explore": True})
        return self._pick(arms, np.array([self.mean(a) for a in arms]), context)


class Thompson(ArmMeans):
    """Thompson sampling. Hyperparameter ``prior``:

    - ``"gaussian"`` (default, any reward scale): theta_a ~ N(m_a, s^2 / n_a), s = the pooled standard
      deviation of all rewards seen (0.5 before two rewards; floored at 1e-3): a flat-prior Gaussian
      posterior of the mean with a plug-in noise scale. Untried arms first.
    - ``"beta"`` (rewards in [0, 1]): theta_a ~ Beta(1 + S_a, 1 + n_a - S_a), the Bernoulli posterior
      under a uniform prior, with fractional rewards counted fractionally (rewards clipped to [0, 1]).

    g_t = argmax_a theta_a.
    """

    name: ClassVar[str] = "thompson"
    hyperparameters: ClassVar[type[Hyperparameters]] = ThompsonHyperparameters

    def __init__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> None:
        super().__init__(arms, seed, **hyperparameters)
        self.prior = str(self.config["prior"])

    def pooled_std(self) -> float:
        n = sum(s[0] for s in self._stats.values())
        if n < 2:
            return 0.5
        mean = sum(s[1] for s in self._stats.values()) / n
        var = sum(s[2] for s in self._stats.values()) / n - mean * mean
        return max(math.sqrt(max(var, 0.0)), 1e-3)

    def select(self, context: Context) -> Decision:
        """One posterior draw per arm, then the argmax."""
        arms = candidate_arms(self._arms, context)
        if not arms:
            return Decision(arms=[], info={"reason": "no candidate arm"})
        rng = self._rng(context)
        draws = np.empty(len(arms))
        s = self.pooled_std()
        for i, arm in enumerate(arms):
            n, total = self.evidence(arm)
            if self.prior == "beta":
                wins = min(max(total, 0.0), n)
                draws[i] = rng.beta(1.0 + wins, 1.0 + n - wins)
            else:
                draws[i] = math.inf if n == 0 else rng.normal(total / n, s / math.sqrt(n))
        return self._pick(arms, draws, context)

    def update(self, observation: Observation) -> None:
        """As ``ArmMeans.update``; the beta prior clips the reward to [0, 1] first."""
        if self.prior == "beta" and observation.reward is not None:
            clipped = min(max(float(observation.reward), 0.0), 1.0)
            observation = Observation(
                embedding=observation.embedding, arm=observation.arm, reward=clipped, kind=observation.kind
            )
        super().update(observation)
