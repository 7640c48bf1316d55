"""Shadow evaluation for any single-choice policy: a composition wrapper.

``Shadow(inner, shadow=S)`` leaves the served choice to the wrapped policy and, on a fraction S of the
decisions, names one more model in ``Decision.shadow``: the caller calls it as well, off the client's
path, grades its answer and reports it as a ``shadow`` observation. A shadow answer is evidence about that
model (every policy learns it like a BALROG query), never a round the client was served: the floor's
realised sums (``routers.conservative``: R_0, R_S, S) never hold it. Its cost is real money, so a pacer
counts it as spend of its decision, as a query's (``routers.pacing.DualPacer``).

Sampling. Decision t is sampled iff u_t < S, with u_t = h / 2^64 and h the first 8 bytes (big-endian) of
the BLAKE2b digest of ``f"{seed}:{key}:shadow"`` (``shadow_draw``), where key is the decision's generator
key when the caller passes a ``KeyedRng`` (the gateway: the client's request seed, else the decision id's
first 64 bits, ``routers.base.generator_key``), else ``Context.decision_key`` (the simulator: round t as
``str(t)``, which formats as the seed t does, so ``bench e2e``, sending t as the seed, samples the rounds
the simulator samples). A function of the router's seed and the decision only, drawn from nothing the
wrapped policy draws from (``Context.rng``), so adding the wrapper changes none of the policy's own draws,
and every replica samples the same decisions. A hash, not a generator: building a ``decision_rng`` costs
about 45 us, on every decision; the hash about 1 us. The choice's ties draw from ``decision_rng(seed,
f"{key}:shadow")``, built only on a tie. A caller that keys nothing gets the wrapper's own generator (seeded
from the router's seed, saved in the state; deterministic in the order of selects, not replica-safe). Over
n decisions the number sampled is Binomial(n, S) (the digest's bits taken as uniform).

Which model. The candidates are the decision's candidates (``candidate_arms``) other than the served arm(s)
and the models the decision already queries (``Decision.query``); under a floor whose objective is
``savings``, only its incumbent a_0 and the models priced below it (the savings choice serves no dearer model, so
evidence about one would change no decision and cost the most). With [LCB_a(x), UCB_a(x)] the evidence
interval of model a at this prompt x, a_0 the reference (the floor's incumbent where a
``Conservative`` layer checks this decision, else the served model) and alpha the floor's ``max_loss``,
a is eligible iff it could beat the reference or be cheaper at equal quality:

    UCB_a(x) >= LCB_0(x)                                  (could beat a_0), or
    c_a(x) < c_0(x) and UCB_a(x) >= (1 - alpha) mean_0(x)  (cheaper, within the floor; with a floor only)

and the shadow model is the eligible one of widest interval, argmax_a UCB_a(x) - LCB_a(x) (ties uniformly
at random, from the shadow generator): the call that teaches most where it could change a decision. None
eligible: no shadow call. The bounds, in order of preference:

- the ``Conservative`` layer's (``evidence_bounds``): Hoeffding's on the model's rewards among the k stored
  prompts nearest x, else per model, priors included;
- the policy's own scores, ``estimate`` -/+ ``bonus`` (kNN-UCB, BALROG, LinUCB, PAK-UCB), when it reports
  both for every candidate;
- Hoeffding's per-model interval (``routers.priors.hoeffding_bounds``, delta = 0.01) on the rewards of
  every kind the wrapper folded, in the reward range seen so far widened to hold [0, 1].

A policy with its own rule defines ``shadow_choice(context, decision, k) -> list[str]``, which replaces the
rule above (the wrapper still samples). BALROG's active-learning queries (``Decision.query``) are the same
mechanism under the policy's own rule and budget (``query_budget`` of the rounds); a shadow call adds to
them, never replaces them, and never names a model they already query.

``shadow_usd_per_day`` caps the shadow spend over any 24 hours; the caller enforces it (it holds the clock
and the ledger: app/routing/shadow.py), the policy only carries it in its config.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from routers.base import (
    Context,
    Decision,
    KeyedRng,
    Observation,
    Policy,
    RngSource,
    argmax_random_tie,
    candidate_arms,
    decision_rng,
    rng_from_state,
    rng_state,
)
from routers.conservative import Conservative
from routers.hyperparameters import Fraction, Hyperparameters, NonNegative
from routers.priors import hoeffding_bounds
from routers.wrapper import PolicyWrapper, layers

SHADOW_K = 1  # shadow models per sampled decision
LOG_TERM = math.log(1.0 / 0.01)  # L = ln(1 / delta) of the wrapper's own per-model intervals

Bounds = tuple[float, float]


class ShadowHyperparameters(Hyperparameters):
    """The shadow wrapper's keys (module docstring); ``shadow`` > 0 or a ``shadow_usd_per_day`` applies it."""

    shadow: Fraction | None = Field(
        None, description="S: the fraction of decisions that also call one shadow model; null or 0: none"
    )
    shadow_usd_per_day: NonNegative | None = Field(
        None,
        description="the most USD the shadow calls may spend over any 24 hours (enforced by the gateway)",
    )


