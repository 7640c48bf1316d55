"""HTTP limits against a real ``banditgate serve`` process, spoken to over raw sockets (an HTTP client
library would refuse to send what an attacker sends): a 1 MB header, too many headers, a body declared
longer than sent, oversized bodies with and without Content-Length; and a 500 that still answers and
keeps the connection, its traceback logged once."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from app.main import create_app
from app.store.migrate import upgrade
from tests.conftest import ADMIN_KEY, Stack, admin_headers, bearer, make_tenancy, running, unique
from tests.integration.processes import wait_until_ready
from tests.integration.test_rate_limits import from_addresses
from tests.served import free_port, served

MAX_BODY = 64 * 1024
READ_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """``python -m app.cli serve`` on a fresh SQLite file with small limits; yields its port."""
    db_file = tmp_path_factory.mktemp("limits") / "gw.db"
    upgrade(f"sqlite+aiosqlite:///{db_file}")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BANDITGATE_")} | {
        "BANDITGATE_DATABASE_URL": f"sqlite+aiosqlite:///{db_file}",
        "BANDITGATE_ADMIN_KEY": ADMIN_KEY,
        "BANDITGATE_EMBEDDER": "hashing",
        "BANDITGATE_MAX_BODY_BYTES": str(MAX_BODY),
        "BANDITGATE_BODY_READ_TIMEOUT_S": str(READ_TIMEOUT_S),
        "BANDITGATE_MAX_HEADER_BYTES": "16384",
        "BANDITGATE_MAX_HEADER_COUNT": "50",
        "BANDITGATE_LOG_LEVEL": "WARNING",
    }
    cmd = [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--no-access-log"]
    proc = subprocess.Popen(cmd, env=env, cwd=Path(__file__).resolve().parents[2])
    try:
        wait_until_ready(proc, f"http://127.0.0.1:{port}")
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def exchange(
    port: int, *parts: bytes, pause_s: float = 0.0, wait_s: float = 10.0
) -> tuple[bytes, bool, float]:
    """Send ``parts`` (``pause_s`` apart) on a fresh connection and read until the server closes it or
    ``wait_s`` passes; returns (what came back, whether the server closed, seconds after the last part)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as conn:
        for i, part in enumerate(parts):
            if i and pause_s:
                time.sleep(pause_s)
            try:
                conn.sendall(part)
            except (BrokenPipeError, ConnectionResetError):
                break  # the server answered and closed before taking everything: what an attacker gets
        sent = time.monotonic()
        received = b""
        closed = False
        try:
            while chunk := conn.recv(65536):
                received += chunk
            closed = True
        except ConnectionResetError:
            closed = True
        except TimeoutError:
            pass
        return received, closed, time.monotonic() - sent


