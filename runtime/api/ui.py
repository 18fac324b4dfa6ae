"""The web UI's routes: `/ui/...` answers the UI's page and its assets; `/` sends browsers there.

Everything the UI needs ships in the package (`yurt/runtime/ui/`): no CDN, nothing fetched at
run time. The page and its assets hold no data: the page's script reads the `/v1` API with the
token the person typed (sent as `X-Nomad-Token`, kept in the browser's session storage), so they
are served without the token, and with a token configured nothing else is (app.py
`TokenMiddleware`).

Every path under `/ui/` that is not an asset answers the page itself, so Nomad's UI links
(`/ui/jobs/web`, `/ui/allocations/<id>/<task>/logs`) open on the right view, and a reload keeps
it. Assets are read once and answered with a content ETag; the page and assets are revalidated
on each load (`no-cache`), so an upgraded agent is never shown a stale script.
"""

from __future__ import annotations

import hashlib
import mimetypes
from functools import cache
from importlib import resources
from typing import Final

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

UI_PREFIX: Final = "/ui"

#: The page allows only its own script, styles and connections: no inline script, so text the
#: agent answers (job names, log lines) can never run as code even if a view forgets to escape.
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

_TYPES: Final = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
                 ".html": "text/html; charset=utf-8", ".svg": "image/svg+xml"}


@cache
def _asset(name: str) -> tuple[bytes, str] | None:
    """An asset's bytes and ETag, or None. `name` is one path segment or `pages/<file>`."""
    parts = name.split("/")
    if not all(p and not p.startswith(".") for p in parts) or len(parts) > 2:
        return None
    node = resources.files("yurt.runtime.ui").joinpath("assets", *parts)
    try:
        body = node.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    return body, '"' + hashlib.sha256(body).hexdigest()[:20] + '"'


def _answer(request: Request, name: str) -> Response:
    found = _asset(name)
    if found is None:
        return PlainTextResponse("Not found", status_code=404)
    body, etag = found
    suffix = "." + name.rsplit(".", 1)[-1]
    media = _TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"
    headers = {**SECURITY_HEADERS, "ETag": etag}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    if request.method == "HEAD":
        return Response(status_code=200, headers=headers, media_type=media)
    return Response(body, headers=headers, media_type=media)


async def ui_page(request: Request) -> Response:
    rest = request.path_params.get("rest", "")
    if rest.startswith("assets/"):
        return _answer(request, rest.removeprefix("assets/"))
    return _answer(request, "index.html")


async def ui_root(request: Request) -> Response:
    return RedirectResponse(f"{UI_PREFIX}/jobs", status_code=307)


async def root(request: Request) -> Response:
    """A browser opening the agent's address lands on the UI; API clients get Nomad's 404."""
    if "text/html" in request.headers.get("accept", ""):
        return RedirectResponse(f"{UI_PREFIX}/jobs", status_code=307)
    return PlainTextResponse("Not found", status_code=404)


def ui_routes() -> list[BaseRoute]:
    return [
        Route("/", root, methods=["GET", "HEAD"]),
        Route(UI_PREFIX, ui_root, methods=["GET", "HEAD"]),
        Route(f"{UI_PREFIX}/", ui_root, methods=["GET", "HEAD"]),
        Route(f"{UI_PREFIX}/{{rest:path}}", ui_page, methods=["GET", "HEAD"]),
    ]


def is_ui_path(path: str) -> bool:
    """Paths the token does not guard: the page and its assets, which hold no data."""
    return path == "/" or path == UI_PREFIX or path.startswith(UI_PREFIX + "/")
