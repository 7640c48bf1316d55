"""``bench split``: a replay dataset -> a tuning part and a reporting part, by distinct prompt text.

Defaults and hyperparameters are chosen on one part of a dev set and reported on the other, so that a
figure never rests on the prompts it was tuned on. Rows are grouped by prompt *text* (MMLU holds 105
texts twice under distinct ids: both copies land in the same part), the distinct texts are shuffled with
``np.random.default_rng(seed).permutation``, and the first ``round(fraction x texts)`` go to ``tune``,
the rest to ``report``. ``models.json`` is copied into both, with the split recorded in it.

    banditgate bench split --dataset /tmp/bg/mmlu --fraction 0.5 --seed 0 --out /tmp/bg/mmlu-halves
    # -> /tmp/bg/mmlu-halves/tune and /tmp/bg/mmlu-halves/report
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.cli import documented_parser
from replay_dataset.files import read_dataset, write_dataset

PARTS = ("tune", "report")


def split_rows(rows: Sequence[Mapping[str, Any]], fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Row indices of the tuning and reporting parts, each in file order; same-text rows stay together."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"--fraction must lie strictly between 0 and 1, got {fraction}")
    texts: dict[str, int] = {}
    group = [texts.setdefault(str(row.get("prompt", row.get("id"))), len(texts)) for row in rows]
    n_tune = round(fraction * len(texts))
    if n_tune == 0 or n_tune == len(texts):
        raise ValueError(f"{len(texts)} distinct prompts cannot be split {fraction:g} : {1 - fraction:g}")
    tune_groups = set(np.random.default_rng(seed).permutation(len(texts))[:n_tune].tolist())
    tune = [i for i, g in enumerate(group) if g in tune_groups]
    report = [i for i, g in enumerate(group) if g not in tune_groups]
    return tune, report


def split_dataset(directory: Path, out: Path, fraction: float, seed: int) -> dict[str, int]:
    """Write ``out/tune`` and ``out/report``; returns the number of rows in each. Rows the reader drops
    (no usable reward for some model) are in neither part."""
    data = read_dataset(directory)
    rows = [row.fields for row in data.rows]
    meta = {k: v for k, v in data.meta.fields.items() if k not in ("models", "reward_range", "description")}
    parts = dict(zip(PARTS, split_rows(rows, fraction, seed), strict=True))
    counts: dict[str, int] = {}
    for part, indices in parts.items():
        split = {"source": str(directory), "part": part, "fraction": fraction, "seed": seed}
        write_dataset(
            out / part,
            data.meta.fields["models"],
            [rows[i] for i in indices],
            data.meta.reward_range,
            data.meta.description,
            **{**meta, "split": split},
        )
        counts[part] = len(indices)
    return counts


def _main(args: argparse.Namespace) -> int:
    counts = split_dataset(Path(args.dataset), Path(args.out), args.fraction, args.seed)
    for part in PARTS:
        print(f"wrote {counts[part]} rows to {Path(args.out) / part}")
    return 0


def add_subcommand(subparsers: Any) -> None:
    parser = documented_parser(
        subparsers,
        "split",
        "split a replay dataset into tuning and reporting parts by distinct prompt text",
        __doc__,
    )
    parser.add_argument("--dataset", required=True, help="a replay dataset directory")
    parser.add_argument("--out", required=True, help="writes OUT/tune and OUT/report")
    parser.add_argument("--fraction", type=float, default=0.5, help="share of distinct prompts to tune on")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(handler=_main)
