"""Operations routes: /healthz, /metrics, /openapi.json and /docs."""

from __future__ import annotations

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

from .openapi import spec
from .responses import ctx_of

_SPEC = orjson.dumps(spec())

DOCS_HTML = """<!doctype html>
<html><head><meta charset="utf-8"><title>tidelog API</title>
<link rel="stylesheet" href="/docs/static/swagger-ui.css"></head>
<body><div id="ui"></div>
<script src="/docs/static/swagger-ui-bundle.js"></script>
<script>SwaggerUIBundle({url: "/openapi.json", dom_id: "#ui", persistAuthorization: true});</script>
</body></html>"""


async def healthz(request: Request) -> Response:
    return Response(b'{"status":"ok"}', media_type="application/json")


async def metrics(request: Request) -> Response:
    ctx = ctx_of(request)
    body = await ctx.run(generate_latest, ctx.metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


async def openapi(request: Request) -> Response:
    return Response(_SPEC, media_type="application/json")


async def docs(request: Request) -> Response:
    return HTMLResponse(DOCS_HTML)


routes = [
    Route("/healthz", healthz, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/openapi.json", openapi, methods=["GET"]),
    Route("/docs", docs, methods=["GET"]),
    Mount("/docs/static", StaticFiles(directory=swagger_ui_path), name="docs-static"),
]
