"""Operations routes: /healthz, /metrics, /openapi.json, /docs and the icon
browsers ask for (/favicon.ico, the console's, served without a token: it
tells nothing).

/docs is Swagger UI 5 from the swagger-ui-bundle-v2 package (the same
`swagger_ui_bundle` module as swagger-ui-bundle, whose 4.x cannot render the
OpenAPI 3.1 document served here), served from the installed files: no CDN.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ...errors import ConfigurationError
from .openapi import spec
from .responses import ctx_of

_SPEC = orjson.dumps(spec())


def swagger_ui_dir() -> Path:
    """The newest Swagger UI the `swagger_ui_bundle` module holds, 5 or later.

    Both swagger-ui-bundle (4.x) and swagger-ui-bundle-v2 (5.x) install that
    module; when both are installed the one installed last owns its
    `swagger_ui_path`, so the vendored folders are looked at, not that name.
    """
    found = []
    for entry in files("swagger_ui_bundle").joinpath("vendor").iterdir():
        parts = entry.name.removeprefix("swagger-ui-").split(".")
        if entry.name.startswith("swagger-ui-") and all(p.isdigit() for p in parts):
            version = tuple(map(int, parts))
            if version >= (5,):
                found.append((version, Path(str(entry))))
    if not found:
        raise ConfigurationError(
            "/docs needs Swagger UI 5 (OpenAPI 3.1): pip install 'swagger-ui-bundle-v2>=5.17'"
        )
    return max(found)[1]


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
    body = await ctx.run(generate_latest, ctx.metrics.exposed)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


async def openapi(request: Request) -> Response:
    return Response(_SPEC, media_type="application/json")


async def docs(request: Request) -> Response:
    return HTMLResponse(DOCS_HTML)


_ICON = files("tidelog.server.http.console").joinpath("static", "favicon.svg").read_bytes()


async def favicon(request: Request) -> Response:
    # An SVG at the address browsers ask for: they render it whatever the name says.
    return Response(_ICON, media_type="image/svg+xml", headers={"cache-control": "public, max-age=86400"})


routes = [
    Route("/healthz", healthz, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/openapi.json", openapi, methods=["GET"]),
    Route("/docs", docs, methods=["GET"]),
    Route("/favicon.ico", favicon, methods=["GET"]),
    Mount("/docs/static", StaticFiles(directory=swagger_ui_dir()), name="docs-static"),
]
