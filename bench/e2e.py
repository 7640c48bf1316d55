"""``bench e2e``: the offline replay and the same replay through a running gateway, side by side.

For each policy and seed s the offline half is ``bench run`` (``bench.run_command.replay``). The service
half plays the very same draws (``ReplayEnv.draw(s)``: the same prompts in the same order, without repeats
unless ``--draws with-replacement``, the same sampled reward of every model in every round) through the
gateway over HTTP:

- every model of the dataset is a backend at ``<backends>/<model>/v1`` (the gateway's own ``/replay``
  mount of the dataset, or a ``banditgate replay-backends`` server), with the dataset's prices;
- a router per (policy, seed) with the policy, the spec's hyperparameters (``cost_weight`` = ``--lambda``
  for cost-aware policies, as in ``bench run``), the seed and the dataset's reward range;
- round t sends the prompt to ``POST /v1/chat/completions`` with ``model: router/<name>``: the gateway
  embeds it, selects, forwards to the replay backend and returns the answer with its cost
  (``x-banditgate-cost-usd``, from the backend's reported usage and the prices);
- single-model decisions: the driver posts round t's drawn reward of the answering model to
  ``POST /feedback`` (and ``kind: query`` rewards for the models in ``x-banditgate-query``);
- cascades (PromptWise): the router has a judge, a small HTTP server of this module that scores each
  answer with round t's drawn reward of the model that gave it. The gateway runs the whole cascade, and
  records each step's cost and the reward of each step it moved on from; the driver, as the client,
  posts the served answer's score as its ``cascade-step`` reward (a duplicate, ignored, when the gateway
  recorded that step already), so the policy is shown every step's reward as in the simulator; the
  user's reward is the best step's, as in the simulator. With ``--judge-backend`` the routers' judge is a
  backend instead, the replay backends' ``replay-judge`` (registered at the prices of the cheapest
  model), which grades an answer with its logged reward: the driver sends ``POST /route`` with
  ``forward`` (its answer lists the judged steps and each judge's cost), posts the served answer's drawn
  reward as its ``cascade-step``, and reports the judge's cost apart from the compared cost (the
  simulator, judging by the labels, pays no judge);
- a decline (503 with ``x-banditgate-declined``) scores the low end of the reward range at no cost;
- each request carries ``seed: t`` (OpenAI's parameter): the gateway then draws the decision's randomness
  from (router seed, t), and the offline half runs the simulator with ``round_rng(t)`` built the same way
  (``routers.base.decision_rng``), so both halves break ties and explore alike. ``--unseeded`` leaves the
  gateway on its default (the decision id) and the simulator on the policy's own generator.

The comparison: each policy's service mean reward and mean cost per round (over rounds, then seeds)
against the offline mean and its 95% interval (``bench.metrics.ci95`` over the same seeds). Both halves
see the same prompts, reward draws and (seeded) decision randomness, and the policy is shown the same
cost estimates before a call (prompt characters / 4 and ``default_tokens_out`` tokens, the dataset's
estimate when it logs no token counts). What may still differ: the embedding (the gateway embeds the
message text itself, one at a time; the bench embeds in batches, which can move MiniLM's floats in the
last digits) and the charged cost (the replay backend reports whole tokens, the bench charges
characters / 4): so a service mean cost within ``COST_RTOL`` (0.1%) of the offline one counts as inside
too, whatever the interval's width (one seed gives it width 0).

This module talks to the gateway over HTTP only; it imports nothing from ``app/``. Its command line is
``bench.e2e_command``. Starting a gateway (``spawn_gateway``) runs ``python -m app.cli serve`` as a
child process.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from tqdm import tqdm

from bench.arm_schedule import build_schedule
from bench.dataset import Dataset
from bench.local_server import free_port, serving
from bench.metrics import ci95
from bench.policy_spec import PolicySpec, build_from_spec, hyperparameters
from bench.replay_env import WITHOUT_REPLACEMENT, Draws, ReplayEnv, SeedDraws
from bench.trace import Trace
from routers.base import Context, decision_rng

DECLINED_HEADER = "x-banditgate-declined"


class ServiceError(RuntimeError):
    """The gateway answered a round with an error the driver cannot score."""


REPLAY_JUDGE = "replay-judge"  # the replay backends' judge of logged grades (app/replay_backends.py)
JUDGE_RUBRIC = "The answer is correct and complete."
COST_RTOL = 1e-3  # whole-token rounding of the charged cost (module docstring)


@dataclass
class ServiceRun:
    """One (policy, seed) through the gateway: per-round reward, cost and number of calls."""

    reward: np.ndarray
    cost: np.ndarray
    calls: np.ndarray
    declined: int
    wall_s: float
    models: dict[str, int] = field(default_factory=dict)
    answered: list[str | None] = field(default_factory=list)  # per round: the model that answered
    judge_cost: float = 0.0  # USD of a backend judge's calls, left out of ``cost``


@dataclass
class Round:
    """What the judge needs for the round in play: the draws' rewards and the steps it scored."""

    rewards: np.ndarray  # (K,) round t's drawn reward of every model
    scored: list[tuple[str, float]] = field(default_factory=list)


