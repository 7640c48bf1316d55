"""The admin dashboard: static files under ``app/static/`` served at ``/dashboard/``.

The page is plain HTML and JavaScript with uPlot vendored under ``static/vendor/`` (no CDN). It signs in
with the admin key, keeps it in the browser's sessionStorage and calls the admin REST API with it; the
files themselves hold no secret, so they are served without authentication.

Every dashboard response carries ``SECURITY_HEADERS``: a Content-Security-Policy that allows only the
gateway's own scripts, styles and API (no inline script or style, no framing, no plug-ins), so a value
an attacker got into the admin views (a router or model name) cannot run as script even if it slipped
past the page's escaping; ``X-Frame-Options: DENY`` against click-jacking in browsers that predate
``frame-ancestors``; ``nosniff`` so no file is run as another type.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class WithSecurityHeaders:
    """Pure ASGI wrapper adding ``SECURITY_HEADERS`` to every response of the wrapped app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.headers = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *self.headers]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def mount_dashboard(app: FastAPI) -> None:
    @app.get("/dashboard", include_in_schema=False)
    async def dashboard_root() -> RedirectResponse:
        return RedirectResponse("/dashboard/", status_code=307, headers=SECURITY_HEADERS)

    static = StaticFiles(directory=STATIC_DIR, html=True)
    app.mount("/dashboard/", WithSecurityHeaders(static), name="dashboard")
