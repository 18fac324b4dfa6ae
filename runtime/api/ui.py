"""The web UI's routes: `/ui/...` answers the UI's page and its assets; `/` sends browsers there.

Everything the UI needs ships in the package (`yurt/runtime/ui/`): no CDN, nothing fetched at
run time. The page and its assets hold no data: the page's script reads the `/v1` API with the
token the person typed (sent as `X-Nomad-Token`, kept in the browser's session storage), so they
are served without the token (their routes are `PUBLIC` in authz_table.py), and nothing else
is.

Every path under `/ui/` that is not an asset answers the page itself, so Nomad's UI links
(`/ui/jobs/web`, `/ui/allocations/<id>/<task>/logs`) open on the right view, and a reload keeps
it. The page and assets are revalidated on each load (`no-cache` with a content ETag, a 304
costs no body), so an upgraded agent is never shown a stale script.

Invariants:
- A request names an asset, it never names a file: the assets are listed once, by the same
  globs as the wheel's `package_data` (setup.py: `assets/*.*`, `assets/pages/*.js`), and a
  request is a lookup in that table. No path from a request reaches the file system, so there
  is no traversal to defend against (`..`, `%2e%2e`, a backslash, a symlink), the checkout
  serves exactly what an installed wheel would, and a stream of made-up names grows nothing
  (a per-name cache would keep every miss).
- Every answer under `/ui/`, a 404 too, carries the page's security headers (CSP without
  inline script or style, `nosniff`).
- `/` redirects only a browser (it asks for `text/html`); an API client keeps Nomad's 404.
"""

from __future__ import annotations

import hashlib
import mimetypes
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Final

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

UI_PREFIX: Final = "/ui"
ASSETS_PREFIX: Final = "assets/"
#: The folder of page modules, the one subfolder the wheel ships (setup.py package_data).
PAGES: Final = "pages"

#: The page allows only its own script, styles and connections: no inline script, so text the
#: agent answers (job names, log lines) can never run as code even if a view forgets to escape.
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

_TYPES: Final = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
                 ".html": "text/html; charset=utf-8", ".svg": "image/svg+xml"}


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    etag: str
    media_type: str


def _asset_of(name: str, node: Traversable) -> Asset:
    body = node.read_bytes()
    suffix = "." + name.rsplit(".", 1)[-1]
    media = _TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"
    return Asset(body, '"' + hashlib.sha256(body).hexdigest()[:20] + '"', media)


@cache
def assets() -> dict[str, Asset]:
    """Every asset by its name under `assets/` (`app.js`, `pages/jobs.js`), read once: the
    top folder's `*.*` files and `pages/*.js`, the wheel's globs."""
    root = resources.files("yurt.runtime.ui").joinpath("assets")
    found: dict[str, Asset] = {}
    for node in root.iterdir():
        if node.is_file() and "." in node.name and not node.name.startswith("."):
            found[node.name] = _asset_of(node.name, node)
    pages = root.joinpath(PAGES)
    if pages.is_dir():
        for node in pages.iterdir():
            if node.is_file() and node.name.endswith(".js") and not node.name.startswith("."):
                found[f"{PAGES}/{node.name}"] = _asset_of(node.name, node)
    return found


def _not_modified(request: Request, etag: str) -> bool:
    """RFC 9110 §13.1.2: a list of tags, weak ones compared weakly, or `*`."""
    header = request.headers.get("if-none-match")
    if header is None:
        return False
    tags = {t.strip().removeprefix("W/") for t in header.split(",")}
    return "*" in tags or etag in tags


def _not_found() -> Response:
    return PlainTextResponse("Not found", status_code=404, headers=SECURITY_HEADERS)


def _answer(request: Request, name: str) -> Response:
    asset = assets().get(name)
    if asset is None:
        return _not_found()
    headers = {**SECURITY_HEADERS, "ETag": asset.etag}
    if _not_modified(request, asset.etag):
        return Response(status_code=304, headers=headers)
    if request.method == "HEAD":  # what a GET would say, without the body
        headers["Content-Length"] = str(len(asset.body))
        return Response(b"", status_code=200, headers=headers, media_type=asset.media_type)
    return Response(asset.body, headers=headers, media_type=asset.media_type)


async def ui_page(request: Request) -> Response:
    rest: str = request.path_params.get("rest", "")
    if rest.startswith(ASSETS_PREFIX):
        return _answer(request, rest.removeprefix(ASSETS_PREFIX))
    return _answer(request, "index.html")


async def ui_root(request: Request) -> Response:
    return RedirectResponse(f"{UI_PREFIX}/jobs", status_code=307)


async def root(request: Request) -> Response:
    """A browser opening the agent's address lands on the UI; API clients get Nomad's 404."""
    vary = {"Vary": "Accept"}
    if request.method in ("GET", "HEAD") and "text/html" in request.headers.get("accept", ""):
        return RedirectResponse(f"{UI_PREFIX}/jobs", status_code=307, headers=vary)
    return PlainTextResponse("Not found", status_code=404, headers=vary)


def ui_routes() -> list[BaseRoute]:
    return [
        # Every method: `PUT /` is a path the API does not have (404, as Nomad), not a 405.
        Route("/", root, methods=["GET", "HEAD", "PUT", "POST", "DELETE", "PATCH", "OPTIONS"]),
        Route(UI_PREFIX, ui_root, methods=["GET", "HEAD"]),
        Route(f"{UI_PREFIX}/", ui_root, methods=["GET", "HEAD"]),
        Route(f"{UI_PREFIX}/{{rest:path}}", ui_page, methods=["GET", "HEAD"]),
    ]


def is_ui_path(path: str) -> bool:
    """Paths the token does not guard: the page and its assets, which hold no data."""
    return path == "/" or path == UI_PREFIX or path.startswith(UI_PREFIX + "/")