class Judge:
    """The routers' judge: ``POST /judge/{key}`` scores an answer with the current round's drawn reward of
    the model that gave it (``{"score": r}``). One round per key is in play at a time."""

    def __init__(self, index: dict[str, int]) -> None:
        self.index = index  # backend name -> model column
        self.rounds: dict[str, Round] = {}
        self.app = Starlette(routes=[Route("/judge/{key}", self.judge, methods=["POST"])])

    def begin(self, key: str, rewards: np.ndarray) -> Round:
        self.rounds[key] = Round(rewards)
        return self.rounds[key]

    async def judge(self, request: Request) -> JSONResponse:
        play = self.rounds.get(request.path_params["key"])
        body = await request.json()
        column = self.index.get(str(body.get("model")))
        if play is None or column is None:
            return JSONResponse({"detail": "no round in play for this model"}, status_code=409)
        score = float(play.rewards[int(column)])
        play.scored.append((str(body["model"]), score))
        return JSONResponse({"score": score})


def plays_cascade(spec: PolicySpec, dataset: Dataset, embeddings: np.ndarray, cost_weight: float) -> bool:
    """Whether the policy's first decision is a cascade (then its routers get the judge)."""
    policy = build_from_spec(spec, dataset.model_names, 0, cost_weight)
    costs = {m: float(c) for m, c in zip(dataset.model_names, dataset.cost[0], strict=True)}
    decision = policy.select(Context(embedding=embeddings[0], costs=costs))
    if decision.mode == "set":
        raise ValueError(f"policy {spec.text!r} plays sets (ensembles); bench e2e drives single and cascade")
    return decision.mode == "cascade"


class Gateway:
    """An admin and a tenant client of one gateway, with the dataset's models registered as backends."""

    def __init__(
        self,
        url: str,
        admin_key: str,
        backends_url: str,
        embed_text: dict[str, Any] | None = None,
        backends_key: str | None = None,
    ) -> None:
        self.url, self.admin_key, self.backends_url = url, admin_key, backends_url
        self.backends_key = backends_key  # the replay backends' Bearer key, registered with each backend
        # every router's embed-text rule: the one the offline half embedded with (--embed-text)
        self.embed_text = embed_text
        self.client = httpx.AsyncClient(base_url=url, timeout=120)
        self.tenant = f"e2e-{secrets.token_hex(4)}"
        self.key = ""

    async def close(self) -> None:
        await self.client.aclose()

    @property
    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_key}"}

    async def set_up(self, dataset: Dataset, judge_backend: bool = False) -> None:
        """Backends named as the dataset's models (the names matter: kNN-UCB seeds each arm's neighbour
        store from its name, so other names would make other draws than the simulator's). A backend of that
        name that already points elsewhere is an error, never overwritten. With ``judge_backend``, also the
        replay backends' ``replay-judge``, at the prices of the dataset's cheapest model."""
        models = list(dataset.models)
        if judge_backend:
            cheapest = min(models, key=lambda m: (m.usd_per_mtok_in + m.usd_per_mtok_out, m.usd_per_call))
            models.append(replace(cheapest, name=REPLAY_JUDGE))
        for model in models:
            body = {
                "name": model.name,
                "base_url": f"{self.backends_url}/{model.name}/v1",
                "usd_per_mtok_in": model.usd_per_mtok_in,
                "usd_per_mtok_out": model.usd_per_mtok_out,
                "usd_per_call": model.usd_per_call,
                "default_tokens_out": int(model.default_tokens_out),
                "api_key": self.backends_key,
            }
            response = await self.client.post("/admin/backends", json=body, headers=self.admin)
            if response.status_code == 409:  # registered by an earlier run?
                response = await self.client.get(f"/admin/backends/{model.name}", headers=self.admin)
                _check(response, "reading backend " + model.name)
                if response.json().get("base_url") != body["base_url"]:
                    raise ServiceError(
                        f"backend {model.name!r} exists and calls {response.json().get('base_url')}, not the "
                        f"replay backend {body['base_url']}: run against a gateway without it"
                    )
                fields = (
                    "usd_per_mtok_in",
                    "usd_per_mtok_out",
                    "usd_per_call",
                    "default_tokens_out",
                    "api_key",
                )
                changes = {key: body[key] for key in fields}
                response = await self.client.patch(
                    f"/admin/backends/{model.name}", json=changes, headers=self.admin
                )
            _check(response, "registering backend " + model.name)
        _check(
            await self.client.post("/admin/tenants", json={"name": self.tenant}, headers=self.admin), "tenant"
        )
        created = await self.client.post(f"/admin/tenants/{self.tenant}/keys", json={}, headers=self.admin)
        _check(created, "api key")
        self.key = str(created.json()["key"])

    async def create_router(self, name: str, body: dict[str, Any]) -> None:
        response = await self.client.post(
            f"/admin/tenants/{self.tenant}/routers",
            json={"name": name, "embed_text": self.embed_text, **body},
            headers=self.admin,
        )
        _check(response, f"router {name}")


