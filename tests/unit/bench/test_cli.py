"""The bench command line end to end, the report's JSON contract, converters and the embedding cache."""

from __future__ import annotations

import copy
import csv
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from bench import embedding_cache
from bench.cli import main
from bench.dataset import load_dataset
from bench.result_schema import validate_report
from embeddings.hashing import HashingEmbedder
from embeddings.prompt_text import EmbedText

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def linear_set(tmp_path: Path) -> Path:
    out = tmp_path / "linear"
    assert (
        main(
            [
                "synth",
                "linear",
                "--out",
                str(out),
                "--prompts",
                "40",
                "--models",
                "3",
                "--dim",
                "6",
                "--samples",
                "3",
            ]
        )
        == 0
    )
    return out


def test_run_end_to_end_writes_a_report_that_follows_the_contract(tmp_path: Path, linear_set: Path, capsys):
    report_path, plots = tmp_path / "out" / "report.json", tmp_path / "plots"
    code = main(
        [
            "run",
            "--dataset",
            str(linear_set),
            "--policy",
            "linucb",
            "--policy",
            "linucb:alpha=0.2",
            "--seeds",
            "3",
            "--lambda",
            "2",
            "--json",
            str(report_path),
            "--plots",
            str(plots),
            "--quiet",
            "--add-model",
            "model-2@20",
        ]
    )
    assert code == 0
    report = json.loads(report_path.read_text())
    validate_report(report)
    # no --horizon, no --draws: every one of the 40 prompts once per seed
    assert (report["horizon"], report["seeds"], report["lambda"]) == (40, 3, 2.0)
    assert (report["draws"], report["repeat_share"]) == ("without-replacement", 0.0)
    assert [p["spec"] for p in report["policies"]] == ["linucb", "linucb:alpha=0.2"]
    assert report["embedder"] == "context"
    assert report["arm_events"] == [{"model": "model-2", "round": 20, "action": "add"}]
    for row in report["policies"]:
        assert row["mean_utility"] == pytest.approx(row["mean_reward"] - 2 * row["mean_cost"])
        assert row["calls_per_round"] == 1.0 and "violation" not in row
    assert sorted(p.name for p in plots.iterdir()) == ["cost.png", "opr.png", "regret.png"]
    table = capsys.readouterr().out
    assert "linucb:alpha=0.2" in table and "oracle" in table
    assert "draws without-replacement, repeat share 0.0000" in table
    assert "knn_ceiling (knn-ceiling k=" in table


def test_the_schema_rejects_reports_that_break_the_contract(tmp_path: Path, linear_set: Path) -> None:
    report_path = tmp_path / "r.json"
    main(
        [
            "run",
            "--dataset",
            str(linear_set),
            "--policy",
            "linucb",
            "--horizon",
            "10",
            "--seeds",
            "2",
            "--json",
            str(report_path),
            "--quiet",
        ]
    )
    report = json.loads(report_path.read_text())
    for breakage in (
        lambda r: r.pop("policies"),
        lambda r: r["reference"].pop("oracle"),
        lambda r: r["policies"][0].pop("select_ms_p50"),
        lambda r: r["policies"][0].update(opr=1.5),
        lambda r: r["policies"][0].update(budget=0.1),  # a budget without violation fields
        lambda r: r.pop("draws"),
        lambda r: r.update(draws="bootstrap"),
        lambda r: r.pop("repeat_share"),
        lambda r: r.update(repeat_share=1.5),
        lambda r: r["reference"].pop("knn_ceiling"),
        lambda r: r["reference"]["knn_ceiling"].pop("k"),
    ):
        broken = copy.deepcopy(report)
        breakage(broken)
        with pytest.raises(jsonschema.ValidationError):
            validate_report(broken)