SHADOW_KEYS: tuple[str, ...] = tuple(ShadowHyperparameters.model_fields)


def shadow_draw(seed: int, key: int | str) -> float:
    """u in [0, 1) of a keyed decision: its BLAKE2b digest's first 64 bits over 2^64 (module docstring)."""
    digest = hashlib.blake2b(f"{seed}:{key}:shadow".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


class Shadow(PolicyWrapper):
    """The wrapper of the module docstring; ``name`` is the inner policy's."""

    key: ClassVar[str] = "shadow"

    def __init__(self, inner: Policy, **settings: Any) -> None:
        super().__init__(inner, "shadow / shadow_usd_per_day")
        p = ShadowHyperparameters.parse(settings)
        self.rate = float(p.shadow or 0.0)
        self.usd_per_day = p.shadow_usd_per_day
        self.settings = p.config()
        self.seed = int(next((s.seed for s in layers(inner) if getattr(s, "seed", None) is not None), 0))
        self.rng = decision_rng(self.seed, "shadow")  # unkeyed decisions only
        self.seen: dict[str, list[float]] = {}  # arm -> [rewards folded (any kind), their sum]
        self.reward_range = [0.0, 1.0]
        self.shadow_calls = 0  # shadow observations folded
        self.shadow_spent = 0.0  # their cost

    # --- select ------------------------------------------------------------------------------------------

    def draw(self, context: Context) -> tuple[float, RngSource]:
        """(u_t, the generator of this decision's ties) of the module docstring."""
        keyed = context.rng
        key = keyed.key if isinstance(keyed, KeyedRng) else context.decision_key
        if key is None:
            return float(self.rng.random()), self.rng
        return shadow_draw(self.seed, key), KeyedRng(self.seed, f"{key}:shadow")

    def select(self, context: Context) -> Decision:
        """The wrapped policy's decision, with ``shadow`` set on a sampled one (module docstring)."""
        decision = self.inner.select(context)
        if not decision.arms or self.rate <= 0.0:
            return decision
        u, ties = self.draw(context)
        sampled = u < self.rate
        chosen: list[str] = []
        if sampled:
            own = next((p.shadow_choice for p in layers(self.inner) if hasattr(p, "shadow_choice")), None)
            chosen = (
                own(context, decision, SHADOW_K) if own is not None else self.choose(context, decision, ties)
            )
        decision.shadow = [*decision.shadow, *(a for a in chosen if a not in decision.shadow)]
        decision.info = {**decision.info, "shadow_sampled": sampled}
        return decision

    def choose(self, context: Context, decision: Decision, rng: RngSource) -> list[str]:
        """The eligible candidate of widest evidence interval, [] when none (module docstring)."""
        excluded = {*decision.arms, *decision.query, *decision.shadow}
        known = candidate_arms(self.inner.arms, context)
        candidates = [a for a in known if a not in excluded]
        if not candidates:
            return []
        floor = self._floor(context, known)
        reference = floor[0].incumbent_for(context) if floor is not None else decision.arms[0]
        assert reference is not None
        costs = context.costs or {}
        if floor is not None and floor[0].objective == "savings" and reference in costs:
            # the savings choice never serves a model dearer than a_0: evidence about one changes nothing
            candidates = [
                a for a in candidates if a == reference or costs.get(a, math.inf) < costs[reference]
            ]
            if not candidates:
                return []
        bounds = self.bounds(context, decision, [*candidates, reference], floor)
        lcb0 = bounds[reference][0]
        eligible = [a for a in candidates if bounds[a][1] >= lcb0]
        if floor is not None and costs:
            conservative, alpha = floor
            bar = (1.0 - alpha) * conservative.estimate(reference, context.embedding)
            price0 = costs.get(reference, -math.inf)
            eligible += [
                a
                for a in candidates
                if a not in eligible and costs.get(a, math.inf) < price0 and bounds[a][1] >= bar
            ]
        if not eligible:
            return []
        widths = np.array([bounds[a][1] - bounds[a][0] for a in eligible])
        widths = np.where(np.isnan(widths), math.inf, widths)  # inf - inf: an unseen arm
        return [eligible[argmax_random_tie(widths, rng)]]

    def _floor(self, context: Context, known: Sequence[str]) -> tuple[Conservative, float] | None:
        """(the ``Conservative`` layer, its alpha) where it checks this decision against an incumbent."""
        conservative = next((p for p in layers(self.inner) if isinstance(p, Conservative)), None)
        if conservative is None:
            return None
        incumbent = conservative.incumbent_for(context)
        return (conservative, conservative.alpha) if incumbent in known else None

    def bounds(
        self,
        context: Context,
        decision: Decision,
        arms: Sequence[str],
        floor: tuple[Conservative, float] | None = None,
    ) -> dict[str, Bounds]:
        """[LCB_a(x), UCB_a(x)] for ``arms``, from the first source of the module docstring that has them."""
        conservative = floor[0] if floor is not None else None
        if conservative is None:
            conservative = next((p for p in layers(self.inner) if isinstance(p, Conservative)), None)
        if conservative is not None:
            return conservative.evidence_bounds(context, arms)
        scores = decision.scores
        if all("estimate" in scores.get(a, {}) and "bonus" in scores.get(a, {}) for a in arms):
            return {
                a: (scores[a]["estimate"] - scores[a]["bonus"], scores[a]["estimate"] + scores[a]["bonus"])
                for a in arms
            }
        low, high = self.reward_range
        found = {a: self.seen.get(a, [0.0, 0.0]) for a in arms}
        return {a: hoeffding_bounds(n, total, LOG_TERM, low, high) for a, (n, total) in found.items()}

    # --- learning ----------------------------------------------------------------------------------------

    def _fold(self, observation: Observation) -> None:
        """Fold the reward (any kind) into the per-model sums and the range; count a shadow call."""
        if observation.kind == "shadow":
            self.shadow_calls += 1
            self.shadow_spent += float(observation.cost or 0.0)
        if observation.reward is None:
            return
        r = float(observation.reward)
        seen = self.seen.setdefault(observation.arm, [0.0, 0.0])
        seen[0] += 1.0
        seen[1] += r
        self.reward_range = [min(self.reward_range[0], r), max(self.reward_range[1], r)]

    def _state(self) -> dict[str, Any]:
        return {
            "seen": {a: list(s) for a, s in self.seen.items()},
            "reward_range": list(self.reward_range),
            "shadow_calls": self.shadow_calls,
            "shadow_spent": self.shadow_spent,
            "rng": rng_state(self.rng),
        }

    def _load(self, state: Mapping[str, Any]) -> None:
        self.seen = {a: [float(v) for v in s] for a, s in dict(state.get("seen", {})).items()}
        self.reward_range = [float(v) for v in state.get("reward_range", (0.0, 1.0))]
        self.shadow_calls = int(state.get("shadow_calls", 0))
        self.shadow_spent = float(state.get("shadow_spent", 0.0))
        if state.get("rng") is not None:
            self.rng = rng_from_state(state["rng"])
