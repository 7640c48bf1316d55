"""How many distinct texts MiniLM embeds for each dataset under an embed-text rule (docs/benchmarks.md,
"What the embedder sees"). Distinct embedded texts bound the distinct vectors from above; only the
tokenizer runs, no model, unless ``--vectors``: then the prompts are embedded with MiniLM under each
rule (through the bench's cache) and distinct vectors, rounded to 1e-6, are counted too.

    python -m experiments.embed_text_distinct /tmp/bg/mmlu /tmp/bg/gsm8k /tmp/bg/mtbench
    python -m experiments.embed_text_distinct --vectors /tmp/bg/mtbench
    python -m experiments.embed_text_distinct --vectors --default-only /tmp/bg/mmlu   # the default rule only
"""

from __future__ import annotations

import sys

import numpy as np

from bench.dataset import load_dataset
from bench.embedding_cache import embed_prompts
from embeddings.prompt_text import EmbedText, embedding_texts
from embeddings.registry import load_tokenizer

RULES = (EmbedText("head"), EmbedText())


def main(paths: list[str], vectors: bool, rules: tuple[EmbedText, ...] = RULES) -> None:
    tokenizer = load_tokenizer("minilm")
    columns = [f"texts {r.strategy}" for r in rules] + (
        [f"vectors {r.strategy}" for r in rules] if vectors else []
    )
    print("| dataset | prompts | distinct prompts | over 254 pieces | " + " | ".join(columns) + " |")
    for path in paths:
        prompts = load_dataset(path).prompts
        over = sum(len(tokenizer.spans(p)) > 254 for p in set(prompts))
        counts = [len({tuple(embedding_texts(p, rule, tokenizer)) for p in prompts}) for rule in rules]
        if vectors:
            counts += [
                len({tuple(row) for row in np.round(embed_prompts(prompts, rule=rule, progress=False), 6)})
                for rule in rules
            ]
        cells = [path, len(prompts), len(set(prompts)), over, *counts]
        print("| " + " | ".join(str(c) for c in cells) + " |")


if __name__ == "__main__":
    args = sys.argv[1:]
    flags = ("--vectors", "--default-only")
    main(
        [a for a in args if a not in flags],
        "--vectors" in args,
        RULES[1:] if "--default-only" in args else RULES,
    )
