"""The simulated judge: spec parsing, flip rates, determinism, price, and judged rounds in the replay."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.special import ndtri

from bench.cli import main
from bench.dataset import load_dataset
from bench.judge import ESTIMATED_TEXT, RESPONSE_TEXT, Judge, judge_uniform, parse_judge
from bench.policy_spec import parse_spec
from bench.replay_env import ReplayEnv
from replay_dataset.files import write_dataset
from routers.base import Context, Decision
from tests.unit.bench.scripted_policy import ScriptedPolicy, always, register, replay_with_repeats

REPO = Path(__file__).resolve().parents[3]


def _dataset(tmp_path: Path, n: int, rewards: dict[str, float], **extra):
    rows = [
        {"id": f"p{i}", "prompt": f"prompt {i}", "rewards": rewards, "context": [1.0, float(i)]}
        for i in range(n)
    ]
    models = [{"name": name, "usd_per_call": 0.001 * (k + 1)} for k, name in enumerate(rewards)]
    return load_dataset(write_dataset(tmp_path / "d", models, rows, (0.0, 1.0), "judge", **extra))


def test_specs_parse_like_policy_specs_and_bad_ones_name_the_key() -> None:
    spec = parse_judge("verdict:tpr=0.85,tnr=0.7,model=m")
    assert (spec.kind, spec.tpr, spec.tnr, spec.model) == ("verdict", 0.85, 0.7, "m")
    assert (spec.overhead_tokens, spec.tokens_out) == (150.0, 16.0)
    assert parse_judge("verdict").tpr == 1.0 and parse_judge("verdict").tnr == 1.0
    assert parse_judge("score:sigma=0.1").sigma == 0.1
    with pytest.raises(ValueError, match="unknown kind 'oracle'"):
        parse_judge("oracle:tpr=1")
    with pytest.raises(ValueError, match="unknown key 'sigma' for a verdict judge"):
        parse_judge("verdict:sigma=0.1")
    with pytest.raises(ValueError, match=r"tpr must be in \[0, 1\]"):
        parse_judge("verdict:tpr=1.5")
    with pytest.raises(ValueError, match="sigma must be >= 0"):
        parse_judge("score:sigma=-1")
    with pytest.raises(ValueError, match="'tnr' given twice"):
        parse_judge("verdict:tnr=0.5,tnr=0.6")


def test_verdicts_flip_at_the_stated_rates(tmp_path: Path) -> None:
    n = 4000
    data = _dataset(tmp_path, n, {"right": 1.0, "wrong": 0.0})
    judge = Judge(parse_judge("verdict:tpr=0.85,tnr=0.7"), data)
    flips_on_successes = sum(judge.grade(3, p, 0, 1.0, 0.5) == 0.0 for p in range(n))
    flips_on_failures = sum(judge.grade(3, p, 1, 0.0, 0.5) == 1.0 for p in range(n))
    for flips, rate in ((flips_on_successes, 0.15), (flips_on_failures, 0.3)):
        bound = 4 * math.sqrt(n * rate * (1 - rate))  # four binomial standard deviations
        assert abs(flips - n * rate) < bound
    # a worse judge errs on a superset of the answers a better one errs on (common noise)
    worse = Judge(parse_judge("verdict:tpr=0.7,tnr=0.7"), data)
    better_errs = {p for p in range(n) if judge.grade(3, p, 0, 1.0, 0.5) == 0.0}
    worse_errs = {p for p in range(n) if worse.grade(3, p, 0, 1.0, 0.5) == 0.0}
    assert better_errs < worse_errs


def test_a_score_judge_adds_the_stated_noise_clipped_to_the_range(tmp_path: Path) -> None:
    data = _dataset(tmp_path, 3, {"a": 0.5})
    judge = Judge(parse_judge("score:sigma=0.1"), data)
    for p in range(3):
        z = float(ndtri(judge_uniform(7, f"p{p}", "a")))
        assert judge.grade(7, p, 0, 0.5, 0.5) == pytest.approx(min(max(0.5 + 0.1 * z, 0.0), 1.0))
    assert Judge(parse_judge("score:sigma=1000"), data).grade(7, 0, 0, 0.5, 0.5) in (0.0, 1.0)
    assert Judge(parse_judge("score"), data).grade(7, 0, 0, 0.37, 0.5) == 0.37


def test_the_price_of_a_judged_answer(tmp_path: Path) -> None:
    models = [
        {"name": "judge-me", "usd_per_mtok_in": 2.0, "usd_per_mtok_out": 4.0, "usd_per_call": 0.001},
        {"name": "dear", "usd_per_mtok_in": 20.0, "usd_per_mtok_out": 40.0},
    ]
    row = {
        "id": "only",
        "prompt": "abcd" * 10,  # 40 characters
        "rewards": {"judge-me": 1, "dear": 1},
        "responses": {"judge-me": "x" * 80},  # 80 characters
        "tokens_out": {"dear": 30},  # no response: 30 tokens x 4 = 120 characters
    }
    data = load_dataset(write_dataset(tmp_path / "p", models, [row], (0.0, 1.0), "price"))
    judge = Judge(parse_judge("verdict"), data)
    assert judge.model == "judge-me"  # the cheapest judge by default
    # (40 + 80) / 4 + 150 = 180 tokens in, 16 out
    assert judge.cost[0, 0] == pytest.approx(180 * 2e-6 + 16 * 4e-6 + 0.001)
    # (40 + 120) / 4 + 150 = 190 tokens in
    assert judge.cost[0, 1] == pytest.approx(190 * 2e-6 + 16 * 4e-6 + 0.001)
    assert judge.answer_sources == {RESPONSE_TEXT: 1, ESTIMATED_TEXT: 1}
    named = Judge(parse_judge("verdict:model=dear,overhead_tokens=0,tokens_out=1"), data)
    assert named.cost[0, 0] == pytest.approx(30 * 20e-6 + 40e-6)
    with pytest.raises(ValueError, match="'ghost' is not in the dataset"):
        Judge(parse_judge("verdict:model=ghost"), data)


def _verdicts_by_prompt(monkeypatch, data, draws: str, seed: int) -> dict[tuple[int, str], float]:
    """Every (prompt, model) -> the reward a fixed cascade was shown, in one replay of ``seed``."""
    register(monkeypatch, "scripted", always(lambda: Decision(arms=["right", "wrong"], mode="cascade")))
    judge = Judge(parse_judge("verdict:tpr=0.5,tnr=0.5"), data)
    from bench.run_command import replay

    replay(
        data,
        data.contexts,
        [parse_spec("scripted")],
        horizon=60,
        seeds=seed + 1,
        progress=False,
        draws=draws,
        judge=judge,
    )
    policy = ScriptedPolicy.instances[-1]
    env = ReplayEnv(data, data.contexts, _schedule(data, 60), 0.0, 0.5, draws=draws)
    prompts = env.draw(seed).prompts
    return {(int(prompts[o.extra["round"]]), o.arm): float(o.reward) for o in policy.observations}


def _schedule(data, horizon):
    from bench.arm_schedule import build_schedule

    return build_schedule(data.model_names, [], horizon)


def test_verdicts_depend_on_seed_prompt_and_model_not_on_the_order_of_play(
    tmp_path: Path, monkeypatch
) -> None:
    data = _dataset(tmp_path, 80, {"right": 1.0, "wrong": 0.0})
    in_order = _verdicts_by_prompt(monkeypatch, data, "without-replacement", 2)
    other_order = _verdicts_by_prompt(monkeypatch, data, "with-replacement", 2)
    common = set(in_order) & set(other_order)
    assert len(common) > 20
    assert all(in_order[key] == other_order[key] for key in common)
    judge = Judge(parse_judge("verdict:tpr=0.5,tnr=0.5"), data)
    for prompt, arm in common:
        k = data.model_names.index(arm)
        assert in_order[prompt, arm] == judge.grade(2, prompt, k, float(data.mean_reward[prompt, k]), 0.5)
    # a different seed draws other verdicts
    assert any(judge.grade(2, p, 0, 1.0, 0.5) != judge.grade(5, p, 0, 1.0, 0.5) for p in range(80))


# One prompt: cheap is wrong, mid is right (threshold 0.5).
MODELS = [{"name": "cheap", "usd_per_call": 0.001}, {"name": "mid", "usd_per_call": 0.01}]
ROWS = [{"id": "only", "prompt": "p" * 8, "rewards": {"cheap": 0, "mid": 1}, "context": [1.0, 0.0]}]


def test_a_judged_cascade_stops_on_the_grade_pays_the_judge_and_delivers_the_true_reward(
    tmp_path: Path, monkeypatch
) -> None:
    data = load_dataset(write_dataset(tmp_path / "one", MODELS, ROWS, (0.0, 1.0), "one prompt"))
    register(monkeypatch, "scripted", always(lambda: Decision(arms=["cheap", "mid"], mode="cascade")))
    # a judge that is always wrong passes the wrong cheap answer: the cascade stops there
    judge = Judge(parse_judge("verdict:tpr=0,tnr=0"), data)
    result = replay_with_repeats(data, [parse_spec("scripted")], horizon=3, seeds=1, judge=judge)
    policy = ScriptedPolicy.instances[-1]
    assert [(o.arm, o.reward, o.extra["success"]) for o in policy.observations] == [("cheap", 1.0, True)] * 3
    assert judge.model == "cheap" and judge.cost[0, 0] == 0.001  # the cheapest: its per-call price
    trace = result.runs["scripted"][0]
    np.testing.assert_allclose(trace.cost, 0.001 + 0.001)
    np.testing.assert_allclose(trace.reward, 0.0)  # the user got the wrong answer
    assert result.report["policies"][0]["success_rate"] == 0.0
    assert result.report["policies"][0]["judge"]["false_pass_share"] == 1.0
    assert result.report["judge"]["spec"] == "verdict:tpr=0,tnr=0"

    # a perfect judge priced at mid's 0.01 per call: both answers judged, the cascade stops at mid
    perfect = Judge(parse_judge("verdict:model=mid"), data)
    result = replay_with_repeats(data, [parse_spec("scripted")], horizon=3, seeds=1, judge=perfect)
    trace = result.runs["scripted"][0]
    np.testing.assert_allclose(trace.cost, 0.001 + 0.01 + 2 * 0.01)
    np.testing.assert_allclose(trace.judge_cost, 2 * 0.01)
    np.testing.assert_allclose(trace.reward, 1.0)


def test_single_choice_rounds_are_not_judged(tmp_path: Path, monkeypatch) -> None:
    data = load_dataset(write_dataset(tmp_path / "one", MODELS, ROWS, (0.0, 1.0), "one prompt"))
    register(monkeypatch, "scripted", always(lambda: Decision(arms=["cheap"])))
    judge = Judge(parse_judge("verdict:tpr=0,tnr=0,model=mid"), data)
    result = replay_with_repeats(data, [parse_spec("scripted")], horizon=3, seeds=1, judge=judge)
    assert [o.reward for o in ScriptedPolicy.instances[-1].observations] == [0.0] * 3
    np.testing.assert_allclose(result.runs["scripted"][0].cost, 0.001)


def test_an_adaptive_cascade_continues_past_a_false_fail(tmp_path: Path, monkeypatch) -> None:
    data = load_dataset(write_dataset(tmp_path / "one", MODELS, ROWS, (0.0, 1.0), "one prompt"))

    def script(policy: ScriptedPolicy, context: Context) -> Decision:
        left = [a for a in ("mid", "cheap") if a not in context.tried]
        return Decision(arms=left[:1], mode="cascade", adaptive=True)

    register(monkeypatch, "scripted", script)
    # always wrong: mid's right answer fails, cheap's wrong one passes; the user gets the later answer
    judge = Judge(parse_judge("verdict:tpr=0,tnr=0"), data)
    result = replay_with_repeats(data, [parse_spec("scripted")], horizon=2, seeds=1, judge=judge)
    shown = [(o.arm, o.reward) for o in ScriptedPolicy.instances[-1].observations]
    assert shown == [("mid", 0.0), ("cheap", 1.0)] * 2
    np.testing.assert_allclose(result.runs["scripted"][0].reward, 0.0)


def test_bench_run_with_a_judge_on_the_routellm_cut(tmp_path: Path) -> None:
    data = tmp_path / "mmlu"
    assert main(["convert", "mmlu", "--data", str(REPO / "tests" / "data"), "--out", str(data)]) == 0
    common = ["run", "--dataset", str(data), "--embedder", "hashing", "--horizon", "120", "--seeds", "2"]
    common += ["--quiet", "--policy", "promptwise", "--policy", "lowest-cost"]
    assert main([*common, "--json", str(tmp_path / "plain.json")]) == 0
    judge = "verdict:tpr=1,tnr=1"
    assert main([*common, "--judge", judge, "--json", str(tmp_path / "judged.json")]) == 0
    plain = json.loads((tmp_path / "plain.json").read_text())
    judged = json.loads((tmp_path / "judged.json").read_text())
    assert plain["judge"] is None
    recorded = judged["judge"]
    assert recorded["spec"] == judge and recorded["model"] == "mistralai/Mixtral-8x7B-Instruct-v0.1"
    assert recorded["answer_characters"] == {ESTIMATED_TEXT: 600}
    cascade, single = judged["policies"]
    # a perfect judge plays the same rounds as the labels; the cost column adds exactly its price
    before = plain["policies"][0]
    assert cascade["mean_reward"] == before["mean_reward"]
    assert cascade["judge"]["cost_per_round"] > 0
    assert cascade["mean_cost"] == pytest.approx(before["mean_cost"] + cascade["judge"]["cost_per_round"])
    assert single["mean_cost"] == plain["policies"][1]["mean_cost"]
    assert single["judge"]["calls_per_round"] == 0.0
    assert main([*common, "--judge", "verdict:tpr=2"]) == 2