def test_python_dash_m_bench_runs(linear_set: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "run",
            "--dataset",
            str(linear_set),
            "--policy",
            "linucb",
            "--horizon",
            "5",
            "--seeds",
            "1",
            "--quiet",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "best_single" in done.stdout


def test_bad_spec_is_reported_not_raised(linear_set: Path, capsys) -> None:
    assert (
        main(
            [
                "run",
                "--dataset",
                str(linear_set),
                "--policy",
                "linucb:alpha=-1",
                "--horizon",
                "5",
                "--seeds",
                "1",
                "--quiet",
            ]
        )
        == 2
    )
    assert "alpha" in capsys.readouterr().err


def _fake_routellm(root: Path) -> Path:
    models = ["mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"]
    mmlu = root / "routellm" / "mmlu"
    mmlu.mkdir(parents=True)
    with (mmlu / "mmlu_anatomy.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["prompt", *models])
        w.writerows(
            [
                ["Q1\nA. x\nAnswer:", "True", "False"],
                ["Q2\nA. y\nAnswer:", "False", "True"],
                ["Q1\nA. x\nAnswer:", "True", "True"],
            ]
        )
    gsm = root / "routellm" / "gsm8k"
    gsm.mkdir(parents=True)
    with (gsm / "gsm8k_responses.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["prompt", *models, *(f"{m}_response" for m in models)])
        w.writerow(["How many?", "False", "True", "a" * 40, "b" * 400])
    mt = root / "routellm" / "mt_bench"
    mt.mkdir(parents=True)
    (mt / "question.jsonl").write_text(
        json.dumps({"question_id": 7, "category": "writing", "turns": ["Write.", "Again."]}) + "\n"
    )
    lines = []
    for model, (s1, s2) in zip(models, [(6, 3), (9, 10)], strict=True):
        single = (
            f"[Question]\nWrite.\n\n[The Start of Assistant's Answer]\n{model[:3]}-one\n"
            "[The End of Assistant's Answer]"
        )
        multi = (
            "<|The Start of Assistant A's Conversation with User|>\n\n### User:\nWrite.\n\n### Assistant A:\n"
            f"{model[:3]}-one\n\n### User:\nAgain.\n\n### Assistant A:\n{model[:3]}-two-long\n\n"
            "<|The End of Assistant A's Conversation with User|>"
        )
        lines.append({"question_id": 7, "model": model, "turn": 1, "score": s1, "user_prompt": single})
        lines.append({"question_id": 7, "model": model, "turn": 2, "score": s2, "user_prompt": multi})
    (mt / "judgements.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return root


def test_routellm_converters(tmp_path: Path) -> None:
    data = _fake_routellm(tmp_path / "shared")
    mixtral, gpt4 = "mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"
    assert main(["convert", "mmlu", "--data", str(data), "--out", str(tmp_path / "mmlu")]) == 0
    mmlu = load_dataset(tmp_path / "mmlu")
    assert mmlu.ids == ["mmlu/anatomy/0", "mmlu/anatomy/1", "mmlu/anatomy/2"]
    assert mmlu.prompts[0] == mmlu.prompts[2]
    np.testing.assert_array_equal(mmlu.mean_reward, [[1, 0], [0, 1], [1, 1]])
    # prices from bench/data/prices.json; 256 default output tokens, prompt chars / 4 input tokens
    tokens_in = len("Q1\nA. x\nAnswer:") / 4
    assert mmlu.cost[0, 1] == pytest.approx(tokens_in * 10e-6 + 256 * 30e-6)
    assert mmlu.cost[0, 0] == pytest.approx((tokens_in + 256) * 0.6e-6)

    assert main(["convert", "mmlu", "--data", str(data), "--out", str(tmp_path / "m2"), "--limit", "2"]) == 0
    assert load_dataset(tmp_path / "m2").n_prompts == 2

    assert main(["convert", "gsm8k", "--data", str(data), "--out", str(tmp_path / "gsm")]) == 0
    gsm = load_dataset(tmp_path / "gsm")
    np.testing.assert_allclose(gsm.tokens_out, [[10, 100]])

    assert main(["convert", "mt-bench", "--data", str(data), "--out", str(tmp_path / "mt")]) == 0
    mt = load_dataset(tmp_path / "mt")
    assert mt.ids == ["mt-bench/7/turn1", "mt-bench/7/turn2"]
    assert mt.model_names == [mixtral, gpt4]
    np.testing.assert_allclose(mt.mean_reward, [[0.6, 0.9], [0.3, 1.0]])
    assert mt.reward_range == (0.1, 1.0)
    assert mt.responses[1] == {mixtral: "mis-two-long", gpt4: "gpt-two-long"}
    # turn 2 input: "Write." + "mis-one" + "Again." = 6 + 7 + 6 characters
    np.testing.assert_allclose(mt.tokens_in[1], [19 / 4, 19 / 4])
    assert "turn-2 tokens_in" in mt.notes


def test_embedding_cache_embeds_each_prompt_once_and_reuses_shards(tmp_path: Path, monkeypatch) -> None:
    cache = tmp_path / "cache"
    first = embedding_cache.embed_prompts(
        ["a b", "c d", "a b"], "hashing:16", cache_dir=cache, progress=False
    )
    assert first.shape == (3, 16)
    np.testing.assert_array_equal(first[0], first[2])
    assert len(list((cache / "hashing_16").glob("*.npz"))) == 1

    def no_model(name: str):
        raise AssertionError("the cache should have answered")

    monkeypatch.setattr(embedding_cache, "load_embedder", no_model)
    again = embedding_cache.embed_prompts(["c d", "a b"], "hashing:16", cache_dir=cache, progress=False)
    np.testing.assert_array_equal(again, first[[1, 0]])
    monkeypatch.undo()
    more = embedding_cache.embed_prompts(["a b", "e f"], "hashing:16", cache_dir=cache, progress=False)
    np.testing.assert_array_equal(more[0], first[0])
    assert len(list((cache / "hashing_16").glob("*.npz"))) == 2


def test_embedding_cache_is_keyed_by_the_text_the_rule_embeds(tmp_path: Path) -> None:
    """A long prompt gets a new vector when the rule changes (never the other rule's); a prompt within
    the budget is the same text under every rule, so its vector is reused. hashing: 4 characters a piece,
    head:8 keeps 32 characters."""
    cache = tmp_path / "cache"
    long_prompt, short = "word " * 20 + "end", "a b"
    head = embedding_cache.embed_prompts(
        [long_prompt, short], "hashing:16", cache, progress=False, rule=EmbedText("head", 8)
    )
    tail = embedding_cache.embed_prompts(
        [long_prompt, short], "hashing:16", cache, progress=False, rule=EmbedText("head-tail", 8)
    )
    model = HashingEmbedder(16)
    np.testing.assert_array_equal(head[0], model.embed([long_prompt[:32]])[0])
    # head-tail:8 of 103 characters (26 pieces): the first 2 pieces ("word wor"), and the last 6 from
    # piece 20 (character 80, a word start): "word word word word end"
    np.testing.assert_array_equal(tail[0], model.embed(["word wor\nword word word word end"])[0])
    np.testing.assert_array_equal(head[1], tail[1])
    shards = [np.load(f)["keys"].tolist() for f in (cache / "hashing_16").glob("*.npz")]
    assert sorted(len(keys) for keys in shards) == [1, 2]  # the second rule embedded the long prompt only


def test_cache_dir_defaults_to_env_var(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BANDITGATE_CACHE_DIR", str(tmp_path))
    assert embedding_cache.default_cache_dir() == tmp_path / "embeddings"
    monkeypatch.delenv("BANDITGATE_CACHE_DIR")
    assert embedding_cache.default_cache_dir() == Path.home() / ".cache" / "banditgate" / "embeddings"