def _check(response: httpx.Response, what: str) -> None:
    if response.status_code >= 400:
        raise ServiceError(f"{what}: HTTP {response.status_code}: {response.text[:300]}")


async def run_service_seed(
    gateway: Gateway,
    judge: Judge,
    judge_url: str | None,
    dataset: Dataset,
    spec: PolicySpec,
    draws: SeedDraws,
    cost_weight: float,
    threshold: float,
    bar: tqdm | None = None,
    seeded: bool = True,
    judge_backend: bool = False,
) -> ServiceRun:
    """Play one seed's draws through a fresh router; see the module doc for each step. With
    ``judge_backend`` a cascade's router is judged by the ``replay-judge`` backend instead of
    ``judge_url`` (``judged_round``)."""
    name = f"{spec.name}-s{draws.seed}-{secrets.token_hex(3)}"
    body: dict[str, Any] = {
        "policy": spec.name,
        "hyperparameters": hyperparameters(spec, cost_weight),
        "arms": list(dataset.model_names),
        "reward_range": list(dataset.reward_range),
        "seed": draws.seed,
    }
    lo, hi = dataset.reward_range
    if judge_url is not None and judge_backend:
        unit = (threshold - lo) / (hi - lo)
        body |= {"judge": {"backend": REPLAY_JUDGE, "rubric": JUDGE_RUBRIC, "threshold": unit}}
    elif judge_url is not None:
        body |= {"judge": {"url": f"{judge_url}/judge/{name}", "threshold": threshold}}
    await gateway.create_router(name, body)
    column = {m: k for k, m in enumerate(dataset.model_names)}
    headers = {"Authorization": f"Bearer {gateway.key}"}
    horizon = len(draws.prompts)
    reward, cost, calls = np.empty(horizon), np.empty(horizon), np.zeros(horizon, dtype=np.int64)
    declined = 0
    models: dict[str, int] = {}
    answered_by: list[str | None] = []
    judge_spent = 0.0
    start = time.perf_counter()
    for t in range(horizon):
        rewards = draws.rewards[t]
        play = judge.begin(name, rewards)
        request: dict[str, Any] = {
            "model": f"router/{name}",
            "messages": [{"role": "user", "content": dataset.prompts[int(draws.prompts[t])]}],
        }
        if seeded:
            request["seed"] = t
        if judge_url is not None and judge_backend:
            judged = await judged_round(
                gateway, name, request, rewards, column, f"round {t} of seed {draws.seed}"
            )
            if judged is None:
                reward[t], cost[t] = lo, 0.0
                declined += 1
            else:
                answered, reward[t], cost[t], calls[t], spent = judged
                models[answered] = models.get(answered, 0) + 1
                judge_spent += spent
            answered_by.append(None if judged is None else judged[0])
            if bar is not None:
                bar.update(1)
            continue
        response = await gateway.client.post("/v1/chat/completions", json=request, headers=headers)
        if response.status_code == 503 and response.headers.get(DECLINED_HEADER):
            reward[t], cost[t] = dataset.reward_range[0], 0.0
            declined += 1
            answered_by.append(None)
        else:
            _check(response, f"round {t} of seed {draws.seed}")
            answered = response.headers["x-banditgate-model"]
            models[answered] = models.get(answered, 0) + 1
            answered_by.append(answered)
            cost[t] = float(response.headers.get("x-banditgate-cost-usd", "nan"))
            if judge_url is not None:
                if not play.scored:
                    raise ServiceError(f"round {t} of seed {draws.seed}: the gateway never asked the judge")
                reward[t] = max(score for _, score in play.scored)
                calls[t] = len(play.scored)
                served = [score for model, score in play.scored if model == answered][-1]
                step = {
                    "decision_id": response.headers["x-banditgate-decision-id"],
                    "model": answered,
                    "kind": "cascade-step",
                    "reward": served,
                }
                _check(await gateway.client.post("/feedback", json=step, headers=headers), f"round {t}")
            else:
                reward[t] = float(rewards[column[answered]])
                calls[t] = 1
                events: list[dict[str, Any]] = [
                    {"decision_id": response.headers["x-banditgate-decision-id"], "reward": reward[t]}
                ]
                for probe in filter(None, response.headers.get("x-banditgate-query", "").split(",")):
                    if probe != answered and probe in column:
                        events.append(
                            {
                                "decision_id": events[0]["decision_id"],
                                "model": probe,
                                "kind": "query",
                                "reward": float(rewards[column[probe]]),
                            }
                        )
                sent = await gateway.client.post("/feedback/batch", json={"events": events}, headers=headers)
                _check(sent, f"feedback of round {t} of seed {draws.seed}")
        if bar is not None:
            bar.update(1)
    wall_s = time.perf_counter() - start
    return ServiceRun(reward, cost, calls, declined, wall_s, models, answered_by, judge_spent)


