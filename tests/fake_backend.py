"""A real HTTP server on 127.0.0.1 that stands in for OpenAI-compatible backends, well or badly behaved.

It is a raw asyncio server (not a framework) running its own event loop in a thread, so it can do what
real backends do wrong: hang, answer garbage, close the connection without answering, break a stream.
Each backend is a path prefix: ``FakeBackends.url(behaviour)`` is a base URL ``http://127.0.0.1:P/<b>/v1``.

Behaviours: ``ok`` (chat and image answers with usage), ``nousage`` (answers and streams without usage,
even when asked), ``echo`` (an ``ok`` answer whose extra field ``received`` is the request body), ``hang``
(reads the request, never answers), ``garbage`` (200 with a body that is not JSON), ``nan`` (an answer holding ``NaN``, which JSON has not),
``surrogate`` (an answer whose text holds a lone surrogate escape, ``\\ud800``), ``close`` (closes the
connection without a response), ``status-<code>`` (always that status), ``flaky-<n>`` (503 for the
first n requests, then ``ok``), ``retryafter-<s>`` (429 with ``Retry-After: s`` once, then ``ok``), ``echoheaders-<code>`` (that status, with an error body that echoes the request's headers, the
``Authorization`` the gateway sent first, as a careless backend might), ``slowstream`` (a stream of 50 chunks 0.1 s apart that notes whether the
client went away before the end), ``breakstream`` (one chunk, then the connection is closed), ``setcookie``
(an ``ok`` answer that sets a cookie, as a load balancer in front of a real backend does).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

USAGE = {"prompt_tokens": 1000, "completion_tokens": 2000, "total_tokens": 3000}


@dataclass
class Seen:
    behaviour: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FakeBackends:
    host: str = "127.0.0.1"
    port: int = 0
    requests: list[Seen] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    disconnected: dict[str, bool] = field(default_factory=dict)
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _server: asyncio.Server | None = None

    def url(self, behaviour: str) -> str:
        return f"http://{self.host}:{self.port}/{behaviour}/v1"

    def seen(self, behaviour: str) -> list[Seen]:
        return [r for r in self.requests if r.behaviour == behaviour]

    # --- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> FakeBackends:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, self.host, 0))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="fake-backends", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        loop, server = self._loop, self._server
        if loop is None or server is None:
            return

        async def shutdown() -> None:
            server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)

    # --- HTTP ------------------------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            _, path, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
            raw = await reader.readexactly(int(headers.get("content-length", "0")))
            body = json.loads(raw) if raw else {}
            behaviour = path.strip("/").split("/", 1)[0]
            self.counts[behaviour] += 1
            self.requests.append(Seen(behaviour, path, headers, body))
            await self._respond(behaviour, path, headers, body, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @staticmethod
    async def _send(
        writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str, extra: str = ""
    ) -> None:
        head = (
            f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            f"{extra}Connection: close\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()

    async def _respond(
        self,
        behaviour: str,
        path: str,
        headers: dict[str, str],
        body: dict[str, Any],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        kind, _, arg = behaviour.partition("-")
        if kind == "hang":
            await asyncio.sleep(3600)
        elif kind == "close":
            return
        elif kind == "delay":  # answers normally after ``arg`` seconds
            await asyncio.sleep(float(arg))
            await self._send(
                writer, 200, json.dumps(self.completion(behaviour, body)).encode(), "application/json"
            )
        elif kind == "garbage":
            await self._send(writer, 200, b"<html>not json at all", "application/json")
        elif kind == "nan":  # Python's json writes NaN; JSON (RFC 8259) has no such number
            answer = {**self.completion(behaviour, body), "score": float("nan")}
            await self._send(writer, 200, json.dumps(answer).encode(), "application/json")
        elif kind == "surrogate":  # a lone surrogate escape: valid JSON syntax, no Unicode text
            text = json.dumps(self.completion(behaviour, body)).replace("answer from", "\\ud800 from")
            await self._send(writer, 200, text.encode(), "application/json")
        elif kind == "echoheaders":
            error: dict[str, Any] = {"message": "rejected", "authorization": headers.get("authorization")}
            error["headers"] = headers
            echoed = {"error": error}
            await self._send(writer, int(arg), json.dumps(echoed).encode(), "application/json")
        elif kind == "status":
            await self._send(
                writer, int(arg), json.dumps({"error": {"message": "nope"}}).encode(), "application/json"
            )
        elif kind == "flaky" and self.counts[behaviour] <= int(arg):
            await self._send(writer, 503, b'{"error": {"message": "busy"}}', "application/json")
        elif kind == "retryafter" and self.counts[behaviour] == 1:
            extra = f"Retry-After: {arg}\r\n"
            await self._send(writer, 429, b'{"error": {"message": "slow down"}}', "application/json", extra)
        elif kind == "setcookie":
            completion = json.dumps(self.completion(behaviour, body)).encode()
            await self._send(writer, 200, completion, "application/json", "Set-Cookie: lb=node-7; Path=/\r\n")
        elif body.get("stream"):
            await self._stream(behaviour, body, reader, writer)
        elif path.endswith("/images/generations"):
            answer = {"created": 1, "data": [{"url": f"http://img/{behaviour}.png"}]}
            await self._send(writer, 200, json.dumps(answer).encode(), "application/json")
        else:
            await self._send(
                writer, 200, json.dumps(self.completion(behaviour, body)).encode(), "application/json"
            )

    @staticmethod
    def completion(behaviour: str, body: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "?"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"answer from {behaviour}"},
                    "finish_reason": "stop",
                }
            ],
        }
        if behaviour != "nousage":
            answer["usage"] = USAGE
        if behaviour == "echo":
            answer["received"] = body
        return answer

    async def _stream(
        self, behaviour: str, body: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
        n, delay = (50, 0.1) if behaviour == "slowstream" else (3, 0.0)
        self.disconnected[behaviour] = False

        def chunk(content: str | None, finish: str | None = None) -> bytes:
            choice = {
                "index": 0,
                "delta": {} if content is None else {"content": content},
                "finish_reason": finish,
            }
            data = {
                "id": "c1",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": body.get("model"),
                "choices": [choice],
            }
            return f"data: {json.dumps(data)}\n\n".encode()

        for i in range(n):
            try:
                writer.write(chunk(f"part{i} "))
                await writer.drain()
                if behaviour == "breakstream":
                    return
                if delay and await asyncio.wait_for(reader.read(1), delay) == b"":
                    self.disconnected[behaviour] = True
                    return
            except TimeoutError:
                pass
            except ConnectionError:
                self.disconnected[behaviour] = True
                return
        writer.write(chunk(None, "stop"))
        if (body.get("stream_options") or {}).get("include_usage") and behaviour != "nousage":
            usage: dict[str, Any] = {
                "id": "c1",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": body.get("model"),
                "choices": [],
                "usage": USAGE,
            }
            writer.write(f"data: {json.dumps(usage)}\n\n".encode())
        writer.write(b"data: [DONE]\n\n")
        await writer.drain()