def head(method: str, path: str, *headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: gw", *headers, "", ""]
    return "\r\n".join(lines).encode()


def test_a_1mb_header_is_refused(serve: int) -> None:
    """httptools (serve's default parser) under app/api/http_parser.py: refused once the head passes
    the limit, not buffered whole."""
    answer, closed, _ = exchange(serve, head("GET", "/healthz", "X-Big: " + "a" * 1_000_000))
    assert answer.startswith(b"HTTP/1.1 431 ") and b"request head too large" in answer and closed


def test_a_head_sent_a_byte_at_a_time_is_bounded_too(serve: int) -> None:
    start = b"GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Big: "
    answer, closed, _ = exchange(serve, start, *[b"a" * 1024] * 40, pause_s=0.01)
    assert answer.startswith(b"HTTP/1.1 431 ") and closed


def test_a_body_in_the_same_read_as_its_head_is_not_taken_for_the_head(serve: int) -> None:
    """60 KB of body (over the 16 KB head limit) sent with its head: the request reaches the app (a 401
    without a key), and a second request on the same connection is served."""
    body = b'{"prompt": "%s"}' % (b"a" * 60_000)
    request = head("POST", "/route", "Content-Type: application/json", f"Content-Length: {len(body)}")
    with socket.create_connection(("127.0.0.1", serve), timeout=10) as conn:
        conn.sendall(request + body + head("GET", "/healthz"))
        answer = b""
        while answer.count(b"HTTP/1.1 ") < 2 or not answer.endswith(b"}"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 401 ") and b"HTTP/1.1 200 " in answer


def test_too_many_headers_are_refused(serve: int) -> None:
    answer, _, _ = exchange(serve, head("GET", "/healthz", *(f"X-H{i}: v" for i in range(60))))
    assert answer.startswith(b"HTTP/1.1 431 ") and b"more than 50 request headers" in answer


def test_a_body_declared_longer_than_sent_is_cut_off_within_the_timeout(serve: int) -> None:
    request = head("POST", "/route", "Content-Type: application/json", "Content-Length: 1000")
    answer, closed, elapsed = exchange(serve, request + b'{"prompt":')
    assert answer.startswith(b"HTTP/1.1 408 ") and b"did not arrive within 1 s" in answer
    assert closed and READ_TIMEOUT_S - 0.1 <= elapsed < READ_TIMEOUT_S + 2.0


def test_an_oversized_body_is_refused_before_it_is_read(serve: int) -> None:
    request = head("POST", "/route", "Content-Type: application/json", f"Content-Length: {MAX_BODY + 1}")
    answer, closed, elapsed = exchange(serve, request)  # not one byte of the body sent
    assert answer.startswith(b"HTTP/1.1 413 ") and closed and elapsed < 1.0
    assert f"larger than {MAX_BODY} bytes".encode() in answer and b"connection: close" in answer.lower()
    # /v1 answers in OpenAI's error shape
    request = head("POST", "/v1/chat/completions", f"Content-Length: {10 * MAX_BODY}")
    answer, _, _ = exchange(serve, request)
    assert answer.startswith(b"HTTP/1.1 413 ") and b'"error":{"message":"the request body is larger' in answer


def test_an_oversized_chunked_body_is_refused_as_it_streams(serve: int) -> None:
    request = head("POST", "/route", "Content-Type: application/json", "Transfer-Encoding: chunked")
    chunk = b"%x\r\n%s\r\n" % (16 * 1024, b"x" * 16 * 1024)
    answer, closed, _ = exchange(serve, request, *[chunk] * 8, b"0\r\n\r\n", pause_s=0.05)
    assert answer.startswith(b"HTTP/1.1 413 ") and closed


def keep_alive_pair(port: int, paths: tuple[str, str]) -> list[bytes]:
    """GET each path in turn on one connection; each answer as read."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        answers = []
        for path in paths:
            conn.sendall(head("GET", path))
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += conn.recv(65536)
            length = int(answer.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            while len(answer.split(b"\r\n\r\n", 1)[1]) < length:
                answer += conn.recv(65536)
            answers.append(answer)
        return answers


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def test_a_500_answers_keeps_the_connection_and_logs_once(sqlite_stack: Stack) -> None:
    app = create_app(sqlite_stack.settings())

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("boom")

    records = Records()
    loggers = [logging.getLogger(), logging.getLogger("uvicorn"), logging.getLogger("uvicorn.error")]
    async with served(app) as url:
        for logger in loggers:
            logger.addHandler(records)
        try:
            port = int(url.rsplit(":", 1)[1])
            # blocking socket calls in a thread: the server runs on this event loop
            answers = await asyncio.to_thread(keep_alive_pair, port, ("/boom", "/healthz"))
        finally:
            for logger in loggers:
                logger.removeHandler(records)
    failed, healthy = answers
    assert failed.startswith(b"HTTP/1.1 500 ") and failed.endswith(
        b'{"detail":"internal error; see the server log"}'
    )
    assert healthy.startswith(b"HTTP/1.1 200 ")
    tracebacks = {id(r) for r in records.records if r.exc_info and isinstance(r.exc_info[1], RuntimeError)}
    assert len(tracebacks) == 1


class Body:
    """A request body of ``size`` bytes that notes whether the server read any of it."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.read = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self.read = True
        yield b" " * self.size


async def post_body(
    client: httpx.AsyncClient, path: str, body: Body, headers: dict[str, str]
) -> httpx.Response:
    headers = {"Content-Type": "application/json", "Content-Length": str(body.size), **headers}
    return await client.post(path, content=body, headers=headers)


async def test_bulk_limits_need_a_key_and_fit_what_a_valid_batch_can_be(stack: Stack) -> None:
    """POST /feedback/batch: a client without a key gets the ordinary body limit (FastAPI would read and
    parse the whole body before its key is checked); with a key, the limit is what the largest valid
    batch can be (max_feedback_batch x (metadata_max_bytes + 1 KiB)), not 256 MiB; and an address over
    its failed-auth limit is refused before its body is read."""
    prefix = unique("bg:test-ratelimit")
    settings = stack.settings(
        max_body_bytes=4096,
        max_feedback_batch=10,
        metadata_max_bytes=1000,
        auth_failure_limit=1,
        auth_failure_window_s=60.0,
        rate_limit_prefix=prefix,
    )
    batch_limit = 10 * (1000 + 1024)
    async with from_addresses(create_app(settings), "10.8.0.1", "10.8.0.2") as (client, guesser):
        t = await make_tenancy(client)
        anonymous = Body(8000)
        response = await post_body(client, "/feedback/batch", anonymous, {})
        assert response.status_code == 413 and not anonymous.read, response.text
        assert response.json()["detail"] == "the request body is larger than 4096 bytes"
        within = Body(8000)  # a key: the batch limit, and the body (blanks) is read and found not JSON
        assert (await post_body(client, "/feedback/batch", within, bearer(t.key))).status_code == 422
        assert within.read
        over = Body(batch_limit + 1)
        response = await post_body(client, "/feedback/batch", over, bearer(t.key))
        assert response.status_code == 413 and not over.read
        assert response.json()["detail"] == f"the request body is larger than {batch_limit} bytes"
        # The address that sent a wrong key is refused (429) before its next bulk body is read.
        assert (await guesser.get("/v1/models", headers=bearer("bg_wrong"))).status_code == 401
        locked = Body(8000)
        response = await post_body(guesser, "/feedback/batch", locked, bearer(t.key))
        assert response.status_code == 429 and not locked.read and int(response.headers["retry-after"]) >= 1
        assert response.headers["connection"] == "close"


async def test_each_bulk_upload_has_its_own_body_limit(stack: Stack) -> None:
    """One table of body limits: an observations upload may reach max_offline_body_bytes (it was capped
    at max_body_bytes, so `banditgate warm-start` batches over 4 MiB were 413s), a state import
    state_import_max_bytes; every other path max_body_bytes."""
    settings = stack.settings(
        max_body_bytes=4096, max_offline_body_bytes=20_000, state_import_max_bytes=1_000_000
    )
    async with running(create_app(settings)) as client:
        t = await make_tenancy(client, "knn-ucb")
        router = f"/admin/tenants/{t.tenant}/routers/{t.router}"
        rows = [{"id": f"r{i}", "prompt": "p" * 100, "model": t.arms[0], "reward": 1.0} for i in range(60)]
        body = json.dumps(rows)
        assert 4096 < len(body) < 20_000
        accepted = await client.post(f"{router}/observations", content=body, headers=admin_headers())
        assert accepted.status_code == 200 and accepted.json()["new"] == 60, accepted.text
        over = Body(20_001)
        response = await post_body(client, f"{router}/observations", over, admin_headers())
        assert response.status_code == 413 and not over.read
        assert response.json()["detail"] == "the request body is larger than 20000 bytes"
        state = (await client.get(f"{router}/state", headers=admin_headers())).json()
        exported = json.dumps({"state": state["state"]})
        assert 4096 < len(exported) < 1_000_000
        headers = admin_headers() | {"Content-Type": "application/json"}
        imported = await client.post(f"{router}/state", content=exported, headers=headers)
        assert imported.status_code == 200, imported.text
        over = Body(1_000_001)
        assert (await post_body(client, f"{router}/state", over, admin_headers())).status_code == 413
        anonymous = Body(5000)  # a bulk path without a key: the ordinary limit
        assert (await post_body(client, f"{router}/observations", anonymous, {})).status_code == 413
        assert (await post_body(client, "/route", Body(5000), bearer(t.key))).status_code == 413
