"""Safe exploration against an incumbent model: a composition wrapper.

``Conservative(inner, incumbent, max_loss)`` plays the inner policy's choice only while doing so cannot,
with high confidence, push the router's cumulative reward below (1 - alpha) times what the incumbent
(the model the team would call without routing) would have earned on the same prompts; otherwise it plays
the incumbent. This is the conservative-UCB check of Wu, Shariff, Lattimore and Szepesvari 2016
("Conservative Bandits", ICML, Sec. 3, the condition of Algorithm 1 / eq. (3)), in the unknown-default
form (their Sec. 5 and Kazerouni, Ghavamzadeh, Abbasi-Yadkori and Van Roy 2017, "Conservative Contextual
Linear Bandits", NeurIPS, eq. (6)-(7): the default's reward replaced by an upper confidence bound), kept
on the realised rewards the router has been paid.

Notation, over the rounds folded so far (``bandit`` observations with a reward): R_0 is the reward of the
rounds that played the incumbent a_0, S the other rounds and R_S their reward (both realised, exact);
the incumbent's own observations (all kinds: played rounds, queries and offline log rows) give n_0
rewards of mean m_0.
Rewards lie in [r_min, r_max] (``reward_min``, ``reward_max``), range D = r_max - r_min, and
L = ln(1 / delta). On the rounds that played a_0 the router and the incumbent earned the same, so

    router >= (1 - alpha) incumbent   <=>   R_S + alpha R_0 >= (1 - alpha) I_S

where I_S is the incumbent's (unobserved) reward on the rounds in S. Playing arm a != a_0 this round adds
this round to S; its reward is at least r_min, and with probability >= 1 - 2 delta (Hoeffding, twice: the
mean, and the realised sum about the mean) the incumbent's reward on the m = |S| + 1 rounds is at most

    U(m) = m (m_0 + D sqrt(L / (2 n_0))) + D sqrt(m L / 2)      (U = +inf while n_0 = 0)

The check (Wu et al.'s inequality, with the realised R_S in place of the sum of lower confidence bounds,
and r_min for the new round's reward so that the floor holds for the realised sums, not only in
expectation): play a iff

    margin(a) = R_S + r_min + alpha R_0 - (1 - alpha) U(|S| + 1) >= 0,

else play a_0 (``Decision.info["incumbent_forced"] = True``). When the inner policy chooses a_0 itself,
margin = R_S + alpha R_0 - (1 - alpha) U(|S|) (U(0) = 0) is reported and nothing is forced. The margin is
in ``Decision.info["conservative_margin"]``.

Context. The check bounds the incumbent's reward on S by its mean over every prompt it answered. The
wrapped policy leaves the incumbent where it expects another model to do better, so on S the incumbent
is, if anything, worse than on average and the bound errs on the safe side; a per-prompt bound (Kazerouni
et al.'s linear one) would let it explore sooner where the incumbent is weak, at the price of a model of
the incumbent. The first decisions play the incumbent (n_0 = 0 gives U = +inf) until alpha R_0 has
banked enough slack to pay for one bad round: exploration is financed by the incumbent's own earnings.

Default incumbent: with ``incumbent`` unset, a_0 is, per decision, the candidate arm with the highest price
in ``Context.costs`` (first in the policy's arm order among equals): "call the most expensive model"
is what a team does without routing. A decision without prices, or whose incumbent is not a candidate,
is not checked (``info["conservative"]`` says why).

Replica consistency: every quantity above is folded from observations (``update``); ``select`` only
reads them. Decisions still in flight (made, not yet folded) are not counted.

Composition with cost: wrap the cost-aware policy (``Conservative(CostAware(inner))``): the cost term
chooses which model to try, the check decides whether trying it is safe. When the floor and a cost target
conflict, the floor wins (forced incumbent calls count as spend in the pacer).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self

from pydantic import Field, model_validator

from routers.base import Context, Decision, Observation, Policy, candidate_arms
from routers.hyperparameters import ArmName, Finite, Hyperparameters
from routers.wrapper import PolicyWrapper


class ConservativeHyperparameters(Hyperparameters):
    """The conservative wrapper's keys (module docstring); any of them set applies the wrapper."""

    incumbent: ArmName | None = Field(None, description="a_0; null: the highest-priced candidate")
    max_loss: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] | None = Field(
        None, description="alpha: the tolerated fraction of the incumbent's reward; null: 0.02"
    )
    delta: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = Field(0.01, description="confidence")
    reward_min: Finite = 0.0
    reward_max: Finite = 1.0

    @model_validator(mode="after")
    def _range(self) -> Self:
        if not self.reward_min < self.reward_max:
            raise ValueError(f"reward_min must be < reward_max, got {self.reward_min!r}, {self.reward_max!r}")
        return self


CONSERVATIVE_KEYS: tuple[str, ...] = tuple(ConservativeHyperparameters.model_fields)


class Conservative(PolicyWrapper):
    """The wrapper of the module docstring; ``name`` is the inner policy's."""

    key: ClassVar[str] = "conservative"

    def __init__(self, inner: Policy, **settings: Any) -> None:
        super().__init__(inner, "incumbent / max_loss")
        p = ConservativeHyperparameters.parse(settings)
        p = p.model_copy(update={"max_loss": 0.02 if p.max_loss is None else p.max_loss})
        self.incumbent = p.incumbent
        self.alpha = float(p.max_loss or 0.0)
        self.log_term = math.log(1.0 / p.delta)
        self.reward_min, self.reward_max = p.reward_min, p.reward_max
        self.settings = p.config()
        self.played: dict[str, list[float]] = {}  # arm -> [rounds played, their reward]
        self.seen: dict[str, list[float]] = {}  # arm -> [rewards observed (any kind), their sum]

    def incumbent_for(self, context: Context) -> str | None:
        """a_0: the configured incumbent, else the highest-priced candidate (see the module doc)."""
        if self.incumbent is not None:
            return self.incumbent
        if not context.costs:
            return None
        priced = [a for a in candidate_arms(self.inner.arms, context) if a in context.costs]
        return max(priced, key=lambda a: context.costs[a]) if priced else None  # type: ignore[index]

    def incumbent_bound(self, incumbent: str, rounds: int) -> float:
        """U(m) = m (m_0 + D sqrt(L / (2 n_0))) + D sqrt(m L / 2); 0 for m = 0, +inf while n_0 = 0."""
        if rounds == 0:
            return 0.0
        n0, total0 = self.seen.get(incumbent, (0.0, 0.0))
        if n0 == 0:
            return math.inf
        spread = self.reward_max - self.reward_min
        mean_bound = total0 / n0 + spread * math.sqrt(self.log_term / (2.0 * n0))
        return rounds * mean_bound + spread * math.sqrt(rounds * self.log_term / 2.0)

    def rounds(self, incumbent: str) -> tuple[int, int]:
        """(rounds that played a_0, |S|): the folded ``bandit`` rounds on and off the incumbent."""
        return int(self.played.get(incumbent, (0.0, 0.0))[0]), self._sums(incumbent)[1]

    def margin(self, incumbent: str, arm: str) -> float:
        """margin(a) of the module docstring: >= 0 iff playing ``arm`` keeps the floor."""
        return self.floor_margin(incumbent) if arm == incumbent else self.explore_margin(incumbent)

    def _sums(self, incumbent: str) -> tuple[float, int, float]:
        """(R_0, |S|, R_S) over the folded rounds."""
        others = [s for a, s in self.played.items() if a != incumbent]
        r0 = self.played.get(incumbent, (0.0, 0.0))[1]
        return r0, int(sum(s[0] for s in others)), sum(s[1] for s in others)

    def explore_margin(self, incumbent: str) -> float:
        """margin(a) for any a != a_0: R_S + r_min + alpha R_0 - (1 - alpha) U(|S| + 1); >= 0 iff the
        next decision may leave the incumbent."""
        r0, rounds_s, reward_s = self._sums(incumbent)
        bound = self.incumbent_bound(incumbent, rounds_s + 1)
        return reward_s + self.reward_min + self.alpha * r0 - (1.0 - self.alpha) * bound

    def floor_margin(self, incumbent: str) -> float:
        """margin(a_0) = R_S + alpha R_0 - (1 - alpha) U(|S|): the floor's slack over the rounds so far."""
        r0, rounds_s, reward_s = self._sums(incumbent)
        return reward_s + self.alpha * r0 - (1.0 - self.alpha) * self.incumbent_bound(incumbent, rounds_s)

    def select(self, context: Context) -> Decision:
        """The inner choice if margin(choice) >= 0, else the incumbent."""
        decision = self.inner.select(context)
        incumbent = self.incumbent_for(context)
        if not decision.arms:
            return decision
        if incumbent is None or incumbent not in candidate_arms(self.inner.arms, context):
            why = "no incumbent (no prices)" if incumbent is None else "incumbent not a candidate"
            decision.info = {**decision.info, "conservative": why, "incumbent_forced": False}
            return decision
        chosen = decision.arms[0]
        margin = self.margin(incumbent, chosen)
        forced = chosen != incumbent and not margin >= 0
        info = {
            **decision.info,
            "conservative_margin": margin,
            "incumbent": incumbent,
            "incumbent_forced": forced,
        }
        if not forced:
            decision.info = info
            return decision
        return Decision(
            arms=[incumbent],
            scores=decision.scores,
            mode=decision.mode,
            query=[a for a in decision.query if a != incumbent],
            info={**info, "proposed": chosen},
        )

    def _fold(self, observation: Observation) -> None:
        """Fold the reward into the seen sums (any kind) and the played sums (``bandit``)."""
        if observation.reward is None:
            return
        r = float(observation.reward)  # a removed arm's rounds were still earned: no arm filter
        seen = self.seen.setdefault(observation.arm, [0.0, 0.0])
        seen[0] += 1.0
        seen[1] += r
        if observation.kind == "bandit":
            played = self.played.setdefault(observation.arm, [0.0, 0.0])
            played[0] += 1.0
            played[1] += r

    def _state(self) -> dict[str, Any]:
        return {
            "played": {a: list(s) for a, s in self.played.items()},
            "seen": {a: list(s) for a, s in self.seen.items()},
        }

    def _load(self, state: Mapping[str, Any]) -> None:
        self.played = {a: [float(v) for v in s] for a, s in dict(state.get("played", {})).items()}
        self.seen = {a: [float(v) for v in s] for a, s in dict(state.get("seen", {})).items()}