async def judged_round(
    gateway: Gateway,
    name: str,
    request: dict[str, Any],
    rewards: np.ndarray,
    column: dict[str, int],
    what: str,
) -> tuple[str, float, float, int, float] | None:
    """One round of a cascade judged by a backend: ``POST /route`` with ``forward`` (its answer lists the
    judged steps and each judge's cost), then the served answer's drawn reward posted as its
    ``cascade-step``. Returns (the model that answered, the best step's drawn reward, the calls' cost
    without the judge's, the calls, the judge's cost); None for a decline."""
    headers = {"Authorization": f"Bearer {gateway.key}"}
    body: dict[str, Any] = {"router": name, "forward": True, "request": {"messages": request["messages"]}}
    if "seed" in request:
        body["seed"] = request["seed"]
    response = await gateway.client.post("/route", json=body, headers=headers)
    if response.status_code == 503:
        return None
    _check(response, what)
    done = response.json()
    answered = str(done["backend"])
    steps = done.get("judged") or [{"model": answered, "judge_cost": 0.0}]
    spent = sum(float(step["judge_cost"]) for step in steps)
    best = max(float(rewards[column[step["model"]]]) for step in steps)
    served = {
        "decision_id": done["decision_id"],
        "model": answered,
        "kind": "cascade-step",
        "reward": float(rewards[column[answered]]),
    }
    _check(await gateway.client.post("/feedback", json=served, headers=headers), what)
    return answered, best, float(done["cost"]) - spent, len(steps), spent


@dataclass
class Comparison:
    """One policy: offline per-seed means next to the service's, and whether the service lies inside."""

    policy: str
    seeds: list[int]
    offline_reward: list[float]
    offline_cost: list[float]
    service_reward: list[float]
    service_cost: list[float]
    service_calls: list[float]  # mean backend calls per round (cascade steps), per seed
    service_wall_s: float
    rounds_differing: int  # rounds whose reward through the gateway differs from the simulator's
    declined: int
    models: dict[str, int]
    horizon: int
    repeat_share: float = 0.0  # share of rounds whose prompt text was played earlier in the seed, mean
    service_judge_cost: float = 0.0  # USD per round of a backend judge's calls (not in service_cost)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"policy": self.policy, "seeds": self.seeds}
        for what in ("reward", "cost"):
            offline = np.asarray(getattr(self, f"offline_{what}"))
            service = np.asarray(getattr(self, f"service_{what}"))
            half = ci95(offline)
            # the charged cost may differ by whole-token rounding (module docstring), however many seeds
            allowed = max(half, COST_RTOL * abs(float(offline.mean()))) if what == "cost" else half
            out[what] = {
                "offline_mean": float(offline.mean()),
                "offline_ci95": half,
                "service_mean": float(service.mean()),
                "service_ci95": ci95(service),
                "within": bool(abs(service.mean() - offline.mean()) <= allowed),
                "offline_per_seed": offline.tolist(),
                "service_per_seed": service.tolist(),
            }
        out["service_ms_per_round"] = self.service_wall_s * 1000 / max(1, len(self.seeds) * self.horizon)
        out["service_calls_per_round"] = float(np.mean(self.service_calls))
        out["rounds_differing"] = self.rounds_differing
        out["rounds"] = len(self.seeds) * self.horizon
        out["declined"] = self.declined
        out["repeat_share"] = self.repeat_share
        out["models"] = self.models
        out["service_judge_cost_per_round"] = self.service_judge_cost
        return out


