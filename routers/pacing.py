"""Budget pacing and learned per-arm costs: the two cost models of ``routers.cost_aware``.

``DualPacer`` plays the online Lagrange multiplier lambda_t (reward units per USD) of the spend
constraint "mean cost per request <= target". It is the dual step of the primal-dual algorithms for
bandits with knapsacks (Agrawal and Devanur 2016, "Linear contextual bandits with knapsacks", Alg. 1 and
the online-convex-optimisation dual player of their Sec. 3; Balseiro, Lu and Mirrokni 2023, "The best of
many worlds: dual mirror descent for online allocation problems", Algorithm 1 with the Euclidean
reference function, where the mirror step is the projected gradient step below). After each folded cost
observation with cost c:

    lambda <- max(lambda_min, lambda + eta (c - target))   for the first cost of a request
    lambda <- max(lambda_min, lambda + eta c)               for every later cost of that request

and no step for an ``offline`` observation (a logged outcome imported as a warm start: money spent
before this router existed, not by it; ``CostEstimates`` still learns the arm's cost from it), with
the constant step eta = ``pacing_rate`` / target^2. The gradient of the dual function at lambda is
target - c_t (Balseiro et al., eq. (4): the subgradient g_t = rho - b_t(x_t)), so spend above target
raises lambda and spend below lowers it, floored at lambda_min (the ``cost_weight``, 0 by default).

A request is a decision: the first cost observation carrying a ``decision_key`` not seen before opens
it; later costs with the same key (a BALROG probe's, a shadow call's, a cascade's later steps, whatever
their kind) are more spend of that request. The keys of the last ``REQUEST_MEMORY`` requests are remembered (and kept in
the state, so replicas and snapshots agree). An observation without a key (a caller that keys nothing)
opens a request iff its kind is ``bandit`` (``query``, ``shadow`` and ``cascade-step`` add to the current
one).

Why this eta. lambda is in reward units per USD, so lambda x target is in reward units; with
eta = pacing_rate / target^2 one step moves lambda x target by pacing_rate x (c / target - 1): a number
of reward units that does not depend on the currency scale (multiplying every cost and the target by k
divides lambda by k and leaves every decision unchanged). The steps telescope: summing the update over T
requests, sum_t (c_t - target) <= (lambda_T - lambda_0) / eta (the projection only ever raises lambda),
so the mean spend exceeds the target by at most (lambda_T - lambda_0) target^2 / (pacing_rate T): a
relative overspend of at most (lambda_T - lambda_0) target / (pacing_rate T), which goes to 0 as 1/T
(lambda_T x target stays of the order of the reward range, the value of one request). A constant dual
step is Balseiro et al.'s choice (eta ~ 1/sqrt(T) there, for the regret bound); T is unknown to a live
router, so the step is a constant relative to the target and ``pacing_rate`` is the knob: larger
converges faster and jitters more. The default 0.05 follows from the bound: it caps the
relative overspend at (lambda_T - lambda_0) target / (0.05 T), under 0.4% at T = 5000 when lambda_T x
target <= 1, while one step moves lambda x target by at most 0.05 (c / target - 1). ``pacing_rate`` is in reward
units: it assumes rewards of order 1 (in [0, 1]); scale it with the rewards.

lambda_t is a pure function of the folded cost observations in fold order: ``select`` never touches it,
so replicas folding the same events play the same multiplier.

Why count per decision, not per ``bandit`` observation: in the gateway every call's cost is a ``cost``
event (folded as a ``bandit`` observation), a BALROG probe's and a judged cascade's later steps
included, so counting observations would count each probe and each step as a request and under-state the
spend per request; in ``bench run`` a PromptWise cascade reports every step as ``cascade-step`` and would
count no request at all.

``CostEstimates`` keeps, per arm, n, sum and sum of squares of the observed costs and gives the
optimistic expected cost of an arm without a price: its lower confidence bound

    LCB_a = max(0, mean_a - z sd_a / sqrt(n_a))   (sd_a the sample std; LCB_a = 0 while n_a < 2)

with z = ``cost_confidence``: an arm whose price is unknown looks no dearer than the data allow
(optimism in the face of uncertainty, applied to the cost as Agrawal and Devanur do for the consumption).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from routers.base import Observation, require


def finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


REQUEST_MEMORY = 4096
"""Decision keys remembered to tell a request's first cost from its later ones. A decision's costs
arrive within seconds of each other (the answer's at once, probes and cascade steps shortly after);
4096 open requests cover that at hundreds of requests per second, and a cost that arrives later counts
as one more request (the pacer then under-states the spend per request a little)."""


class DualPacer:
    """The multiplier lambda_t of the module docstring."""

    def __init__(self, target: float, pacing_rate: float = 0.05, floor: float = 0.0) -> None:
        require(
            finite_number(target) and target > 0, f"cost_target must be a number > 0 (USD), got {target!r}"
        )
        require(
            finite_number(pacing_rate) and pacing_rate > 0,
            f"pacing_rate must be a number > 0, got {pacing_rate!r}",
        )
        require(finite_number(floor) and floor >= 0, f"cost_weight must be a number >= 0, got {floor!r}")
        self.target = float(target)
        self.pacing_rate = float(pacing_rate)
        self.floor = float(floor)
        self.eta = self.pacing_rate / (self.target * self.target)
        self.multiplier = self.floor
        self.requests = 0
        self.spent = 0.0
        self.recent: OrderedDict[str, None] = OrderedDict()  # keys of the requests counted, oldest first

    def opens_request(self, observation: Observation) -> bool:
        """Whether this cost is the first of its request (module docstring); remembers its key."""
        key = observation.decision_key
        if key is None:
            return observation.kind == "bandit"
        key = str(key)
        if key in self.recent:
            return False
        self.recent[key] = None
        while len(self.recent) > REQUEST_MEMORY:
            self.recent.popitem(last=False)
        return True

    def update(self, observation: Observation) -> None:
        """One projected dual step per folded cost (module docstring); no cost, or an ``offline``
        observation (not this router's spend): nothing."""
        if observation.cost is None or observation.kind == "offline":
            return
        cost = float(observation.cost)
        new_request = self.opens_request(observation)
        gradient = cost - self.target if new_request else cost
        self.multiplier = max(self.floor, self.multiplier + self.eta * gradient)
        self.requests += int(new_request)
        self.spent += cost

    @property
    def spend_per_request(self) -> float | None:
        """The running mean spend per request the pacer steers to the target (None before any)."""
        return self.spent / self.requests if self.requests else None

    def state(self) -> dict[str, Any]:
        return {
            "multiplier": self.multiplier,
            "requests": self.requests,
            "spent": self.spent,
            "recent": list(self.recent),
        }

    def load(self, state: Mapping[str, Any]) -> None:
        """Also loads a state saved before requests were keyed (no ``recent``)."""
        self.multiplier = float(state["multiplier"])
        self.requests = int(state["requests"])
        self.spent = float(state["spent"])
        self.recent = OrderedDict((str(k), None) for k in state.get("recent", []))


class CostEstimates:
    """Per-arm observed costs and their optimistic lower bound (module docstring)."""

    def __init__(self, confidence: float = 2.0) -> None:
        require(
            finite_number(confidence) and confidence >= 0,
            f"cost_confidence must be a number >= 0, got {confidence!r}",
        )
        self.confidence = float(confidence)
        self.sums: dict[str, list[float]] = {}

    def update(self, observation: Observation) -> None:
        if observation.cost is None:
            return
        c = float(observation.cost)
        stats = self.sums.setdefault(observation.arm, [0.0, 0.0, 0.0])
        stats[0] += 1.0
        stats[1] += c
        stats[2] += c * c

    def lower_bound(self, arm: str) -> float:
        """LCB_a = max(0, mean - z sd / sqrt(n)); 0 while fewer than two costs are in."""
        n, total, squares = self.sums.get(arm, (0.0, 0.0, 0.0))
        if n < 2:
            return 0.0
        mean = total / n
        sd = math.sqrt(max(squares / n - mean * mean, 0.0) * n / (n - 1))
        return max(0.0, mean - self.confidence * sd / math.sqrt(n))

    def state(self) -> dict[str, Any]:
        return {"sums": {a: list(s) for a, s in self.sums.items()}}

    def load(self, state: Mapping[str, Any]) -> None:
        self.sums = {a: [float(v) for v in s] for a, s in dict(state.get("sums", {})).items()}
