"""A throughput run driven by wrk (Debian's ``wrk`` package), a load client written in C.

The Python load client (httpx on asyncio) tops out near 300 requests per second on this project's
2-core machines, below what the gateway's cheaper endpoints serve: a run at that ceiling measures the
client. wrk spends microseconds per request, so the server under test is what runs out of CPU. One wrk
thread keeps ``concurrency`` keep-alive connections with one request in flight on each
(``wrk -t1 -c<concurrency>``); a Lua script posts the given JSON bodies in turn and reports wrk's own
count, duration and errors as one JSON line.

``cycle=False`` sends each body at most once (feedback for a fresh decision per request): the run ends
early, like the Python client's, when the bodies run out. wrk may have a few more requests in flight
then, each a repeat of the last body; they are not counted unless answered before the thread stops.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SCRIPT = """
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clock, bench_timespec *now);
]]
local function now_us()
  local t = ffi.new("bench_timespec")
  ffi.C.clock_gettime(1, t)  -- CLOCK_MONOTONIC
  return tonumber(t.tv_sec) * 1000000 + tonumber(t.tv_nsec) / 1000
end

local bodies = {}
for line in io.lines(%(bodies)s) do bodies[#bodies + 1] = line end
local headers = {%(headers)s}
local cycle = %(cycle)s
local i = 0
started_us = 0
stopped_us = 0
local checked = false
init = function(args) started_us = now_us() end
request = function()
  -- wrk (4.x) calls request() once after init() to check what it returns, and never sends that
  if not checked then
    checked = true
    return wrk.format("POST", %(path)s, headers, bodies[1])
  end
  i = i + 1
  if i > #bodies then
    if cycle then
      i = 1
    else
      if stopped_us == 0 then stopped_us = now_us() end
      wrk.thread:stop()
      i = #bodies
    end
  end
  return wrk.format("POST", %(path)s, headers, bodies[i])
end

local threads = {}
setup = function(thread) threads[#threads + 1] = thread end
done = function(summary, latency, requests)
  -- wrk's own duration runs to the end of -d even when the thread stopped early
  local duration = summary.duration
  local stopped = threads[1]:get("stopped_us")
  if stopped ~= 0 then duration = stopped - threads[1]:get("started_us") end
  local e = summary.errors
  io.write(string.format(
    'BENCH_WRK {"requests": %%d, "duration_us": %%d, "connect": %%d, "read": %%d, "write": %%d, '
      .. '"status": %%d, "timeout": %%d, "ran_out": %%s}\\n',
    summary.requests, math.floor(duration), e.connect, e.read, e.write, e.status, e.timeout,
    stopped ~= 0 and "true" or "false"))
end
"""
MARKER = "BENCH_WRK "


class LoadError(RuntimeError):
    """wrk is missing, failed, or saw errors (non-2xx answers, dropped connections, timeouts)."""


@dataclass(frozen=True)
class WrkResult:
    requests: int
    seconds: float
    ran_out: bool  # the bodies ran out (cycle=False) and the run ended early


def lua_string(text: str) -> str:
    """``text`` as a Lua long-bracket literal (no escapes to get wrong: keys, paths, file names)."""
    level = 0
    while f"]{'=' * level}]" in text:
        level += 1
    return f"[{'=' * level}[{text}]{'=' * level}]"


def script(bodies_file: Path, path: str, headers: dict[str, str], cycle: bool) -> str:
    """The Lua script that posts the bodies in ``bodies_file`` (one JSON document per line) to ``path``."""
    pairs = {"Content-Type": "application/json", **headers}
    table = ", ".join(f"[ {lua_string(k)} ] = {lua_string(v)}" for k, v in pairs.items())
    return SCRIPT % {
        "bodies": lua_string(str(bodies_file)),
        "headers": table,
        "cycle": "true" if cycle else "false",
        "path": lua_string(path),
    }


def load_client(choice: str) -> str:
    """The throughput run's client for ``--load-client choice``: ``auto`` is wrk where it is on PATH,
    else httpx (the Python client tops out near 300 requests per second on two cores, below what the
    systems serve, so a run with it measures the client rather than the servers)."""
    if choice != "auto":
        return choice
    return "wrk" if shutil.which("wrk") is not None else "httpx"


def wrk_executable() -> str:
    found = shutil.which("wrk")
    if found is None:
        raise LoadError("--load-client wrk needs wrk on PATH (Debian: apt-get install wrk)")
    return found


def run_wrk(
    url: str,
    path: str,
    headers: dict[str, str],
    bodies: list[str],
    seconds: float,
    concurrency: int,
    cycle: bool = True,
) -> WrkResult:
    """``seconds`` (whole, at least 1) of ``concurrency`` requests in flight against ``url`` + ``path``;
    raises ``LoadError`` on any error wrk counted, as the Python client raises on a non-2xx answer."""
    if not bodies:
        raise LoadError("no request bodies to send")
    if any("\n" in body for body in bodies):
        raise LoadError("a request body spans lines: wrk's script reads one body per line")
    executable = wrk_executable()
    with tempfile.TemporaryDirectory(prefix="bench-wrk-") as tmp:
        bodies_file = Path(tmp) / "bodies.jsonl"
        bodies_file.write_text("\n".join(bodies) + "\n")
        lua = Path(tmp) / "load.lua"
        lua.write_text(script(bodies_file, path, headers, cycle))
        duration = max(1, round(seconds))
        cmd = [
            executable,
            "-t1",
            f"-c{concurrency}",
            f"-d{duration}s",
            "--timeout",
            "60s",
            "-s",
            str(lua),
            url,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 90, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARKER)]
    if done.returncode != 0 or not lines:
        raise LoadError(f"wrk failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-500:]}")
    report = json.loads(lines[-1][len(MARKER) :])
    errors = {k: report[k] for k in ("connect", "read", "write", "status", "timeout") if report[k]}
    if errors:
        raise LoadError(f"wrk counted errors against {url}{path}: {errors}")
    return WrkResult(report["requests"], report["duration_us"] / 1e6, report["ran_out"])
