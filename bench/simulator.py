"""Drive one policy through one seed's draws, only through the contract in ``routers/base.py``.

Each round t: apply the model schedule (``add_arm`` / ``remove_arm``), build
``Context(embedding, costs={available model: USD cost of one call on this prompt})``, time ``select``,
then execute the Decision by its ``mode`` and send one ``Observation`` per call made:

- ``single`` / ``mixture``: call ``arms[0]`` (kind ``bandit``).
- ``cascade``: call ``arms`` in order until a call succeeds (kind ``cascade-step``). When ``adaptive``:
  call ``arms[0]``, report it, then ``select`` again with ``Context(tried=...)`` until a success, an
  empty decision or ``max_calls`` calls (default: the number of available models).
- ``set``: ``info["reward_model"]`` (default ``awc``) says how the calls combine: ``awc`` calls in list
  order and stops at the first success, the user gets the best reward seen; ``suc`` calls all and sums the
  rewards; ``aic`` calls all and multiplies them (kind ``bandit``).
- ``query``: the listed models not yet called this round are called too and reported with kind ``query``;
  their cost is paid, their reward is not the user's.
- ``shadow``: then the listed models not yet called this round are called too (shadow evaluation) and
  reported with kind ``shadow``: the same logged outcome a served call of that model would draw, its cost
  paid (in the round's cost), its reward never the user's. The trace counts them (``shadow_calls``).
- an empty ``arms`` (the policy declines): reward = the low end of the reward range, cost 0, no call.

A call succeeds when its sampled reward reaches the success threshold: the Decision's
``info["success_threshold"]`` when it declares one (a policy's own stopping rule, e.g. C2MAB-V's AWC),
else the run's (``--success-threshold``, default the midpoint of the reward range). A Decision's
``info["budget"]`` is the round's per-round budget; when ``info["cost_scale"]`` is declared too the budget
is in units of that many USD (C2MAB-V's normalised rho) and the trace records ``budget * cost_scale`` USD.
Every Observation carries
``extra = {"round", "step", "success", "final"}``; ``final`` marks the last call of the round's plan.
Round t is one decision: its selects and observations carry ``decision_key = str(t)``.

With a ``judge`` (``bench.judge``), a round whose plan stops on success (``cascade``, ``set`` with ``awc``)
sees the judge's grade instead of the sampled reward: the Observation's ``reward`` and ``success`` and the
stop are the grade's, every call of the round is judged and the judge's price is added to its cost, and
the user gets the true reward of the answer of highest grade (the later among equals, as the gateway
returns the last answer of a judged cascade). Without a judge the grade is the sampled reward itself and
the user gets the best reward seen (the first among equals).

By default a policy draws its randomness from its own generator. With ``round_rng`` (a function of the
round) every ``select`` of round t, the adaptive cascade's later steps included, gets a fresh
``round_rng(t)`` in ``Context.rng``: the gateway's rule for a request that carries a ``seed`` (the
decision's generator depends on the router's seed and that key only), which ``bench e2e`` uses to play the
same decisions offline and through the service.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from time import perf_counter_ns
from typing import Any

import numpy as np

from bench.judge import Judge
from bench.replay_env import TIE_ATOL, TIE_RTOL, ReplayEnv, SeedDraws
from bench.trace import Trace
from routers.base import Context, Decision, Observation, Policy

REWARD_MODELS = ("awc", "suc", "aic")
UNJUDGED = ("query", "shadow")  # calls whose answer the user never gets: no success signal to judge


class SimulationError(RuntimeError):
    """A policy broke the contract (chose a model that is not available, an unknown mode, ...)."""


class _Round:
    """The calls of one round: pays for each, samples its reward (graded by the judge when the round is
    judged) and reports it to the policy."""

    def __init__(
        self,
        policy: Policy,
        env: ReplayEnv,
        draws: SeedDraws,
        t: int,
        embedding: np.ndarray,
        costs: Mapping[str, float],
        judge: Judge | None = None,
    ) -> None:
        self.policy, self.env, self.draws, self.t = policy, env, draws, t
        self.embedding, self.costs = embedding, costs
        self.called: dict[str, float] = {}  # arm -> its true reward
        self.graded: dict[str, float] = {}  # arm -> the reward the policy was shown
        self.threshold = env.success_threshold
        self.spent = 0.0
        self.query_calls = 0
        self.shadow_calls = 0
        self.judge = judge
        self.judged = False  # set by ``_play`` for the rounds a judge grades
        self.judge_calls = self.false_passes = self.false_fails = 0
        self.judge_spent = 0.0
        self.delivered: str | None = None
        output = env.output_embeddings
        self.outputs = None if output is None else output[int(draws.prompts[t])]

    def call(self, arm: str, kind: Any, step: int, last: bool, stop_on_success: bool) -> float:
        """Call ``arm`` (once per round) and return the reward the policy is shown: the sampled reward, or
        the judge's grade of it in a judged round."""
        if arm not in self.costs:
            raise SimulationError(
                f"policy {self.policy.name!r} chose {arm!r} in round {self.t}; available: {list(self.costs)}"
            )
        if arm in self.graded:
            return self.graded[arm]
        k = self.env.index[arm]
        reward = float(self.draws.rewards[self.t, k])
        cost = float(self.draws.costs[self.t, k])
        shown = reward
        if self.judged and self.judge is not None and kind not in UNJUDGED:
            prompt = int(self.draws.prompts[self.t])
            shown = self.judge.grade(self.draws.seed, prompt, k, reward, self.threshold)
            judge_cost = float(self.judge.cost[prompt, k])
            cost += judge_cost
            self.judge_spent += judge_cost
            self.judge_calls += 1
            truth, verdict = reward >= self.threshold, shown >= self.threshold
            self.false_passes += verdict and not truth
            self.false_fails += truth and not verdict
        success = shown >= self.threshold
        self.called[arm] = reward
        self.graded[arm] = shown
        self.spent += cost
        self.query_calls += kind == "query"
        self.shadow_calls += kind == "shadow"
        self.policy.update(
            Observation(
                embedding=self.embedding,
                arm=arm,
                reward=shown,
                cost=cost,
                kind=kind,
                output_embedding=None if self.outputs is None else self.outputs[k],
                extra={
                    "round": self.t,
                    "step": step,
                    "success": success,
                    "final": last or (stop_on_success and success),
                },
                decision_key=str(self.t),
            )
        )
        return shown

    def offer(self, arm: str) -> None:
        """``arm``'s answer replaces the one to deliver when its grade is higher (judged: or equal)."""
        held = self.delivered
        if held is None:
            self.delivered = arm
            return
        shown, best = self.graded[arm], self.graded[held]
        if shown > best or (self.judged and shown == best):
            self.delivered = arm

    def result(self, threshold: float) -> RoundResult:
        """The delivered answer's true reward and whether it succeeded."""
        assert self.delivered is not None
        reward = self.called[self.delivered]
        return RoundResult(reward, self.delivered, reward >= threshold)

    def cascade(self, arms: list[str], kind: Any) -> RoundResult:
        """Call in order until a success (graded, in a judged round); deliver per ``offer``."""
        for step, arm in enumerate(arms):
            shown = self.call(arm, kind, step, last=step == len(arms) - 1, stop_on_success=True)
            self.offer(arm)
            if shown >= self.threshold:
                break
        return self.result(self.threshold)


