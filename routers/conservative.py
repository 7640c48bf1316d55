"""Safe exploration against an incumbent model, and savings at a guaranteed quality: a composition wrapper.

``Conservative(inner, incumbent, max_loss)`` keeps the router's reward at or above (1 - alpha) times what
the incumbent a_0 (the model the team would call without routing) earns on the same prompts, and prices
every candidate round by the evidence about it: the conservative condition of Kazerouni, Ghavamzadeh,
Abbasi-Yadkori and Van Roy 2017 ("Conservative Contextual Linear Bandits", NeurIPS, eq. (6)-(7): the
unknown rewards of the candidate and of the default replaced by their lower and upper confidence bounds),
after Wu, Shariff, Lattimore and Szepesvari 2016 ("Conservative Bandits", ICML, Sec. 3 and 5).

Notation, over the ``bandit`` rounds folded so far (the rounds whose answer the client was served): R_0
is the reward of the rounds that played a_0, S the other rounds and R_S their reward (realised: the router
has been paid them). Rewards lie in [r_min, r_max] (``reward_min``, ``reward_max``), D = r_max - r_min,
L = ln(1 / delta).

Evidence about a model a (``routers.priors``): every rewarded observation of a, of every kind (played
rounds, BALROG queries, cascade steps, ``offline`` log rows), plus its declared prior as w_a
pseudo-observations, gives n_a and mean_a and the per-model Hoeffding interval [LCB_a, UCB_a]
(``routers.priors.hoeffding_bounds``). Where the wrapped policy stores the prompts it learned from
(kNN-UCB, BALROG: ``neighbourhood``) and a holds at least k = ``evidence_k`` of them (default 64), the
interval is per context, Hoeffding's on the rewards of a at the k stored prompts nearest x:

    mean_a(x) = (1/k) sum of a's rewards at N_k(x)
    LCB_a(x), UCB_a(x) = mean_a(x) -/+ D sqrt(L / (2 k))                clipped to [r_min, r_max]

N_k(x) is a neighbourhood of the floor's own size, not the wrapped policy's exploration choice of k
(kNN-UCB's eq. 5 picks k = 1 on a warm start's first rounds: an interval as wide as the reward range).
k trades width for locality: a larger k narrows the interval and averages over prompts further from x.
Otherwise (a policy that stores no prompts, LinUCB, greedy, ...; a model with fewer than k stored
prompts) the per-model interval (the context-free form of Wu et al.). The prior enters the per-model
interval only. Only ``bandit`` rounds enter R_0, R_S and S; the other kinds are evidence only.

The slack banked so far, with the incumbent's unseen reward on S bounded by its upper bounds:

    B = R_S + alpha R_0 - (1 - alpha) C_S       C_S = sum over i in S of UCB_0(x_i)

where UCB_0(x_i) is the incumbent's per-context upper bound at x_i when its neighbourhood gives one at fold
time (a named incumbent only), else the per-model UCB_0. The check for
this round's candidate a != a_0 (Kazerouni et al.'s eq. (7) with B for the rounds already played) prices
the round at its gain, on this prompt or on average, whichever the evidence shows larger:

    g_a(x) = max(LCB_a(x) - (1 - alpha) UCB_0(x),  LCB_a - (1 - alpha) UCB_0)

(the per-context form is Kazerouni et al.'s, the per-model one Wu et al.'s context-free form; each holds
at confidence delta per side, so the two together at 2 delta):

    margin(a) = B + g_a(x)                                        if g_a(x) >= 0  (a proven round)
    margin(a) = B + g_a(x) - (1 - alpha) D sqrt(|S| L / 2)        otherwise       (an exploratory one)
    margin(a_0) = B

and a is played iff margin(a) >= 0, else a_0 (``Decision.info["incumbent_forced"] = True``). A proven
round adds slack in expectation, so the evidence alone lets it through; an exploratory round spends slack,
and only slack that also covers the realised deviation of the incumbent's reward on the |S| rounds already
off it (Hoeffding for a sum) may pay for it, so that exploration is held to the realised floor, not only to
the expected one (the first exploration needs only (1 - alpha) UCB_0 - LCB_a of slack).

The guarantee. Let E be the event that every confidence bound the check used held (each Hoeffding side
fails with probability <= delta). On E, at every round t, with mu_0(x) the incumbent's expected reward at
x and mu_{a_t}(x_t) this round's:

    R_S + R_0 + mu_{a_t}(x_t) >= (1 - alpha) (sum_{i in S} mu_0(x_i) + R_0 + mu_0(x_t))

the router's paid reward plus this round's expected reward is at least (1 - alpha) times the incumbent's
expected reward on the same prompts, where mu_a(x) reads as the evidence it was bounded with: at a
per-context bound, a's expected reward averaged over N_k(x) (the rewards there are independent given
the stored prompts, so Hoeffding bounds that average; it is mu_a(x) itself as far as mu_a varies little
within k neighbours); at a per-model bound, a's mean over prompts (the context-free form of Wu et al.). It bounds expected rewards, as
Kazerouni et al.'s does; the realised sums deviate from them by O(sqrt(t)) (``bench run`` reports the
realised ratio, ``min_floor_ratio``).
Pricing the round at its lower bound rather than at r_min is what lets the evidence pay: a model that the
logs or a prior show to beat the incumbent (LCB_a(x) >= (1 - alpha) UCB_0(x)) is played from the first
round, with no slack banked; a model nothing is known of (LCB = r_min) waits for alpha R_0 to cover
(1 - alpha) UCB_0 - r_min (about 1 / alpha rounds of an incumbent that earns its UCB), and each later
exploration for the deviation term as well.

Objectives (``objective``):

- ``reward`` (default): the wrapped policy's choice, if margin(choice) >= 0.
- ``savings``: minimise cost subject to the floor. Among the candidates priced below a_0 in
  ``Context.costs``, the cheapest a with margin(a) >= 0 whose evidence allows that it is good enough for
  this prompt: UCB_a(x) >= (1 - alpha) max_b mean_b(x) over a_0 and the candidates cheaper than it
  (mean_b(x): the mean behind b's interval, r_max for a model without evidence), within alpha of the most
  the evidence shows any of them earns here (so a poor incumbent does not make every cheap model good
  enough, and a model not yet tried keeps the bar high until it is); a_0 when none is. A proven model (g_a(x) >= 0) costs no slack; one still uncertain is tried
  where B pays for it; one the evidence rules out is not tried. The wrapped policy scores the prompt (its
  bounds above) and learns from every round; its own choice is not used. Without prices the decision is
  the ``reward`` one.

Incumbent (``incumbent``, ``incumbent_by``): a named model, else per decision the candidate with the
highest price in ``Context.costs`` (``incumbent_by="price"``: "call the dearest model" is what a team does
without routing) or with the highest per-model lower bound LCB_a (``"evidence"``: the model the evidence
shows best so far; no check while no candidate has evidence). A decision without prices (price rule), or
whose incumbent is not a candidate, is not checked (``info["conservative"]`` says why).

Conflicts with a cost target (``Conservative(CostAware(inner, cost_target))``): the floor wins. When it
makes this decision dearer than the cost-aware choice while the pacer's spend per request is above its
target, ``info["floor_over_target"]`` is True and ``info["spend_per_request"]`` / ``info["cost_target"]``
say by how much (on every decision of a router with a target; False when there is no conflict).

Replica consistency: every quantity above is folded from observations (``update``); ``select`` only reads
them. Decisions still in flight (made, not yet folded) are not counted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal, Self

import numpy as np
from pydantic import Field, model_validator

from routers.base import Context, Decision, Observation, Policy, candidate_arms
from routers.hyperparameters import ArmName, Finite, Hyperparameters, PositiveCount
from routers.priors import Prior, hoeffding_bounds, parse_priors, with_prior
from routers.wrapper import PolicyWrapper, layers

Bounds = tuple[float, float]


EVIDENCE_K = 64  # evidence_k's default: docs/results/savings.md, "The evidence neighbourhood"


class ConservativeHyperparameters(Hyperparameters):
    """The conservative wrapper's keys (module docstring); any of them set applies the wrapper."""

    incumbent: ArmName | None = Field(None, description="a_0; null: chosen per decision by incumbent_by")
    incumbent_by: Literal["price", "evidence"] | None = Field(
        None, description="without incumbent: the dearest candidate, or the best by evidence; null: price"
    )
    max_loss: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] | None = Field(
        None, description="alpha: the tolerated fraction of the incumbent's reward; null: 0.02"
    )
    objective: Literal["reward", "savings"] | None = Field(
        None, description="reward: the policy's choice under the floor; savings: the cheapest safe model"
    )
    delta: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = Field(0.01, description="confidence")
    evidence_k: PositiveCount = Field(
        EVIDENCE_K, description="k: the stored prompts nearest this one whose rewards bound a model here"
    )
    reward_min: Finite = 0.0
    reward_max: Finite = 1.0

    @model_validator(mode="after")
    def _range(self) -> Self:
        if not self.reward_min < self.reward_max:
            raise ValueError(f"reward_min must be < reward_max, got {self.reward_min!r}, {self.reward_max!r}")
        return self