def offline_traces(
    dataset: Dataset,
    embeddings: np.ndarray,
    spec: PolicySpec,
    horizon: int,
    seeds: Sequence[int],
    cost_weight: float,
    threshold: float,
    seeded: bool = True,
    draws: Draws = WITHOUT_REPLACEMENT,
) -> tuple[ReplayEnv, list[Trace]]:
    """The simulator's traces for ``seeds`` (``bench run``'s loop for one policy) and the environment;
    ``seeded``: round t's decisions draw from ``decision_rng(seed, t)``, as the gateway does for a request
    with ``seed: t`` to a router with that seed."""
    from bench.simulator import run_policy

    schedule = build_schedule(dataset.model_names, [], horizon)
    env = ReplayEnv(dataset, embeddings, schedule, cost_weight, threshold, draws=draws)
    traces = []
    for seed in seeds:
        policy = build_from_spec(spec, schedule.initial, seed, cost_weight)
        round_rng = partial(decision_rng, seed) if seeded else None
        traces.append(run_policy(policy, env, env.draw(seed), round_rng=round_rng))
    return env, traces


async def compare(
    gateway: Gateway,
    dataset: Dataset,
    embeddings: np.ndarray,
    specs: Sequence[PolicySpec],
    horizon: int,
    seeds: Sequence[int],
    cost_weight: float,
    threshold: float | None = None,
    progress: bool = True,
    seeded: bool = True,
    draws: Draws = WITHOUT_REPLACEMENT,
    judge_backend: bool = False,
) -> list[Comparison]:
    """Every spec offline and through ``gateway`` on ``seeds``; see the module doc. With
    ``judge_backend`` cascades are judged by the replay backends' ``replay-judge``."""
    lo, hi = dataset.reward_range
    threshold = (lo + hi) / 2 if threshold is None else float(threshold)
    judge = Judge({m: k for k, m in enumerate(dataset.model_names)})
    await gateway.set_up(dataset, judge_backend)
    results: list[Comparison] = []
    async with serving(judge.app) as judge_url:
        for spec in specs:
            cascade = plays_cascade(spec, dataset, embeddings, cost_weight)
            env, traces = offline_traces(
                dataset, embeddings, spec, horizon, seeds, cost_weight, threshold, seeded, draws
            )
            runs: list[ServiceRun] = []
            with tqdm(total=horizon * len(seeds), unit="round", disable=not progress, file=sys.stderr) as bar:
                for seed in seeds:
                    bar.set_description(f"{spec.text} seed {seed} via the gateway")
                    runs.append(
                        await run_service_seed(
                            gateway,
                            judge,
                            judge_url if cascade else None,
                            dataset,
                            spec,
                            env.draw(seed),
                            cost_weight,
                            threshold,
                            bar,
                            seeded,
                            judge_backend,
                        )
                    )
            models: dict[str, int] = {}
            for run in runs:
                for m, n in run.models.items():
                    models[m] = models.get(m, 0) + n
            comparison = Comparison(
                policy=spec.text,
                seeds=list(seeds),
                offline_reward=[float(t.reward.mean()) for t in traces],
                offline_cost=[float(t.cost.mean()) for t in traces],
                service_reward=[float(r.reward.mean()) for r in runs],
                service_cost=[float(r.cost.mean()) for r in runs],
                service_calls=[float(r.calls.mean()) for r in runs],
                service_wall_s=sum(r.wall_s for r in runs),
                rounds_differing=sum(
                    int(np.count_nonzero(r.reward != t.reward)) for r, t in zip(runs, traces, strict=True)
                ),
                declined=sum(r.declined for r in runs),
                models=models,
                horizon=horizon,
                repeat_share=float(np.mean([env.draw(seed).repeat_share for seed in seeds])),
                service_judge_cost=sum(r.judge_cost for r in runs) / max(1, horizon * len(runs)),
            )
            results.append(comparison)
    return results


