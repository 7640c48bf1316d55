"""``bench convert SET``: public evaluation data -> the replay format (docs/datasets.md).

The RouteLLM text sets (``mmlu``, ``gsm8k``, ``mt-bench``: ``bench.convert_routellm``), the sixteen graded
chat models of ``arena-bench`` (``bench.convert_arena``) and the text-to-image rating sets (``agiqa3k``,
``tifa160``: ``bench.convert_images``).
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.cli import documented_parser
from bench.convert_arena import ARENA_SET, convert_arena_main
from bench.convert_images import AGIQA_REWARDS, IMAGE_SETS, convert_images_main
from bench.convert_routellm import convert_main as convert_routellm_main

ROUTELLM_SETS = ("mmlu", "gsm8k", "mt-bench")


def convert_main(args: argparse.Namespace) -> int:
    if args.set in IMAGE_SETS:
        return convert_images_main(args)
    if args.set == ARENA_SET:
        return convert_arena_main(args)
    return convert_routellm_main(args)


def add_subcommand(subparsers: Any) -> None:
    parser = documented_parser(
        subparsers,
        "convert",
        "convert the RouteLLM, arena-bench or text-to-image rating data to the replay format",
        __doc__,
    )
    parser.add_argument("set", choices=(*ROUTELLM_SETS, ARENA_SET, *IMAGE_SETS))
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument(
        "--data",
        default="../shared/data",
        help="data directory holding routellm/, arena-bench/ and images/ (default ../shared/data, the full sets beside "
        "the clone; tests/data holds small fixtures)",
    )
    parser.add_argument(
        "--prices",
        default=None,
        help="prices JSON (default bench/data/prices.json; arena-bench: bench/data/arena_prices.json; image "
        "sets: bench/data/image_prices.json; bench/data/prices_swapped.json swaps the RouteLLM pair's prices)",
    )
    parser.add_argument("--subjects", default=None, help="mmlu: comma-separated subjects (default all)")
    parser.add_argument(
        "--limit", type=int, default=None, help="routellm sets, arena-bench: keep this many prompts at random"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the --limit draw")
    parser.add_argument(
        "--default-tokens-out", type=float, default=None, help="per-model default_tokens_out (harness: 256)"
    )
    parser.add_argument(
        "--reward",
        choices=tuple(AGIQA_REWARDS),
        default="align",
        help="agiqa3k: mos_align (text alignment, default) or mos_quality (perceptual) / 5",
    )
    parser.set_defaults(handler=convert_main)
