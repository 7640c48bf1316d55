"""The replay evaluator: drive a gateway with a replay dataset's prompts and post the logged rewards.

For each row (in a seeded random order, cycling when ``limit`` exceeds the rows) it sends the prompt to
the gateway's ``POST /v1/chat/completions`` (so the gateway routes and forwards, normally to replay
backends), reads the decision id and the answering model from the response headers, and posts that
model's logged reward to ``POST /feedback/batch``: the value, or one of its samples drawn at random,
together with a ``query`` reward for every model the policy asked about (``x-banditgate-query``). The
gateway also calls those models itself (probes, app/routing/probes.py); these query rewards mark its probes
answered, so the evaluator does not need ``GET /feedback/pending`` and leaves nothing pending there. Every
``block`` rows it prints the block's mean reward next to the best single model's and the per-prompt
oracle's (both from the logged mean rewards), how often the model with the row's best mean reward
answered, each model's share and the cost the gateway reported.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from app.replay_backends import ReplayDataset


def draw_reward(samples: list[float] | None, rng: np.random.Generator) -> float | None:
    """One of a model's reward samples, drawn uniformly (a single sample is returned without a draw);
    None for a model the row has no reward for."""
    if samples is None:
        return None
    return samples[0] if len(samples) == 1 else samples[int(rng.integers(len(samples)))]


@dataclass
class Block:
    rewards: list[float] = field(default_factory=list)
    best_single: dict[str, list[float]] = field(default_factory=dict)
    oracle: list[float] = field(default_factory=list)
    right: list[bool] = field(default_factory=list)  # the answering model had the row's best mean reward
    models: Counter[str] = field(default_factory=Counter)
    cost: float = 0.0
    errors: int = 0

    def line(self, start: int, end: int) -> str:
        def avg(values: list[float]) -> float:
            return float(np.mean(values)) if values else math.nan

        best = max((avg(v) for v in self.best_single.values()), default=math.nan)
        shares = ", ".join(
            f"{m} {n / max(1, sum(self.models.values())):.0%}" for m, n in sorted(self.models.items())
        )
        return (
            f"rows {start:>5}-{end:<5} reward {avg(self.rewards):.3f}  best single {best:.3f}  "
            f"oracle {avg(self.oracle):.3f}  best model chosen {avg([float(r) for r in self.right]):.0%}  "
            f"cost ${self.cost:.5f}  [{shares}]" + (f"  errors {self.errors}" if self.errors else "")
        )


@dataclass
class Summary:
    rows: int
    mean_reward: float
    blocks: list[str]
    models: Counter[str]
    errors: int
    choices: list[tuple[str, str]] = field(default_factory=list)  # (row id, model that answered)
    queries: int = 0  # query (active-learning) rewards posted


async def run_evaluator(
    client: httpx.AsyncClient,
    api_key: str,
    dataset: ReplayDataset,
    *,
    router: str | None = None,
    limit: int | None = None,
    block: int = 20,
    seed: int = 0,
    echo: Callable[[str], None] = print,
) -> Summary:
    """``client`` has the gateway as its base URL."""
    rng = np.random.default_rng(seed)
    headers = {"Authorization": f"Bearer {api_key}"}
    model_field = "router" if router is None else f"router/{router}"
    total = limit if limit is not None else len(dataset.rows)
    order: list[int] = []
    while len(order) < total:
        order.extend(int(i) for i in rng.permutation(len(dataset.rows)))
    all_rewards: list[float] = []
    models: Counter[str] = Counter()
    lines: list[str] = []
    errors = 0
    queries = 0
    choices: list[tuple[str, str]] = []
    current = Block()
    start = 1
    for n, index in enumerate(order[:total], start=1):
        row = dataset.rows[index]
        body = {"model": model_field, "messages": [{"role": "user", "content": row.prompt}]}
        response = await client.post("/v1/chat/completions", json=body, headers=headers)
        known = {m: float(np.mean(v)) for m, v in row.rewards.items()}
        if response.status_code != 200:
            current.errors += 1
            errors += 1
        else:
            decision_id = response.headers["x-banditgate-decision-id"]
            model = response.headers["x-banditgate-model"]
            current.models[model] += 1
            models[model] += 1
            choices.append((row.id, model))
            current.cost += float(response.headers.get("x-banditgate-cost-usd", 0.0))
            reward = draw_reward(row.rewards.get(model), rng)
            events: list[dict[str, Any]] = []
            if reward is not None:
                events.append({"decision_id": decision_id, "model": model, "reward": reward})
                current.rewards.append(reward)
                all_rewards.append(reward)
            for probe in filter(None, response.headers.get("x-banditgate-query", "").split(",")):
                probe_reward = draw_reward(row.rewards.get(probe), rng)
                if probe != model and probe_reward is not None:
                    events.append(
                        {"decision_id": decision_id, "model": probe, "kind": "query", "reward": probe_reward}
                    )
                    queries += 1
            if events:
                sent = await client.post("/feedback/batch", json={"events": events}, headers=headers)
                sent.raise_for_status()
            for m, v in known.items():
                current.best_single.setdefault(m, []).append(v)
            if known:
                current.oracle.append(max(known.values()))
                current.right.append(known.get(model) == max(known.values()))
        if n % block == 0 or n == total:
            lines.append(current.line(start, n))
            echo(lines[-1])
            current, start = Block(), n + 1
    mean = float(np.mean(all_rewards)) if all_rewards else math.nan
    return Summary(total, mean, lines, models, errors, choices, queries)
