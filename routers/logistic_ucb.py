"""PromptWise: a cost-aware adaptive cascade with logistic UCB (Hu et al., 2025, Algorithm 1).

Per arm a, a disjoint logistic model of the success probability (``routers.logistic_fit``; the RBF kernel
variant PromptWise-RBF in ``routers.kernel_logistic``). For a prompt x with per-call costs c_a (USD) and the
cost weight lambda (``cost_weight``, reward units per USD):

    q_a = sigma( x^T theta_a + alpha * ||x||_{V_a^{-1}} ),   V_a = gamma I + sum_s x_s x_s^T        (Eq. 6)
    stop                    if max_a (q_a - lambda c_a) <= 0, or tau_max calls were made   (Eq. 2, Alg. 1)
    call  argmin_a c_a / q_a   otherwise                                               (Eq. 2, Alg. 1 l. 12)

The call is chosen by the ratio c_a / q_a itself, the optimistic expected cost per success, for every
lambda: ties go to the larger q_a, remaining ties at random. For lambda > 0 this is the same order as
argmax_a (1 - lambda c_a / q_a), the utility of Eq. 3 that ``Decision.scores`` reports as ``index``; at
lambda = 0 that index is 1 for every arm and would order nothing, while c_a / q_a still calls the
cheapest model per expected success first (with equal prices: the likeliest to succeed).

The decision is adaptive: the caller calls ``arms[0]``, reports the outcome (kind ``cascade-step`` or
``bandit``), and calls ``select`` again with the called models in ``Context.tried``. The failure is folded
into the arm's model at the same prompt before the next decision (the inner-step update of Alg. 1), which
lowers that arm's q_a and usually escalates to a stronger model. An empty ``arms`` means stop (also
possible before the first call: the prompt is declined).

A judge that can be wrong (``judge_tpr``, ``judge_tnr``: its measured true-positive and true-negative
rates, 1.0 = trust the verdict). An observed reward is then a judge's verdict v, not the outcome. With p the
arm's current estimate sigma(x^T theta_a) at the prompt (without the bonus), Bayes' rule gives

    P(success | v = 1) = TPR p / (TPR p + (1 - TNR)(1 - p))
    P(success | v = 0) = (1 - TPR) p / ((1 - TPR) p + TNR (1 - p))

and the update folds that posterior as the (soft) label of Eq. 4 in place of v: a graded v in [0, 1] is
read as the probability of a pass, r = v P(success | 1) + (1 - v) P(success | 0) (``judged_success``).
So q_a estimates the success probability of the answers, not the judge's pass rate, and the stop of
Eq. 2 (max_a q_a - lambda c_a <= 0) and the choice argmin c_a / q_a read the corrected estimate. At
TPR = TNR = 1 the posterior is v itself. A verdict of a judge that cannot give it (a zero denominator) says
nothing: r = p. A step's record still ends on the verdict (v >= 1), as the caller stops on it; warm-start
logs (``offline``) are labels, folded uncorrected.

Exploration phase (Alg. 1 lines 1-5): while a candidate arm has fewer than ``tau_exp`` observations, a step
calls one uniformly chosen such arm once and stops. ``per_step_update=True`` is Algorithm 2: estimates stay
frozen during a step and the step's observations are folded when it ends.

Per-decision state. A step of the cascade is one decision (``Context.decision_key`` /
``Observation.decision_key``), and what the policy remembers about an open step (whether its first call
was an exploration pull; under Alg. 2 its observations not folded yet) is kept per key and derived from
that decision's folded observations only, so interleaved cascades do not disturb each other and every
replica folding the same event log holds the same state (``state_dict`` includes it). A key's first
observation was an exploration pull when its arm had fewer than ``tau_exp`` observations (folded and
pending) when it was folded. A key's record ends, its pending observations folded, on a success, at its
``max_calls``-th observation, once it has called every arm (without ``allow_repeat``), or when it is
the least recently updated of more than ``max_open_decisions`` open records (LRU; an exploration step's
record is a flag kept until this bound evicts it, so a late re-select of that decision still stops). A
cascade that the policy itself stops (no arm worth its cost) leaves no event, so under Alg. 2 its
observations wait for that LRU bound. Unkeyed callers (key None) share one slot, which a select with
nothing ``tried`` (a new prompt) closes and opens afresh (unkeyed feedback with no slot open is folded
at once): the single-client behaviour, not replica-safe.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import Field
from scipy.special import expit

from routers.base import (
    Context,
    Decision,
    Observation,
    RngSource,
    argmax_random_tie,
    candidate_arms,
    require,
    resolve_rng,
)
from routers.hyperparameters import (
    DIM_DESCRIPTION,
    Count,
    Dim,
    Fraction,
    Hyperparameters,
    NonNegative,
    Positive,
    PositiveCount,
    Prices,
)
from routers.kernel_logistic import RBFLogisticArm
from routers.logistic_fit import LinearLogisticArm
from routers.policy_base import PolicyBase
from routers.prices import call_costs

ArmModel = LinearLogisticArm | RBFLogisticArm
DECLINED = "no arm worth its cost"  # ``Decision.info["reason"]`` of a stop by Eq. 2's rule


class CascadeHyperparameters(Hyperparameters):
    """The cascade settings shared by PromptWise and the cascade baselines."""

    cost_weight: NonNegative = Field(0.05, description="lambda: reward units per USD")
    max_calls: PositiveCount = Field(5, description="tau_max: calls per prompt")
    prices: Prices = Field(
        default_factory=dict, description="{model: USD per call} when Context.costs lacks one"
    )
    allow_repeat: bool = Field(False, description="may call a model already tried for the prompt")


def judged_success(p: float, verdict: float, tpr: float, tnr: float) -> float:
    """P(success | verdict) by Bayes' rule for a judge of true-positive rate ``tpr`` and true-negative rate
    ``tnr`` and a prior success probability ``p`` (module doc); a graded verdict in [0, 1] mixes the two
    posteriors. A verdict the judge cannot give (zero denominator) leaves ``p``."""

    def posterior(hit: float, miss: float) -> float:
        evidence = hit * p + miss * (1.0 - p)
        return hit * p / evidence if evidence > 0 else p

    passed = posterior(tpr, 1.0 - tnr)
    failed = posterior(1.0 - tpr, tnr)
    return verdict * passed + (1.0 - verdict) * failed


def call_budget(context: Context, default: int) -> int:
    """tau_max: ``Context.constraints["max_calls"]`` when given, else the policy's ``max_calls``."""
    value = context.constraints.get("max_calls", default)
    require(
        isinstance(value, int) and value >= 0, f"constraints.max_calls must be an int >= 0, got {value!r}"
    )
    return int(value)


