"""A user's mistake on the ``banditgate`` command line (a path that is not there, a malformed file, a
gateway that does not answer) prints one ``error:`` line, no traceback, and exits 2 (1 for a gateway
that cannot be reached); and the command the demo prints for the replay evaluator runs from any shell."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import cli_command, main
from app.demo_dataset import write_demo_dataset
from tests.served import free_port

WARM = [
    "warm-start",
    "--gateway",
    "http://127.0.0.1:9",
    "--admin-key",
    "adm_x",
    "--tenant",
    "t",
    "--router",
    "r",
]


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "Traceback" not in captured.err + captured.out
    return lines[0]


def test_warm_start_from_a_dataset_directory_that_is_not_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*WARM, "--dataset", str(tmp_path / "logs")]) == 2
    line = one_error_line(capsys)
    assert str(tmp_path / "logs" / "models.json") in line and "No such file" in line


def test_warm_start_from_a_jsonl_file_that_is_not_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*WARM, "--jsonl", str(tmp_path / "calls.jsonl")]) == 2
    assert str(tmp_path / "calls.jsonl") in one_error_line(capsys)


def test_a_malformed_dataset_names_its_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "models.json").write_text("{not json")
    assert main(["replay-backends", "--dataset", str(tmp_path)]) == 2
    assert "models.json" in one_error_line(capsys)


def test_the_evaluator_against_a_gateway_that_does_not_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = write_demo_dataset(tmp_path / "demo", n=5)
    gateway = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    args = ["replay-evaluator", "--gateway", gateway, "--api-key", "bg_x", "--dataset", str(dataset)]
    assert main(args) == 1
    assert f"the gateway at {gateway} could not be reached" in one_error_line(capsys)


def test_the_printed_command_runs_from_a_shell_without_the_venv_on_path(tmp_path: Path) -> None:
    """``cli_command()`` is what the demo prints before ``replay-evaluator ...``: run as printed by a
    shell whose PATH has no virtualenv, it is this project's command line."""
    command = f"{cli_command()} replay-evaluator --help"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    if "PYTHONPATH" in os.environ:  # the checkout under test, when it is not installed
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    done = subprocess.run(
        ["bash", "-c", command], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "usage: banditgate replay-evaluator" in done.stdout
    first = shlex.split(cli_command())[0]
    assert Path(first).is_absolute() and Path(first).parent == Path(sys.executable).absolute().parent
