"""Real processes for multi-replica tests: gateways (uvicorn), workers, and a private redis-server."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from tests.conftest import ADMIN_KEY, REDIS_URL, admin_headers, unique
from tests.served import free_port


def gateway_env(database_url: str, stream: str, redis_url: str = REDIS_URL, **extra: str) -> dict[str, str]:
    return (
        dict(os.environ)
        | {
            "BANDITGATE_DATABASE_URL": database_url,
            "BANDITGATE_REDIS_URL": redis_url,
            "BANDITGATE_ADMIN_KEY": ADMIN_KEY,
            "BANDITGATE_EMBEDDER": "hashing",
            "BANDITGATE_EVENT_STREAM": stream,
            "BANDITGATE_RATE_LIMIT_PREFIX": f"{stream}:ratelimit",
            "BANDITGATE_STREAM_BLOCK_MS": "100",
        }
        | extra
    )


class Gateway:
    """One `uvicorn --factory app.main:create_app` process on a free port."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, ready_within_s: float = 60) -> Gateway:
        cmd = [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app"]
        cmd += ["--port", str(self.port), "--log-level", "warning"]
        self.proc = subprocess.Popen(cmd, env=self.env)
        wait_until_ready(self.url, self.proc, ready_within_s)
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown handlers run."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=20)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)


def wait_until_ready(url: str, proc: subprocess.Popen[Any], within_s: float) -> None:
    """Poll ``url``/readyz until it answers 200; fails if ``proc`` exits or ``within_s`` pass first."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, "gateway process exited during start-up"
        assert time.monotonic() < deadline, f"gateway did not become ready in {within_s} s"
        time.sleep(0.1)


@contextmanager
def gateway_process(
    database_url: str, stream: str, redis_url: str = REDIS_URL, **extra: str
) -> Iterator[str]:
    """A real gateway process; yields its base URL once ready."""
    gateway = Gateway(gateway_env(database_url, stream, redis_url, **extra))
    try:
        yield gateway.start().url
    finally:
        gateway.stop()


@dataclass
class Provisioned:
    tenant: str
    arm: str
    key: str
    key_id: int


def provision(url: str, policy: str) -> Provisioned:
    """Through a gateway's admin API: a tenant with a key, one backend (unreachable: for /route only)
    and a default router ``main`` of ``policy`` over it (``always`` calls that backend)."""
    tenant, arm = unique("t"), unique("m")
    h = admin_headers()
    httpx.post(f"{url}/admin/tenants", json={"name": tenant}, headers=h).raise_for_status()
    httpx.post(
        f"{url}/admin/backends", json={"name": arm, "base_url": "http://127.0.0.1:9/v1"}, headers=h
    ).raise_for_status()
    issued = httpx.post(f"{url}/admin/tenants/{tenant}/keys", json={}, headers=h).json()
    router = {"name": "main", "policy": policy, "arms": [arm], "is_default": True}
    router["hyperparameters"] = {"model": arm} if policy == "always" else {}
    httpx.post(f"{url}/admin/tenants/{tenant}/routers", json=router, headers=h).raise_for_status()
    return Provisioned(tenant, arm, issued["key"], issued["id"])


@dataclass
class RedisServer:
    """A private, non-persistent redis-server on a free port (never the machine's shared one)."""

    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server is not installed"
        cmd = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                pass
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)


@contextmanager
def private_redis() -> Iterator[RedisServer]:
    server = RedisServer(free_port()).start()
    try:
        yield server
    finally:
        server.kill()


@dataclass
class RemoteTenancy:
    tenant: str
    key: str
    arms: list[str]


def make_remote_tenancy(url: str, n_arms: int = 2, policy: str = "linucb") -> RemoteTenancy:
    """A tenant, a key, ``n_arms`` backends and a default router, through a running gateway's admin API."""
    h = admin_headers()
    tenant, arms = unique("rep"), [unique(f"m{i}") for i in range(n_arms)]
    httpx.post(f"{url}/admin/tenants", json={"name": tenant}, headers=h).raise_for_status()
    for arm in arms:
        body = {"name": arm, "base_url": "http://127.0.0.1:9/v1"}
        httpx.post(f"{url}/admin/backends", json=body, headers=h).raise_for_status()
    key = httpx.post(f"{url}/admin/tenants/{tenant}/keys", json={}, headers=h).json()["key"]
    router = {"name": "main", "policy": policy, "arms": arms, "is_default": True}
    httpx.post(f"{url}/admin/tenants/{tenant}/routers", json=router, headers=h).raise_for_status()
    return RemoteTenancy(tenant, key, arms)


def router_state(url: str, tenant: str) -> dict[str, object]:
    response = httpx.get(
        f"{url}/admin/tenants/{tenant}/routers/main/state", headers=admin_headers(), timeout=10
    )
    response.raise_for_status()
    data: dict[str, object] = response.json()
    return data


def run_snapshotter_once(database_url: str, **extra: str) -> str:
    """`banditgate worker snapshot --once` as a real process; returns its log output."""
    env = gateway_env(database_url, "unused") | extra
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "worker", "snapshot", "--once"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr
