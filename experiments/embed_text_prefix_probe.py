"""Does the question or the shared prefix dominate a plain prompt's vector? (docs/benchmarks.md, "What
the embedder sees".) Two few-shot prefixes of at least 1,500 MiniLM word pieces, made of a converted
MMLU set's prompts (high-school biology, US foreign policy), then 20 questions (high-school mathematics,
world religions); per embed-text rule, the mean cosine of the same question under the two prefixes
against that of two different questions under one prefix.

    nice -n 10 python -m experiments.embed_text_prefix_probe /tmp/bg/mmlu
"""

from __future__ import annotations

import argparse

import numpy as np

from bench.dataset import load_dataset
from bench.embedding_cache import embed_prompts
from embeddings.prompt_text import EmbedText
from embeddings.registry import load_tokenizer

RULES = (
    EmbedText("head"),
    EmbedText("head-tail"),
    EmbedText("head-tail", 128),
    EmbedText("head-tail", 64),
    EmbedText("chunk-mean"),
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dataset", help="a converted MMLU replay dataset (bench convert mmlu)")
    parser.add_argument("--embedder", default="minilm")
    args = parser.parse_args(argv)
    dataset = load_dataset(args.dataset)
    by_subject: dict[str, list[str]] = {}
    for prompt, group in zip(dataset.prompts, dataset.groups, strict=True):
        by_subject.setdefault(str(group), []).append(prompt)
    tokenizer = load_tokenizer("minilm")
    prefixes = []
    for subject in ("high_school_biology", "us_foreign_policy"):
        prefix = f"The following are multiple choice questions (with answers) about {subject}.\n\n"
        for prompt in by_subject[subject]:
            if len(tokenizer.spans(prefix)) > 1500:
                break
            prefix += prompt + " A\n\n"
        prefixes.append(prefix)
    questions = by_subject["high_school_mathematics"][:10] + by_subject["world_religions"][:10]
    print("| rule | same question, two prefixes | two questions, one prefix |")
    for rule in RULES:
        prompts = [p + q for p in prefixes for q in questions]
        vectors = embed_prompts(prompts, args.embedder, rule=rule, progress=False).reshape(
            2, len(questions), -1
        )
        same = np.einsum("qd,qd->q", vectors[0], vectors[1]).mean()
        gram = vectors[0] @ vectors[0].T
        other = gram[np.triu_indices(len(questions), 1)].mean()
        print(f"| {rule.strategy}:{rule.max_tokens or 254} | {same:.2f} | {other:.2f} |")


if __name__ == "__main__":
    main()