def cheapest_per_success(cost: np.ndarray, q: np.ndarray, rng: RngSource) -> int:
    """argmin_a c_a / q_a (Eq. 2; q_a = 0 counts as an infinite ratio), ties to the larger q_a, then at
    random. Independent of lambda, so lambda = 0 still orders the arms by cost per expected success."""
    positive = q > 0
    ratio = np.full(q.shape, math.inf)
    ratio[positive] = cost[positive] / q[positive]
    best = np.flatnonzero(ratio == np.min(ratio))
    return int(best[argmax_random_tie(q[best], rng)])


@dataclass
class OpenStep:
    """What PromptWise remembers about one decision's cascade step, from its folded observations only."""

    calls: int = 0
    explored: bool = False  # its first call was an exploration pull: the step is over
    arms: set[str] = field(default_factory=set)  # the arms it has called
    pending: list[tuple[str, np.ndarray, float]] = field(default_factory=list)  # Alg. 2: not folded yet


class PromptWiseHyperparameters(CascadeHyperparameters):
    """PromptWise's hyperparameters (see ``PromptWise``)."""

    alpha: NonNegative | None = Field(None, description="UCB weight; null: log(|A| / delta)")
    delta: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = 0.05
    ridge: Positive = Field(1.0, description="gamma of V_a = gamma I + sum x x^T")
    tau_exp: Count = Field(1, description="forced exploration pulls per arm")
    per_step_update: bool = Field(False, description="Algorithm 2: fold a step's observations at its end")
    update: Literal["online", "exact"] = "online"
    refit_growth: Annotated[float, Field(gt=1, allow_inf_nan=False)] = 1.5
    max_history: Count = 20000
    bias: bool = Field(False, description="append a constant feature")
    dim: Dim | None = Field(None, description=DIM_DESCRIPTION)
    kernel: Literal["linear", "rbf"] = "linear"
    bandwidth: Positive = Field(1.0, description="RBF sigma")
    kernel_reg: Positive = Field(1.0, description="RBF alpha_reg")
    max_points: PositiveCount = Field(256, description="RBF points kept per arm")
    scale_rbf_bonus: bool = False
    max_open_decisions: PositiveCount = Field(1024, description="LRU bound on per-decision records")
    judge_tpr: Fraction = Field(1.0, description="the judge's measured true-positive rate (1: trust it)")
    judge_tnr: Fraction = Field(1.0, description="the judge's measured true-negative rate (1: trust it)")