CONSERVATIVE_KEYS: tuple[str, ...] = tuple(ConservativeHyperparameters.model_fields)
DEFAULTS = {"max_loss": 0.02, "incumbent_by": "price", "objective": "reward"}


class Conservative(PolicyWrapper):
    """The wrapper of the module docstring; ``name`` is the inner policy's."""

    key: ClassVar[str] = "conservative"

    def __init__(self, inner: Policy, priors: Mapping[str, Any] | None = None, **settings: Any) -> None:
        super().__init__(inner, "incumbent / max_loss")
        p = ConservativeHyperparameters.parse(settings)
        p = p.model_copy(update={k: v for k, v in DEFAULTS.items() if getattr(p, k) is None})
        self.incumbent = p.incumbent
        self.incumbent_by = str(p.incumbent_by)
        self.objective = str(p.objective)
        self.alpha = float(p.max_loss or 0.0)
        self.log_term = math.log(1.0 / p.delta)
        self.evidence_k = int(p.evidence_k)
        self.reward_min, self.reward_max = p.reward_min, p.reward_max
        self.priors: dict[str, Prior] = parse_priors(priors)
        self.settings = p.config()
        if self.priors:
            self.settings["priors"] = {a: dict(v) for a, v in self.priors.items()}
        self.played: dict[str, list[float]] = {}  # arm -> [bandit rounds played, their reward]
        self.seen: dict[str, list[float]] = {}  # arm -> [rewards observed (any kind), their sum]
        # rounds off the named incumbent charged at its per-context bound: [rounds, sum of UCB_0(x_i)]
        self.charged: list[float] = [0.0, 0.0]
        # during one select: the prompt's embedding and each arm's neighbourhood of it (``neighbourhood``)
        self._memo: tuple[np.ndarray, dict[str, tuple[float, int] | None]] | None = None

    # --- evidence ----------------------------------------------------------------------------------------

    def model_bounds(self, arm: str) -> Bounds:
        """(LCB_a, UCB_a): the per-model Hoeffding interval from every observation and the prior."""
        count, total = self.seen.get(arm, (0.0, 0.0))
        n, s = with_prior(self.priors, arm, count, total)
        return hoeffding_bounds(n, s, self.log_term, self.reward_min, self.reward_max)

    def context_bounds(self, arm: str, embedding: np.ndarray | None) -> Bounds:
        """(LCB_a(x), UCB_a(x)): the Hoeffding interval of the arm's rewards among the ``evidence_k``
        stored prompts nearest x (``neighbourhood``) where the wrapped policy stores prompts and the arm
        holds at least that many; else the per-model one."""
        found = self.neighbourhood(arm, embedding)
        if found is None:
            return self.model_bounds(arm)
        mean, count = found
        return hoeffding_bounds(count, mean * count, self.log_term, self.reward_min, self.reward_max)

    def evidence_bounds(self, context: Context, arms: Sequence[str] | None = None) -> dict[str, Bounds]:
        """Read-only: {a: (LCB_a(x), UCB_a(x))} (``context_bounds``) for ``arms``, by default the candidates
        of ``context``; each arm's neighbourhood of x searched once (the shadow wrapper's evidence)."""
        chosen = candidate_arms(self.inner.arms, context) if arms is None else list(arms)
        x = context.embedding
        owns_memo = self._memo is None and x is not None
        if owns_memo:
            self._memo = (x, {})
        try:
            return {a: self.context_bounds(a, x) for a in chosen}
        finally:
            if owns_memo:
                self._memo = None

    def _reader(self) -> Any:
        """The first wrapped policy's ``neighbourhood(arm, embedding, k)`` (kNN-UCB, BALROG), else None."""
        return next((p.neighbourhood for p in layers(self.inner) if hasattr(p, "neighbourhood")), None)

    def estimate(self, arm: str, embedding: np.ndarray | None) -> float:
        """mean_a(x): the mean of the rewards behind ``context_bounds`` (the neighbourhood's, else the
        per-model mean with the prior); r_max for a model without evidence (it may earn anything)."""
        found = self.neighbourhood(arm, embedding)
        if found is not None:
            return found[0]
        count, total = with_prior(self.priors, arm, *self.seen.get(arm, (0.0, 0.0)))
        return total / count if count > 0 else self.reward_max

    def neighbourhood(self, arm: str, embedding: np.ndarray | None) -> tuple[float, int] | None:
        """(mean, k) of the arm's rewards among the k = ``evidence_k`` stored prompts nearest the
        embedding, from the first wrapped policy that stores prompts (kNN-UCB, BALROG); None without
        one, without an embedding, or while the arm holds fewer than k prompts."""
        if embedding is None:
            return None
        memo = self._memo if self._memo is not None and self._memo[0] is embedding else None
        if memo is not None and arm in memo[1]:
            return memo[1][arm]
        reader = self._reader()
        found = reader(arm, embedding, self.evidence_k) if reader is not None else None
        result = None if found is None or found[1] < self.evidence_k else (float(found[0]), int(found[1]))
        if memo is not None:
            memo[1][arm] = result
        return result

    def incumbent_for(self, context: Context) -> str | None:
        """a_0: the configured incumbent, else by ``incumbent_by`` among the candidates (module doc)."""
        if self.incumbent is not None:
            return self.incumbent
        candidates = candidate_arms(self.inner.arms, context)
        if self.incumbent_by == "evidence":
            known = [a for a in candidates if self._has_evidence(a)]
            return max(known, key=lambda a: self.model_bounds(a)[0]) if known else None
        if not context.costs:
            return None
        priced = [a for a in candidates if a in context.costs]
        return max(priced, key=lambda a: context.costs[a]) if priced else None  # type: ignore[index]

    def _has_evidence(self, arm: str) -> bool:
        return self.seen.get(arm, (0.0, 0.0))[0] > 0 or arm in self.priors

    # --- the check ---------------------------------------------------------------------------------------

    def rounds(self, incumbent: str) -> tuple[int, int]:
        """(rounds that played a_0, |S|): the folded ``bandit`` rounds on and off the incumbent."""
        return int(self.played.get(incumbent, (0.0, 0.0))[0]), self._sums(incumbent)[1]

    def _sums(self, incumbent: str) -> tuple[float, int, float]:
        """(R_0, |S|, R_S) over the folded rounds."""
        others = [s for a, s in self.played.items() if a != incumbent]
        r0 = self.played.get(incumbent, (0.0, 0.0))[1]
        return r0, int(sum(s[0] for s in others)), sum(s[1] for s in others)

    def charge(self, incumbent: str, rounds_s: int) -> float:
        """C_S: the incumbent's upper bound summed over the rounds in S (per-context where charged)."""
        charged_rounds, charged_sum = self.charged if incumbent == self.incumbent else (0.0, 0.0)
        return charged_sum + max(rounds_s - charged_rounds, 0.0) * self.model_bounds(incumbent)[1]

    def floor_margin(self, incumbent: str) -> float:
        """B = R_S + alpha R_0 - (1 - alpha) C_S: the floor's slack over the rounds so far."""
        r0, rounds_s, reward_s = self._sums(incumbent)
        return reward_s + self.alpha * r0 - (1.0 - self.alpha) * self.charge(incumbent, rounds_s)

    def margin(self, incumbent: str, arm: str, embedding: np.ndarray | None = None) -> float:
        """margin(a) of the module docstring: >= 0 iff playing ``arm`` keeps the floor."""
        banked = self.floor_margin(incumbent)
        if arm == incumbent:
            return banked
        gain = self.gain(incumbent, arm, embedding)
        if gain >= 0:
            return banked + gain
        rounds_s = self._sums(incumbent)[1]
        spread = self.reward_max - self.reward_min
        return banked + gain - (1.0 - self.alpha) * spread * math.sqrt(rounds_s * self.log_term / 2.0)

    def gain(self, incumbent: str, arm: str, embedding: np.ndarray | None = None) -> float:
        """g_a(x) = max(LCB_a(x) - (1 - alpha) UCB_0(x), LCB_a - (1 - alpha) UCB_0): this prompt's gain
        or the models' gain on average, whichever the evidence shows larger (module docstring)."""
        alpha = self.alpha
        model = self.model_bounds(arm)[0] - (1.0 - alpha) * self.model_bounds(incumbent)[1]
        if embedding is None:
            return model
        here = (
            self.context_bounds(arm, embedding)[0]
            - (1.0 - alpha) * self.context_bounds(incumbent, embedding)[1]
        )
        return max(here, model)

    def explore_margin(self, incumbent: str) -> float:
        """The largest margin(a), a != a_0, at the per-model bounds: >= 0 iff, on the evidence so far,
        the next decision may leave the incumbent somewhere (-inf without another arm)."""
        return max((self.margin(incumbent, a) for a in self.inner.arms if a != incumbent), default=-math.inf)

    # --- select ------------------------------------------------------------------------------------------

    def select(self, context: Context) -> Decision:
        """The inner choice (``reward``) or the cheapest safe model (``savings``) if margin >= 0, else a_0.
        Each arm's neighbourhood of this prompt is searched once per decision, however many bounds read it."""
        self._memo = (context.embedding, {}) if context.embedding is not None else None
        try:
            return self._select(context)
        finally:
            self._memo = None

    def _select(self, context: Context) -> Decision:
        decision = self.inner.select(context)
        if not decision.arms:
            return decision
        candidates = candidate_arms(self.inner.arms, context)
        incumbent = self.incumbent_for(context)
        if incumbent is None or incumbent not in candidates:
            why = self._unchecked(incumbent)
            decision.info = {**decision.info, "conservative": why, "incumbent_forced": False}
            return decision
        proposed = decision.arms[0]
        savings = self.objective == "savings" and self._priced(context, [incumbent])
        if savings:
            chosen = self._cheapest_safe(incumbent, candidates, context)
        else:
            chosen = proposed if self.margin(incumbent, proposed, context.embedding) >= 0 else incumbent
        info = {
            **decision.info,
            "conservative_margin": self.margin(incumbent, chosen if savings else proposed, context.embedding),
            "incumbent": incumbent,
            "incumbent_forced": chosen == incumbent and proposed != incumbent and not savings,
            "objective": "savings" if savings else "reward",
            **self._conflict(context, proposed, chosen),
        }
        if chosen == proposed:
            decision.info = info
            return decision
        return Decision(
            arms=[chosen],
            scores=decision.scores,
            mode=decision.mode,
            query=[a for a in decision.query if a != chosen],
            info={**info, "proposed": proposed},
        )

    def _unchecked(self, incumbent: str | None) -> str:
        if incumbent is not None:
            return "incumbent not a candidate"
        return (
            "no incumbent (no evidence yet)"
            if self.incumbent_by == "evidence"
            else "no incumbent (no prices)"
        )

    @staticmethod
    def _priced(context: Context, arms: Sequence[str]) -> bool:
        return context.costs is not None and all(a in context.costs for a in arms)

    def _cheapest_safe(self, incumbent: str, candidates: Sequence[str], context: Context) -> str:
        """The savings choice of the module docstring (ties in price: the policy's arm order)."""
        costs = context.costs or {}
        price0 = costs[incumbent]
        cheaper = sorted(
            (a for a in candidates if a != incumbent and a in costs and costs[a] < price0),
            key=lambda a: costs[a],
        )
        x = context.embedding
        best = max(self.estimate(a, x) for a in [incumbent, *cheaper])
        for arm in cheaper:
            plausible = self.context_bounds(arm, x)[1] >= (1.0 - self.alpha) * best
            if plausible and self.margin(incumbent, arm, x) >= 0:
                return arm
        return incumbent

    def _conflict(self, context: Context, proposed: str, chosen: str) -> dict[str, Any]:
        """``floor_over_target`` and the pacer's figures, for a router with a cost target (module doc)."""
        pacer = next(
            (getattr(layer, "pacer", None) for layer in layers(self.inner) if hasattr(layer, "pacer")), None
        )
        if pacer is None:
            return {}
        spend = pacer.spend_per_request
        costs = context.costs or {}
        dearer = chosen != proposed and costs.get(chosen, 0.0) > costs.get(proposed, math.inf)
        over = spend is not None and spend > pacer.target
        return {
            "floor_over_target": bool(dearer and over),
            "spend_per_request": spend,
            "cost_target": pacer.target,
        }

    # --- learning ----------------------------------------------------------------------------------------

    def _fold(self, observation: Observation) -> None:
        """Fold the reward into the evidence (any kind) and, for a ``bandit`` round, into the played sums
        (and C_S's per-context charge, before the inner policy learns this round)."""
        if observation.reward is None:
            return
        r = float(observation.reward)  # a removed arm's rounds were still earned: no arm filter
        seen = self.seen.setdefault(observation.arm, [0.0, 0.0])
        seen[0] += 1.0
        seen[1] += r
        if observation.kind != "bandit":
            return
        played = self.played.setdefault(observation.arm, [0.0, 0.0])
        played[0] += 1.0
        played[1] += r
        if self.incumbent is not None and observation.arm != self.incumbent:
            self._charge_round(self.incumbent, observation)

    def _charge_round(self, incumbent: str, observation: Observation) -> None:
        """C_S's term for this round: UCB_0(x) where the incumbent's neighbourhood of x bounds it at fold
        time (``neighbourhood``), else nothing here (the per-model UCB_0 is charged at select)."""
        if self.neighbourhood(incumbent, observation.embedding) is None:
            return
        self.charged[0] += 1.0
        self.charged[1] += self.context_bounds(incumbent, observation.embedding)[1]

    def _state(self) -> dict[str, Any]:
        return {
            "played": {a: list(s) for a, s in self.played.items()},
            "seen": {a: list(s) for a, s in self.seen.items()},
            "charged": list(self.charged),
        }

    def _load(self, state: Mapping[str, Any]) -> None:
        self.played = {a: [float(v) for v in s] for a, s in dict(state.get("played", {})).items()}
        self.seen = {a: [float(v) for v in s] for a, s in dict(state.get("seen", {})).items()}
        self.charged = [float(v) for v in state.get("charged", (0.0, 0.0))]