class RoundResult:
    __slots__ = ("declined", "delivered", "reward", "success")

    def __init__(self, reward: float, delivered: str | None, success: bool) -> None:
        self.reward, self.delivered, self.success = reward, delivered, success
        self.declined = delivered is None


def _play(
    policy: Policy,
    decision: Decision,
    game: _Round,
    context: Context,
    max_calls: int,
    select_ns: list[int],
    rng: Callable[[], np.random.Generator | None] = lambda: None,
) -> RoundResult:
    env = game.env
    threshold = game.threshold = decision_threshold(decision, env.success_threshold)
    if not decision.arms:
        return RoundResult(env.dataset.reward_range[0], None, False)
    mode = decision.mode
    game.judged = game.judge is not None and (
        mode == "cascade" or (mode == "set" and decision.info.get("reward_model", "awc") == "awc")
    )
    extra = [(a, "query") for a in decision.query] + [(a, "shadow") for a in decision.shadow]
    queries_follow = any(a not in decision.arms for a, _ in extra)
    if mode in ("single", "mixture"):
        arm = decision.arms[0]
        reward = game.call(arm, "bandit", 0, last=not queries_follow, stop_on_success=False)
        result = RoundResult(reward, arm, reward >= threshold)
    elif mode == "cascade" and decision.adaptive:
        step, current = 0, decision
        while True:
            arm = current.arms[0]
            shown = game.call(arm, "cascade-step", step, step + 1 >= max_calls, stop_on_success=True)
            game.offer(arm)
            step += 1
            if shown >= threshold or step >= max_calls:
                break
            retry = Context(
                embedding=context.embedding,
                costs=context.costs,
                tried=tuple(game.called),
                constraints=context.constraints,
                rng=rng(),
                decision_key=context.decision_key,
            )
            start = perf_counter_ns()
            current = policy.select(retry)
            select_ns.append(perf_counter_ns() - start)
            if not current.arms:
                break
        result = game.result(threshold)
    elif mode == "cascade":
        result = game.cascade(list(decision.arms), "cascade-step")
    elif mode == "set":
        reward_model = decision.info.get("reward_model", "awc")
        if reward_model not in REWARD_MODELS:
            raise SimulationError(f"policy {policy.name!r}: unknown reward_model {reward_model!r}")
        if reward_model == "awc":
            result = game.cascade(list(decision.arms), "bandit")
        else:
            last = len(decision.arms) - 1
            rewards = [
                game.call(arm, "bandit", i, last=i == last and not queries_follow, stop_on_success=False)
                for i, arm in enumerate(decision.arms)
            ]
            hits = [r >= threshold for r in rewards]
            if reward_model == "suc":
                result = RoundResult(float(sum(rewards)), decision.arms[0], any(hits))
            else:
                result = RoundResult(float(np.prod(rewards)), decision.arms[0], all(hits))
    else:
        raise SimulationError(f"policy {policy.name!r} returned unknown mode {mode!r}")
    pending: list[tuple[str, Any]] = []
    for arm, kind in extra:  # each model once per round: a query before a shadow call of it
        if arm not in game.called and all(arm != a for a, _ in pending):
            pending.append((arm, kind))
    for i, (arm, kind) in enumerate(pending):
        game.call(arm, kind, i, last=i == len(pending) - 1, stop_on_success=False)
    return result


