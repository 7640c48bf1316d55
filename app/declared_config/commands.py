"""The ``banditgate apply``, ``export`` and ``config-schema`` commands, and ``serve --config``'s
start-up apply: each prints one line on error and exits 2 for a refused file, 1 when the database
cannot be reached."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from app.declared_config.run import apply_file, export_text
from app.declared_config.schema import config_schema_text
from app.declared_config.source import ConfigError
from app.settings import Settings


def _fail(code: int, message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def apply_path(path: Path, prune: bool = False, dry_run: bool = False) -> int:
    """Apply (or plan) the file and print the plan; the exit status."""
    settings = Settings()
    try:
        plan = asyncio.run(apply_file(settings, path, os.environ, prune=prune, dry_run=dry_run))
    except ConfigError as exc:
        return _fail(2, f"{exc} (nothing applied)")
    except (SQLAlchemyError, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return _fail(1, f"cannot apply to the database {settings.database_url}: {first}")
    print(plan.summary(str(path), dry_run), flush=True)
    return 0


def cmd_apply(args: argparse.Namespace) -> int:
    return apply_path(args.file, prune=args.prune, dry_run=args.dry_run)


def cmd_export(args: argparse.Namespace) -> int:
    settings = Settings()
    try:
        text = asyncio.run(export_text(settings))
    except (SQLAlchemyError, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return _fail(1, f"cannot read the database {settings.database_url}: {first}")
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text, encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


def cmd_config_schema(args: argparse.Namespace) -> int:
    sys.stdout.write(config_schema_text())
    return 0
