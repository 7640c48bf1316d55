"""The service runs what the bench measures: ``bench e2e`` on 300 real MMLU prompts (the committed fixture
``tests/data/routellm``) through a gateway on Postgres + Redis (served on a real socket, the dataset
mounted as replay backends), for kNN-UCB and PromptWise, against the offline replay of the same draws."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.main import create_app
from bench.cli import main as bench_main
from bench.dataset import load_dataset
from bench.e2e import Comparison, Gateway, compare
from bench.policy_spec import parse_spec
from bench.run_command import dataset_embeddings
from tests.conftest import ADMIN_KEY, REDIS_URL, TEST_DATA, Stack, fresh_pg_database
from tests.served import served

pytestmark = pytest.mark.slow

HORIZON = 300
SEEDS = [0, 1]
LAMBDA = 5.0  # reward units per USD: GPT-4's ~0.009 USD per prompt costs ~0.044


@pytest.fixture(scope="module")
def mmlu300(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mmlu300")
    # The fixture holds exactly the 300 rows `--limit 300 --seed 0` draws from the full set.
    argv = ["convert", "mmlu", "--out", str(out), "--data", str(TEST_DATA)]
    assert bench_main(argv) == 0
    return out


async def compared(
    stack: Stack,
    mmlu300: Path,
    tmp_path: Path,
    specs: list[str],
    horizon: int,
    seeds: list[int],
    **options: Any,
) -> list[Comparison]:
    """``bench e2e``'s comparison of ``specs`` through a gateway on ``stack`` serving the fixture as replay
    backends, at most one gateway-driven cascade step per model (as the simulator bounds an adaptive
    cascade)."""
    dataset = load_dataset(mmlu300)
    embeddings = dataset_embeddings(dataset, "hashing", cache_dir=tmp_path, progress=False)
    replay_key = "rpl_e2e-test-key"
    settings = stack.settings(
        replay_dataset=str(mmlu300), replay_api_key=replay_key, judge_max_steps=len(dataset.models)
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app), served(app) as url:
        gateway = Gateway(url, ADMIN_KEY, f"{url}/replay", backends_key=replay_key)
        try:
            policies = [parse_spec(spec) for spec in specs]
            return await compare(
                gateway, dataset, embeddings, policies, horizon, seeds, LAMBDA, progress=False, **options
            )
        finally:
            await gateway.close()


async def test_service_matches_the_offline_replay(pg_stack: Stack, mmlu300: Path, tmp_path: Path) -> None:
    results = await compared(pg_stack, mmlu300, tmp_path, ["knn-ucb", "promptwise"], HORIZON, SEEDS)

    for result in results:
        summary = result.summary()
        # Same prompts, reward draws, embeddings, cost estimates and seeded decision randomness: the
        # service makes the simulator's decisions round for round: every round's reward is the same.
        assert result.rounds_differing == 0, result.policy
        assert result.service_reward == result.offline_reward, result.policy
        # The replay backend reports whole tokens where the bench charges characters / 4.
        np.testing.assert_allclose(result.service_cost, result.offline_cost, rtol=1e-3)
        assert summary["reward"]["within"] and summary["cost"]["within"], summary
        assert result.declined == 0
        assert result.repeat_share == 0.0  # bench e2e's default: each seed plays every prompt once
    knn, promptwise = results
    # Without repeated prompts kNN-UCB has no answers to remember: in 300 rounds it has not settled on
    # GPT-4 (291 GPT-4 against 309 Mixtral over the two seeds) and still calls both.
    # PromptWise cascades: it starts most prompts on Mixtral and escalates some to GPT-4 (more than one
    # call per prompt on average), at a lower cost.
    assert knn.models["gpt-4-1106-preview"] > 0 and knn.models["mistralai/Mixtral-8x7B-Instruct-v0.1"] > 0
    assert promptwise.models["mistralai/Mixtral-8x7B-Instruct-v0.1"] > 0
    assert promptwise.models["gpt-4-1106-preview"] > 0
    assert all(1.0 < calls < 2.0 for calls in promptwise.service_calls)
    assert knn.service_calls == [1.0] * len(SEEDS)
    assert np.mean(promptwise.service_cost) < np.mean(knn.service_cost)


@pytest.fixture
def own_pg_stack() -> Iterator[Stack]:
    """A database of its own: backends are global and named as the dataset's models, so a gateway on
    another port finds the other test's registered at its old address."""
    with fresh_pg_database() as url:
        yield Stack("postgres", url, REDIS_URL)


async def test_a_cascade_judged_by_a_backend_inside_the_gateway_matches_the_replay(
    own_pg_stack: Stack, mmlu300: Path, tmp_path: Path
) -> None:
    """PromptWise's cascades judged by the replay backends' replay-judge (a backend judge of the logged
    grades, asked with the shipped prompt) stop where the replay's labels stop them: every round's reward
    is the simulator's; the calls' cost matches it and the judge's cost is reported apart."""
    (result,) = await compared(own_pg_stack, mmlu300, tmp_path, ["promptwise"], 100, [0], judge_backend=True)
    assert result.rounds_differing == 0 and result.service_reward == result.offline_reward
    np.testing.assert_allclose(result.service_cost, result.offline_cost, rtol=1e-3)
    assert 1.0 < result.service_calls[0] < 2.0  # some cascades went on to GPT-4
    assert result.service_judge_cost > 0.0
