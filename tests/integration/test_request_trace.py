"""The request trace (experiments/request_trace.py, the command behind docs/architecture.md's count
of the modules a chat request passes through) runs and counts what it says: run as its command, on
its own SQLite database and in-process backend."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_trace_names_the_modules_a_chat_request_passes_through_and_its_returns() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "experiments.request_trace", "--warmup", "1", "--path"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    lines = done.stdout.splitlines()
    counted = re.fullmatch(r"modules: (\d+) \((.*)\)", lines[-2])
    returned = re.fullmatch(r"returns: (\d+) ?\(?(.*?)\)?", lines[-1])
    assert counted is not None and returned is not None, done.stdout
    modules = counted.group(2).split(", ")
    path = lines[:-2]
    assert int(counted.group(1)) == len(modules) == len(set(modules))
    # the body starts at the endpoint, every module passed through is on the path, and the request's
    # decision reaches the ledger
    assert path[0] == modules[0] == "app.api.openai"
    assert set(modules) <= set(path)
    assert "app.store.ledger" in modules
    # the validators pydantic calls return, through it, to the endpoint: visited, not passed through
    assert "app.input_types" in path and "app.input_types" not in modules
    assert all(a != b for a, b in itertools.pairwise(path))  # repeats collapsed
    back = [pair.split(" -> ") for pair in returned.group(2).split(", ") if pair]
    assert int(returned.group(1)) == len(back)
    assert all(callee in modules for _, callee in back)
