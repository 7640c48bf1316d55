"""``banditgate bench ...`` / ``python -m bench ...``: the benchmark command line.

Every subcommand lives in its own module, which defines ``add_subcommand(subparsers)``: it adds its parser
and sets ``handler`` (a function of the parsed namespace returning an exit code); ``documented_parser``
makes a parser whose ``--help`` shows the module doc as written. Adding a subcommand is one line in
``SUBCOMMAND_MODULES``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from bench.wrk_load import LoadError
from routers.base import PolicyConfigError

SUBCOMMAND_MODULES: tuple[str, ...] = (
    "bench.run_command",
    "bench.convert_command",
    "bench.synthetic",
    "bench.mixture",
    "bench.e2e_command",
    "bench.split",
    "bench.gateway_bench",
    "bench.frontier",
    "bench.references_at",
    "bench.rate_limit_load",
)


def documented_parser(subparsers: Any, name: str, help: str, doc: str | None) -> argparse.ArgumentParser:
    """Subcommand ``name``'s parser, its ``--help`` description the module doc ``doc`` with its line
    breaks kept and its reStructuredText code marks (double backquotes) dropped."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=help,
        description=None if doc is None else doc.replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="banditgate bench", description="Offline replay benchmarks.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMAND_MODULES:
        importlib.import_module(module).add_subcommand(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        code: int = args.handler(args)
    except (PolicyConfigError, ValueError, OSError, LoadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return code