def decision_threshold(decision: Decision, default: float) -> float:
    """The success threshold of a round: the Decision's ``info["success_threshold"]``, else ``default``."""
    declared = decision.info.get("success_threshold") if decision.info else None
    return default if declared is None else float(declared)


def decision_budget_usd(decision: Decision) -> float | None:
    """The per-round budget a Decision declares, in USD: ``info["budget"]`` times ``info["cost_scale"]``
    (USD per normalised cost unit) when the latter is given, else ``info["budget"]`` as USD; None if none."""
    info = decision.info
    if not info or info.get("budget") is None:
        return None
    scale = info.get("cost_scale")
    return float(info["budget"]) * (1.0 if scale is None else float(scale))


def run_policy(
    policy: Policy,
    env: ReplayEnv,
    draws: SeedDraws,
    max_calls: int | None = None,
    progress: Callable[[int], None] | None = None,
    progress_every: int = 250,
    round_rng: Callable[[int], np.random.Generator] | None = None,
    judge: Judge | None = None,
) -> Trace:
    """Replay ``draws`` through ``policy`` (built with the schedule's initial models); see module doc.
    With ``judge`` its grades replace the labels of the rounds it judges."""
    horizon = env.horizon
    reward = np.empty(horizon)
    cost = np.empty(horizon)
    optimal = np.zeros(horizon, dtype=bool)
    calls = np.empty(horizon, dtype=np.int64)
    success = np.zeros(horizon, dtype=bool)
    declined = np.zeros(horizon, dtype=bool)
    delivered = np.full(horizon, -1, dtype=np.int64)
    incumbent = np.empty(horizon, dtype=np.int64)
    over_target = np.zeros(horizon, dtype=bool)
    cost_target: float | None = None
    select_ns: list[int] = []
    query_rounds = query_calls = shadow_calls = 0
    judged = np.zeros((horizon, 3), dtype=np.int64) if judge is not None else None  # calls, false +, false -
    judge_cost = np.zeros(horizon) if judge is not None else None
    budget: float | None = env.run_budget
    declared_budget = False
    threshold = env.success_threshold
    constraints = {} if max_calls is None else {"max_calls": max_calls}
    events = env.schedule.events
    segment = draws.segment
    prompts = draws.prompts
    embeddings = env.embeddings
    current_segment = -1
    available: list[tuple[int, str]] = []
    for t in range(horizon):
        for event in events.get(t, ()):
            if event.action == "add":
                policy.add_arm(event.model)
            else:
                policy.remove_arm(event.model)
        if segment[t] != current_segment:
            current_segment = int(segment[t])
            available = env.available[current_segment]
        row_cost = draws.costs[t]
        costs = {name: float(row_cost[k]) for k, name in available}
        p = int(prompts[t])

        def fresh(t: int = t) -> np.random.Generator | None:
            return None if round_rng is None else round_rng(t)

        context = Context(
            embedding=embeddings[p], costs=costs, constraints=constraints, rng=fresh(), decision_key=str(t)
        )
        start = perf_counter_ns()
        decision = policy.select(context)
        select_ns.append(perf_counter_ns() - start)
        game = _Round(policy, env, draws, t, embeddings[p], costs, judge)
        bound = max_calls if max_calls is not None else len(available)
        result = _play(policy, decision, game, context, bound, select_ns, fresh)
        declared = decision_budget_usd(decision)
        if declared is not None:
            budget, declared_budget = declared, True
        threshold = game.threshold
        reward[t] = result.reward
        cost[t] = game.spent
        if judged is not None and judge_cost is not None:
            judged[t] = (game.judge_calls, game.false_passes, game.false_fails)
            judge_cost[t] = game.judge_spent
        calls[t] = len(game.called)
        success[t] = result.success
        declined[t] = result.declined
        incumbent[t] = env.index[round_incumbent(decision, costs)]
        over_target[t] = bool(decision.info.get("floor_over_target", False))
        cost_target = decision.info.get("cost_target", cost_target)
        if result.delivered is not None:
            k = env.index[result.delivered]
            delivered[t] = k
            optimal[t] = env.utility[p, k] >= draws.best_utility[t] - _tolerance(draws.best_utility[t])
        if game.query_calls:
            query_rounds += 1
            query_calls += game.query_calls
        shadow_calls += game.shadow_calls
        if progress is not None and (t + 1) % progress_every == 0:
            progress(progress_every)
    if progress is not None and horizon % progress_every:
        progress(horizon % progress_every)
    rounds = np.arange(horizon)
    return Trace(
        reward=reward,
        cost=cost,
        optimal=optimal,
        calls=calls,
        success=success,
        declined=declined,
        query_rounds=query_rounds,
        query_calls=query_calls,
        shadow_calls=shadow_calls,
        select_ns=np.asarray(select_ns, dtype=np.int64),
        budget=budget,
        declared_budget=declared_budget,
        success_threshold=threshold,
        delivered=delivered,
        incumbent=incumbent,
        incumbent_reward=draws.rewards[rounds, incumbent],
        incumbent_cost=draws.costs[rounds, incumbent],
        floor_over_target=over_target,
        cost_target=cost_target,
        judged=judged,
        judge_cost=judge_cost,
    )


def round_incumbent(decision: Decision, costs: Mapping[str, float]) -> str:
    """The incumbent a round is compared with: the one the decision names (``info["incumbent"]``, the
    conservative wrapper's), else the highest-priced available model (first among equals), the wrapper's
    default incumbent."""
    named = decision.info.get("incumbent") if decision.info else None
    if isinstance(named, str) and named in costs:
        return named
    return max(costs, key=lambda arm: costs[arm])


def _tolerance(best: float) -> float:
    """The tie tolerance of ``replay_env.ties`` (atol + rtol * |best|)."""
    return TIE_ATOL + TIE_RTOL * abs(best)
