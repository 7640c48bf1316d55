"""``banditgate apply``, ``export`` and ``serve --config`` as an operator runs them: the plan on
stdout, a refused file as one line on stderr with exit status 2 and nothing applied."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from app.cli import main
from app.store.migrate import upgrade
from tests.integration.processes import wait_until_ready
from tests.served import free_port

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "banditgate.yaml"


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An empty SQLite database the CLI's settings point at, and the example file's secrets."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}"
    upgrade(url)
    monkeypatch.setenv("BANDITGATE_DATABASE_URL", url)
    monkeypatch.setenv("BANDITGATE_EMBEDDER", "hashing")
    monkeypatch.setenv("BANDITGATE_SECRET_KEY", "cli-test-secret")
    monkeypatch.delenv("BANDITGATE_REDIS_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-example")
    monkeypatch.setenv("ACME_WEB_KEY", "bg_example-web-key")
    return url


def test_dry_run_then_apply_then_apply_again(database: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["apply", "--dry-run", str(EXAMPLE)]) == 0
    planned = capsys.readouterr().out.splitlines()
    assert (
        planned[0]
        == f"{EXAMPLE}: 8 changes to make (dry run: nothing written), 0 objects already as declared"
    )
    assert "  create router 'acme/careful'" in planned
    assert main(["apply", str(EXAMPLE)]) == 0
    applied = capsys.readouterr().out.splitlines()
    assert (
        applied[0] == f"{EXAMPLE}: 8 changes made, 0 objects already as declared"
        and applied[1:] == planned[1:]
    )
    assert main(["apply", str(EXAMPLE)]) == 0
    assert capsys.readouterr().out == f"{EXAMPLE}: nothing to change (8 objects as declared)\n"
    assert main(["export"]) == 0
    exported = yaml.safe_load(capsys.readouterr().out)
    assert exported["tenants"][0]["keys"] == [{"name": "web", "value_env": "BANDITGATE_KEY_ACME_WEB"}]
    assert "sk-example" not in str(exported)


@pytest.mark.parametrize("command", [["apply"], ["apply", "--dry-run"], ["serve", "--config"]])
def test_a_refused_file_is_one_line_and_exit_status_2(
    database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.read_text().replace("alpha: 0.5", "alpha: -1"))
    # the line of the router's hyperparameters (the first router's)
    line = next(
        i for i, text in enumerate(bad.read_text().splitlines(), 1) if text.strip() == "hyperparameters:"
    )
    assert main([*command, str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"error: {bad}:{line}: tenant 'acme' router 'main': hyperparameters: hyperparameter alpha: Input should be "
        "greater than or equal to 0, got -1 (nothing applied)\n"
    )
    assert main(["export"]) == 0
    assert yaml.safe_load(capsys.readouterr().out.split("\n", 2)[2]) == {"version": 1}


def test_serve_with_a_config_file_applies_it_then_serves(database: str) -> None:
    """A real ``banditgate serve --config`` process: the example's key routes through its router."""
    port = free_port()
    env = dict(os.environ) | {"BANDITGATE_ADMIN_KEY": "serve-config-admin"}
    command = [sys.executable, "-m", "app.cli", "serve", "--config", str(EXAMPLE), "--port", str(port)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        wait_until_ready(process, f"http://127.0.0.1:{port}")
        routed = httpx.post(
            f"http://127.0.0.1:{port}/route",
            json={"prompt": "hello"},
            headers={"Authorization": f"Bearer {os.environ['ACME_WEB_KEY']}"},
        )
        assert routed.status_code == 200 and routed.json()["router"] == "main"
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=20)
    assert out.decode().splitlines()[0] == f"{EXAMPLE}: 8 changes made, 0 objects already as declared"
