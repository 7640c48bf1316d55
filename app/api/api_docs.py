"""The interactive API documentation at ``/docs``: Swagger UI from the copy vendored under
``app/static/vendor/swagger-ui/`` (served with the dashboard's files), so the page works without
reaching any CDN, like the dashboard's charts. FastAPI's own ``/docs`` and ``/redoc`` load their
scripts from a CDN and are switched off in ``app.main``."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse

SWAGGER_UI = "/dashboard/vendor/swagger-ui"


def mount_api_docs(app: FastAPI) -> None:
    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{SWAGGER_UI}/swagger-ui-bundle.js",
            swagger_css_url=f"{SWAGGER_UI}/swagger-ui.css",
            swagger_favicon_url=f"{SWAGGER_UI}/favicon-32x32.png",
        )
