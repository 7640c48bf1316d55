"""docs/settings.md is rendered from the settings model and committed; it must match what the model says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from app.settings import Settings
from app.settings_doc import REGENERATE, settings_markdown

ROOT = Path(__file__).resolve().parents[3]


def test_committed_settings_page_is_current() -> None:
    committed = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert committed == settings_markdown(), f"docs/settings.md is stale: regenerate it with `{REGENERATE}`"


def test_every_setting_has_a_row_with_its_default_and_bounds() -> None:
    page = settings_markdown()
    settings_table = page.split("Other variables")[0]
    rows = [line for line in settings_table.splitlines() if line.startswith("| `BANDITGATE_")]
    assert len(rows) == len(Settings.model_fields)
    assert "| `BANDITGATE_DATABASE_URL` | `sqlite+aiosqlite:///./banditgate.db` | text |" in page
    assert "| `BANDITGATE_REDIS_URL` | unset | text |" in page
    assert "| `BANDITGATE_SEARCH_THREADS` | `1` | integer, >= 1, <= 256 |" in page
    assert "| `BANDITGATE_GC_FREEZE` | `true` | true/false |" in page
    assert "| `BANDITGATE_HTTP_PARSER` | `httptools` | `httptools`, `h11` |" in page
    assert "| `BANDITGATE_FORWARD_BACKOFF_S` | `0.2` | number, >= 0 |" in page
    assert "| `BANDITGATE_RATE_LIMIT_PREFIX` | `banditgate:ratelimit` | text, non-empty |" in page
    assert "| `BANDITGATE_ADMIN_KEY` | unset | text (secret) |" in page


def test_a_pipe_in_a_description_does_not_break_the_table() -> None:
    for line in settings_markdown().splitlines():
        if line.startswith("| `"):
            cells = line.replace("\\|", "").split("|")
            assert len(cells) in (5, 6), line  # 3 or 4 columns between the outer pipes


def test_the_regeneration_command_prints_the_page(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "settings-doc"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "BANDITGATE_SEARCH_THREADS": "7"},
    )
    assert result.stdout == settings_markdown()  # the defaults, never the environment's values
