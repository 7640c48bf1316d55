"""uvicorn's httptools protocol with a bound on the request head.

httptools (llhttp) buffers a header of any length before handing it over, so a client could make the
server hold a 1 GB head in memory; h11 has a bound (``h11_max_incomplete_event_size``) but parses in
pure Python, which costs every request CPU (``bench gateway --http h11``). This protocol counts the
bytes fed to the parser while a request's head is open (from the end of one message to the end of the
next one's headers) and, past ``max_header_bytes`` (passed as uvicorn's ``h11_max_incomplete_event_size``,
the same setting h11 reads), answers 431 and closes the connection: at most one read buffer more than
the limit is ever held (a read in
which a head ends is not counted). Header count and size are checked once more by app/api/http_limits.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from app.settings import Settings

# Where uvicorn was not given a bound (a server other than banditgate serve): the setting's default.
DEFAULT_MAX_HEAD_BYTES: int = Settings.model_fields["max_header_bytes"].default
TOO_LARGE = b"request head too large"


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` refusing a request head over ``config.h11_max_incomplete_event_size``."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.max_head_bytes = config.h11_max_incomplete_event_size or DEFAULT_MAX_HEAD_BYTES
        self.head_open = True  # no headers complete since the last message ended
        self.head_bytes = 0
        self.boundaries = 0  # heads and messages completed so far on this connection

    def data_received(self, data: bytes) -> None:
        boundaries = self.boundaries
        super().data_received(data)
        # A read in which a head or a message ended holds bytes of both sides: not counted (one read
        # buffer at most); a read inside an open head is all head.
        if not self.head_open or boundaries != self.boundaries or self.transport.is_closing():
            return
        self.head_bytes += len(data)
        if self.head_bytes > self.max_head_bytes:
            self.refuse_head()

    def on_headers_complete(self) -> None:
        self.head_open = False
        self.head_bytes = 0
        self.boundaries += 1
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self.head_open = True
        self.boundaries += 1
        super().on_message_complete()

    def refuse_head(self) -> None:
        self.logger.warning("request head over %d bytes refused", self.max_head_bytes)
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(TOO_LARGE), TOO_LARGE)
        )
        self.transport.close()