@contextlib.contextmanager
def spawn_gateway(dataset_dir: Path, embedder: str, max_steps: int) -> Iterator[tuple[str, str, str]]:
    """``banditgate serve`` as a child process on a fresh SQLite database with ``dataset_dir`` mounted as
    replay backends at ``/replay``; yields (url, admin key, replay key) and stops it afterwards."""
    work = Path(tempfile.mkdtemp(prefix="banditgate-e2e-"))
    port, admin = free_port(), "adm_" + secrets.token_urlsafe(16)
    replay_key = "rpl_" + secrets.token_urlsafe(16)
    env = {
        **os.environ,
        "BANDITGATE_DATABASE_URL": f"sqlite+aiosqlite:///{work / 'gateway.db'}",
        "BANDITGATE_ADMIN_KEY": admin,
        "BANDITGATE_EMBEDDER": embedder,
        "BANDITGATE_REPLAY_DATASET": str(dataset_dir.resolve()),
        "BANDITGATE_REPLAY_API_KEY": replay_key,
        "BANDITGATE_SECRET_KEY": secrets.token_urlsafe(32),
        "BANDITGATE_JUDGE_MAX_STEPS": str(max_steps),
        "BANDITGATE_LOG_LEVEL": "WARNING",
    }
    subprocess.run(
        [sys.executable, "-m", "app.cli", "migrate"], env=env, check=True, stdout=subprocess.DEVNULL
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--no-access-log"], env=env
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if server.poll() is not None:
                raise ServiceError(f"the gateway exited with {server.returncode} before it was ready")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise ServiceError("the gateway did not become ready in 180 s")
            time.sleep(0.5)
        yield url, admin, replay_key
    finally:
        server.terminate()
        server.wait(30)


async def measure_overhead(
    gateway: Gateway, dataset: Dataset, spec: PolicySpec, pairs: int, cost_weight: float
) -> dict[str, float]:
    """The gateway's own cost per request: ``/v1/chat/completions`` through a router of ``spec`` (embed,
    select, log the decision, forward, record the cost event) against the same request sent straight to
    the replay backend the router picked. Pairs alternate; 50 prompts repeat, the first pass over them
    only warms the embedding cache. Medians in ms."""
    await gateway.set_up(dataset)
    name = f"{spec.name}-overhead-{secrets.token_hex(3)}"
    await gateway.create_router(
        name,
        {
            "policy": spec.name,
            "hyperparameters": hyperparameters(spec, cost_weight),
            "arms": list(dataset.model_names),
            "reward_range": list(dataset.reward_range),
        },
    )
    prompts = dataset.prompts[: min(50, len(dataset.prompts))]
    headers = {"Authorization": f"Bearer {gateway.key}"}
    via: list[float] = []
    direct: list[float] = []
    for i in range(pairs + len(prompts)):
        messages = [{"role": "user", "content": prompts[i % len(prompts)]}]
        t0 = time.perf_counter()
        routed = await gateway.client.post(
            "/v1/chat/completions", json={"model": f"router/{name}", "messages": messages}, headers=headers
        )
        t1 = time.perf_counter()
        _check(routed, "request through the gateway")
        model = routed.headers["x-banditgate-model"]
        t2 = time.perf_counter()
        straight = await gateway.client.post(
            f"{gateway.backends_url}/{model}/v1/chat/completions",
            json={"model": model, "messages": messages},
            headers={"Authorization": f"Bearer {gateway.backends_key}"} if gateway.backends_key else None,
        )
        t3 = time.perf_counter()
        _check(straight, "request straight to the backend")
        if i >= len(prompts):
            via.append((t1 - t0) * 1000)
            direct.append((t3 - t2) * 1000)
    g, d = float(np.median(via)), float(np.median(direct))
    return {"pairs": pairs, "gateway_p50_ms": g, "backend_p50_ms": d, "overhead_ms": g - d, "ratio": g / d}