class PromptWise(PolicyBase):
    """PromptWise (Alg. 1) and its variants. Hyperparameters:

    ``cost_weight`` lambda (reward per USD, 0.05 in the paper); ``max_calls`` tau_max (5); ``prices``
    {model: USD per call} used when ``Context.costs`` lacks an arm; ``alpha`` the UCB weight (None:
    log(|A| / delta), recomputed as arms come and go); ``delta`` (0.05); ``ridge`` gamma (1.0);
    ``tau_exp`` forced exploration pulls per arm (1); ``per_step_update`` Alg. 2 (False);
    ``allow_repeat`` may re-call an arm already tried for the prompt (False: the contract's ``tried`` rule;
    the paper allows it); ``update`` "online" (Laplace step + periodic exact refit) or "exact" (refit after
    every observation); ``refit_growth`` (1.5) and ``max_history`` (20000) for the online schedule;
    ``bias`` appends a constant feature, rescaled so ||x|| <= 1 (False, as the paper); ``dim``;
    ``kernel`` "linear" or "rbf" with ``bandwidth`` sigma (1.0), ``kernel_reg`` alpha_reg (1.0),
    ``max_points`` (256) and ``scale_rbf_bonus`` (multiply B(x) by alpha as the public code does; False);
    ``max_open_decisions`` (1024) the LRU bound on per-decision records (see the module doc);
    ``judge_tpr`` / ``judge_tnr`` (1.0) the judge's measured rates, for the Bayes correction of the module
    doc.
    """

    name: ClassVar[str] = "promptwise"
    cost_aware: ClassVar[bool] = True

    hyperparameters: ClassVar[type[Hyperparameters]] = PromptWiseHyperparameters

    def __init__(self, arms: Sequence[str] = (), seed: int | None = 0, **hyperparameters: Any) -> None:
        super().__init__(arms, seed)
        p = self._configure(hyperparameters, PromptWiseHyperparameters)
        # the cascade (Alg. 1)
        self.cost_weight, self.max_calls, self.prices = p.cost_weight, p.max_calls, dict(p.prices)
        self.tau_exp, self.per_step_update, self.allow_repeat = p.tau_exp, p.per_step_update, p.allow_repeat
        self.max_open_decisions = p.max_open_decisions
        # the per-arm models (Eq. 6): UCB, linear fit, RBF kernel
        self.alpha, self.delta, self.ridge, self.bias, self.dim = p.alpha, p.delta, p.ridge, p.bias, p.dim
        self.update_mode, self.refit_growth, self.max_history = p.update, p.refit_growth, p.max_history
        self.kernel, self.bandwidth, self.kernel_reg = p.kernel, p.bandwidth, p.kernel_reg
        self.max_points, self.scale_rbf_bonus = p.max_points, p.scale_rbf_bonus
        self.judge_tpr, self.judge_tnr = p.judge_tpr, p.judge_tnr
        self._models: dict[str, ArmModel] = {}
        # per decision key, least recently updated first
        self._steps: OrderedDict[str | None, OpenStep] = OrderedDict()
        if self.dim is not None:
            for arm in self._arms:
                self._on_add_arm(arm)

    # --- features and per-arm models ------------------------------------------------------------------

    def _features(self, embedding: np.ndarray) -> np.ndarray:
        x = np.asarray(embedding, dtype=np.float64).reshape(-1)
        self._ensure_dim(x)
        return np.append(x, 1.0) / math.sqrt(2.0) if self.bias else x

    def _new_model(self) -> ArmModel:
        assert self.dim is not None
        fdim = self.dim + int(self.bias)
        if self.kernel == "rbf":
            return RBFLogisticArm(fdim, self.kernel_reg, self.bandwidth, self.max_points)
        return LinearLogisticArm(
            fdim, self.ridge, self.update_mode == "exact", self.refit_growth, self.max_history
        )

    def _on_add_arm(self, arm: str) -> None:
        if self.dim is not None and arm not in self._models:
            self._models[arm] = self._new_model()

    def _on_remove_arm(self, arm: str) -> None:
        self._models.pop(arm, None)
        for step in self._steps.values():
            step.pending = [p for p in step.pending if p[0] != arm]

    def current_alpha(self) -> float:
        """alpha = log(|A| / delta) unless set (the paper's experimental value, Sec. 5.1)."""
        if self.alpha is not None:
            return self.alpha
        return math.log(max(len(self._arms), 1) / self.delta)

    def explain(self, arm: str, x: np.ndarray, cost: float) -> dict[str, float]:
        """estimate sigma(x^T theta), bonus alpha ||x||_{V^-1} (logit units),
        q = sigma(logit + bonus) (Eq. 6), gain q - lambda c,
        index 1 - lambda c / q (Eq. 3's utility: a reported score; the choice is argmin c / q, see
        ``cheapest_per_success``)."""
        model = self._models[arm]
        logit, width = model.logit(x)
        alpha = self.current_alpha()
        bonus = width * (alpha if (self.kernel == "linear" or self.scale_rbf_bonus) else 1.0)
        q = float(expit(logit + bonus))
        lc = self.cost_weight * cost
        return {
            "estimate": float(expit(logit)),
            "bonus": bonus,
            "q": q,
            "cost": cost,
            "gain": q - lc,
            "index": 1.0 - lc / q if q > 0 else -math.inf,
            "n": float(model.n),
        }

    # --- the contract ------------------------------------------------------------------------------------

    def select(self, context: Context) -> Decision:
        """One step of the cascade: the next arm to call, or ``arms=[]`` to stop (see the module doc)."""
        x = self._features(context.embedding)
        key = context.decision_key
        if key is None and not context.tried:  # unkeyed: a new prompt ends the previous step
            self._close(None)
            self._steps[None] = OpenStep()
        calls = len(context.tried)
        stop: dict[str, Any] = {"mode": "cascade", "adaptive": True}
        step = self._steps.get(key)
        if calls > 0 and step is not None and step.explored:
            # the exploration phase pulls one arm once per step, then moves on
            return Decision(arms=[], info={"reason": "exploration step done", "calls": calls}, **stop)
        if calls >= call_budget(context, self.max_calls):
            return Decision(arms=[], info={"reason": "max_calls", "calls": calls}, **stop)
        arms = candidate_arms(self._arms, context, self.allow_repeat)
        if not arms:
            return Decision(arms=[], info={"reason": "no candidate arm", "calls": calls}, **stop)
        rng = self._draws(context)
        pending = self._pending_counts()
        unexplored = [a for a in arms if self._models[a].n + pending[a] < self.tau_exp]
        if unexplored and calls == 0:
            chosen = unexplored[int(resolve_rng(rng).integers(len(unexplored)))]
            return Decision(arms=[chosen], info={"phase": "explore", "calls": calls}, **stop)
        costs = call_costs(arms, context, self.prices)
        scores = {a: self.explain(a, x, float(c)) for a, c in zip(arms, costs, strict=True)}
        if max(s["gain"] for s in scores.values()) <= 0:
            return Decision(arms=[], scores=scores, info={"reason": DECLINED, "calls": calls}, **stop)
        cost = np.array([scores[a]["cost"] for a in arms])
        q = np.array([scores[a]["q"] for a in arms])
        chosen = arms[cheapest_per_success(cost, q, rng)]
        return Decision(arms=[chosen], scores=scores, info={"phase": "exploit", "calls": calls}, **stop)

    def _pending_counts(self) -> Counter[str]:
        """Observations per arm held by open Alg. 2 steps (empty without ``per_step_update``)."""
        if not self.per_step_update:
            return Counter()
        return Counter(arm for step in self._steps.values() for arm, _, _ in step.pending)

    def update(self, observation: Observation) -> None:
        """Fold one call's outcome r in [0, 1] (``bandit`` or ``cascade-step``; a ``query`` too) into the
        arm's model at this prompt, and into its decision's record (see the module doc). Under
        ``per_step_update`` it waits for the step to end. An ``offline`` outcome (a warm-start log row)
        belongs to no decision: it goes into the arm's model at once, as does a ``shadow`` answer (no step of
        its decision: the client never saw it). With a judge's rates below 1 the label folded (a logged
        outcome's excepted) is the posterior success probability of the verdict (``judged_success``)."""
        if observation.reward is None or observation.arm not in self._arms:
            return
        arm, key = observation.arm, observation.decision_key
        x = self._features(observation.embedding)
        verdict = r = min(max(float(observation.reward), 0.0), 1.0)
        if observation.kind == "offline":  # a logged outcome: part of no cascade step, folded at once
            self._models[arm].observe(x, r)
            return
        if self.judge_tpr < 1.0 or self.judge_tnr < 1.0:
            prior = float(expit(self._models[arm].logit(x)[0]))
            r = judged_success(prior, verdict, self.judge_tpr, self.judge_tnr)
        if observation.kind == "shadow":  # evidence, no step of the cascade: folded at once
            self._models[arm].observe(x, r)
            return
        step = self._steps.pop(key, None)  # re-inserted last: the most recently updated
        if step is None and key is None:  # unkeyed feedback outside a step opened by a select
            self._models[arm].observe(x, r)
            return
        step = step or OpenStep()
        if step.calls == 0:  # the decision's first call: was it an exploration pull?
            step.explored = self._models[arm].n + self._pending_counts()[arm] < self.tau_exp
        step.calls += 1
        step.arms.add(arm)
        if step.explored or not self.per_step_update:
            self._models[arm].observe(x, r)
        else:
            step.pending.append((arm, x, r))
        self._steps[key] = step
        every_arm = not self.allow_repeat and step.arms.issuperset(self._arms)
        if not step.explored and (verdict >= 1.0 or step.calls >= self.max_calls or every_arm):
            self._close(key)
        while len(self._steps) > self.max_open_decisions:
            self._close(next(iter(self._steps)))

    def _close(self, key: str | None) -> None:
        """End a decision's record: fold its pending observations (Alg. 2) and forget it."""
        step = self._steps.pop(key, None)
        if step is None:
            return
        for arm, x, r in step.pending:
            if arm in self._models:
                self._models[arm].observe(x, r)

    def _state(self) -> dict[str, Any]:
        return {
            "dim": self.dim,
            "models": {a: m.state() for a, m in self._models.items()},
            "steps": [  # least recently updated first
                {
                    "key": key,
                    "calls": step.calls,
                    "explored": step.explored,
                    "arms": sorted(step.arms),
                    "pending": [{"arm": a, "x": x.copy(), "r": r} for a, x, r in step.pending],
                }
                for key, step in self._steps.items()
            ],
        }

    def _load(self, learned: Mapping[str, Any]) -> None:
        if learned.get("dim") is None:
            return
        self.dim = int(learned["dim"])
        self.config["dim"] = self.dim
        self._models = {}
        for arm, state in learned["models"].items():
            model = self._new_model()
            model.load(state)
            self._models[arm] = model
        for arm in self._arms:
            self._on_add_arm(arm)
        self._steps = OrderedDict()
        for item in learned.get("steps", _legacy_steps(learned)):
            self._steps[item["key"]] = OpenStep(
                calls=int(item["calls"]),
                explored=bool(item["explored"]),
                arms={str(a) for a in item["arms"]},
                pending=[
                    (str(p["arm"]), np.array(p["x"], dtype=np.float64), float(p["r"]))
                    for p in item["pending"]
                ],
            )


def _legacy_steps(learned: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A state saved before per-decision records: its single slot becomes the unkeyed record."""
    pending = list(learned.get("pending", []))
    explored = learned.get("exploring") is not None
    if not pending and not explored:
        return []
    arms = sorted({str(p["arm"]) for p in pending})
    return [{"key": None, "calls": len(pending), "explored": explored, "arms": arms, "pending": pending}]
