"""The admin dashboard: static files under ``app/static/`` served at ``/dashboard/``.

The page is plain HTML and JavaScript with uPlot vendored under ``static/vendor/`` (no CDN). It signs in
with the admin key, keeps it in the browser's sessionStorage and calls the admin REST API with it; the
files themselves hold no secret, so they are served without authentication.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent / "static"


def mount_dashboard(app: FastAPI) -> None:
    @app.get("/dashboard", include_in_schema=False)
    async def dashboard_root() -> RedirectResponse:
        return RedirectResponse("/dashboard/", status_code=307)

    app.mount("/dashboard/", StaticFiles(directory=STATIC_DIR, html=True), name="dashboard")
