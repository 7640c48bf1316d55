"""Run Alembic migrations from code (``banditgate migrate``, tests, the demo)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

import migrations


def alembic_config(database_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return cfg


def upgrade(database_url: str, revision: str = "head") -> None:
    """Bring the database at ``database_url`` to ``revision``. Runs its own event loop: call it from sync
    code (or a worker thread), not from inside a running loop."""
    command.upgrade(alembic_config(database_url), revision)
