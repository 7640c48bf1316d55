"""How a seed picks its prompts: without repeats by default, T = N unless told, T > N refused,
``--draws with-replacement`` for the papers' protocols, and the repeat share of each run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.arm_schedule import build_schedule, parse_arm_event
from bench.cli import build_parser, main
from bench.dataset import Dataset, load_dataset
from bench.e2e import offline_traces
from bench.policy_spec import parse_spec
from bench.replay_env import ReplayEnv
from bench.run_command import replay
from replay_dataset.files import write_dataset
from routers.base import Context, Decision
from tests.unit.bench.scripted_policy import ScriptedPolicy, always, register

MODELS = [{"name": "A", "usd_per_call": 0.01}, {"name": "B", "usd_per_call": 0.02}]
N = 9


def _rows(texts: list[str]) -> list[dict]:
    return [
        {"id": f"p{i}", "prompt": text, "rewards": {"A": i % 2, "B": 1}, "context": [1.0, float(i)]}
        for i, text in enumerate(texts)
    ]


@pytest.fixture
def dataset(tmp_path: Path) -> Dataset:
    return load_dataset(
        write_dataset(tmp_path / "d", MODELS, _rows([f"q{i}" for i in range(N)]), (0, 1), "d")
    )


def _played(policy: ScriptedPolicy, dataset: Dataset) -> list[int]:
    """The prompt of each round the policy saw, found by its (distinct) context vector."""
    assert dataset.contexts is not None
    return [int(np.argmin(((dataset.contexts - c.embedding) ** 2).sum(axis=1))) for c in policy.contexts]


def _env(dataset: Dataset, horizon: int, draws: str = "without-replacement") -> ReplayEnv:
    schedule = build_schedule(dataset.model_names, [], horizon)
    return ReplayEnv(dataset, dataset.contexts, schedule, 0.0, 0.5, draws=draws)  # type: ignore[arg-type]


@pytest.mark.parametrize("horizon", [1, 5, N])
def test_each_seed_plays_default_rng_permutation_prefix(dataset: Dataset, horizon: int) -> None:
    env = _env(dataset, horizon)
    for seed in range(4):
        prompts = env.draw(seed).prompts
        assert prompts.tolist() == np.random.default_rng(seed).permutation(N)[:horizon].tolist()
        assert len(set(prompts.tolist())) == horizon


def test_with_replacement_keeps_the_old_uniform_draws(dataset: Dataset) -> None:
    env = _env(dataset, 50, "with-replacement")
    assert env.draw(3).prompts.tolist() == np.random.default_rng(3).integers(N, size=50).tolist()


def test_no_prompt_repeats_in_a_default_run_and_t_defaults_to_n(monkeypatch, dataset: Dataset) -> None:
    register(monkeypatch, "always-a", always(lambda: Decision(arms=["A"])))
    result = replay(dataset, dataset.contexts, [parse_spec("always-a")], None, seeds=3, progress=False)
    assert result.report["horizon"] == N
    assert (result.report["draws"], result.report["repeat_share"]) == ("without-replacement", 0.0)
    for policy in ScriptedPolicy.instances[-3:]:
        assert sorted(_played(policy, dataset)) == list(range(N))


def test_a_horizon_above_n_is_refused_before_anything_runs(dataset: Dataset) -> None:
    with pytest.raises(ValueError, match=f"--horizon {N + 1} exceeds the dataset's {N} prompts"):
        _env(dataset, N + 1)
    with pytest.raises(ValueError, match="--draws with-replacement"):
        replay(dataset, dataset.contexts, [], N + 1, seeds=1, progress=False)
    assert _env(dataset, N + 1, "with-replacement").horizon == N + 1


def test_the_cli_says_why_a_horizon_above_n_fails(dataset: Dataset, capsys) -> None:
    args = ["run", "--dataset", str(dataset.path), "--policy", "linucb", "--quiet"]
    assert main([*args, "--horizon", str(N + 1)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --horizon {N + 1} exceeds the dataset's {N} prompts")
    assert "Traceback" not in err
    assert main([*args, "--horizon", str(N + 1), "--draws", "with-replacement"]) == 0


def test_repeat_share_counts_rounds_whose_text_was_played_before(tmp_path: Path, monkeypatch) -> None:
    # p1 and p3 share a text: whichever of them comes second in the seed's order is a repeat, 1 of 4 rounds
    root = write_dataset(tmp_path / "t", MODELS, _rows(["x", "same", "y", "same"]), (0, 1), "dup")
    data = load_dataset(root)
    register(monkeypatch, "always-a", always(lambda: Decision(arms=["A"])))
    report = replay(data, data.contexts, [parse_spec("always-a")], 4, seeds=3, progress=False).report
    assert report["repeat_share"] == pytest.approx(0.25)
    # with replacement: 1 - distinct texts / T per seed, averaged
    text = np.array([0, 1, 2, 1])
    expected = np.mean(
        [1 - np.unique(text[np.random.default_rng(s).integers(4, size=8)]).size / 8 for s in range(3)]
    )
    loose = replay(data, data.contexts, [], 8, seeds=3, progress=False, draws="with-replacement").report
    assert loose["draws"] == "with-replacement"
    assert loose["repeat_share"] == pytest.approx(expected)


def test_models_added_and_removed_at_thirds_still_play_without_repeats(monkeypatch, dataset: Dataset) -> None:
    def script(policy: ScriptedPolicy, context: Context) -> Decision:
        return Decision(arms=[sorted(context.costs)[-1]])

    register(monkeypatch, "scripted", script)
    events = [parse_arm_event("B@3", "add"), parse_arm_event("B@6", "remove")]
    result = replay(
        dataset, dataset.contexts, [parse_spec("scripted")], None, 2, events=events, progress=False
    )
    policy = ScriptedPolicy.instances[-1]
    assert [sorted(c.costs) for c in policy.contexts] == [["A"]] * 3 + [["A", "B"]] * 3 + [["A"]] * 3
    assert sorted(_played(policy, dataset)) == list(range(N))
    assert result.report["horizon"] == N


def test_bench_e2e_defaults_to_every_prompt_once(dataset: Dataset) -> None:
    args = build_parser().parse_args(["e2e", "--dataset", str(dataset.path), "--policy", "linucb"])
    assert (args.draws, args.horizon) == ("without-replacement", None)
    env, traces = offline_traces(dataset, dataset.contexts, parse_spec("linucb"), N, [0, 1], 0.0, 0.5)
    assert env.draws == "without-replacement"
    assert sorted(env.draw(1).prompts.tolist()) == list(range(N)) and len(traces) == 2
