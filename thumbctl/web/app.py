"""The review page's web application (Starlette): its routes, and the checks every request passes.

Every request must name the session's token as the first part of its path (``/<token>/...``), so a
page of another site cannot guess its way in; its ``Host`` must be the loopback address the server
listens on (against DNS rebinding), and an ``Origin``, required on every POST, must be that address
too (against cross-site posts). Only the page's own static files, the catalogue's previews and
thumbnails (looked up in the ledger by photo and name, never by a path) and the JSON API are served.
"""

from __future__ import annotations

import asyncio
import json
import math
import secrets
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ..core.errors import ItemNotFound, ReviewConflict, ThumbctlError, UsageError
from ..core.models import BatchView
from ..cropreview.photos import Listing, Shown
from ..cropreview.session import ReviewSession

#: The page's static files (shipped in the package), by the name a request may ask for, and their types.
STATIC = {
    "review.js": "text/javascript",
    "geometry.js": "text/javascript",
    "api.js": "text/javascript",
    "review.css": "text/css",
}
#: The largest request body read (an Apply's JSON is a few hundred bytes).
BODY_LIMIT = 64 * 1024
#: What every answer carries: no page of another origin may frame or read it, nothing loads from
#: elsewhere, and the token in the address never leaves in a Referer.
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; img-src 'self' data: blob:; script-src 'self'; "
    "style-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}

Handler = Callable[[Request], Awaitable[Response]]


def review_app(session: ReviewSession, token: str, port: int) -> ASGIApp:
    """The application serving ``session`` on loopback ``port`` under ``/<token>/``."""
    routes = [
        Route("/", page),
        Route("/static/{name}", static),
        Route("/api/photos", photos),
        Route("/api/photos/{digest}", photo),
        Route("/api/photos/{digest}/apply", apply, methods=["POST"]),
        Route("/api/photos/{digest}/approve", approve, methods=["POST"]),
        Route("/api/batches/{batch_id}", batch),
        Route("/api/batches/{batch_id}/cancel", cancel, methods=["POST"]),
        Route("/img/{digest}/preview", preview),
        Route("/img/{digest}/thumbnail", thumbnail),
    ]
    app = Starlette(
        routes=[Mount(f"/{token}", routes=routes)],
        exception_handlers={HTTPException: _http_error, ClientDisconnect: _gone},
    )
    app.state.session = session
    return Guard(app, token, port)


class Guard:
    """The checks of every request before it is routed: token, ``Host``, ``Origin``."""

    def __init__(self, app: ASGIApp, token: str, port: int) -> None:
        self.app = app
        self.token = token
        self.hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}
        self.origins = {f"http://{host}" for host in self.hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # no WebSocket, no lifespan: nothing else is served
        refusal = self.refusal(scope)
        if refusal is not None:
            await _error(403, "forbidden", refusal)(scope, receive, send)
            return
        try:
            await self.app(scope, receive, _with_headers(send))
        except asyncio.CancelledError:
            return  # the server stops (Ctrl-C) while a request is open: it ends unanswered, quietly

    def refusal(self, scope: Scope) -> str | None:
        """Why the request is refused, or None."""
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        if headers.get("host", "") not in self.hosts:
            return "this page answers only at the address thumbctl review printed (the Host header differs)"
        origin = headers.get("origin")
        if origin is not None and origin not in self.origins:
            return "requests from another site are refused (the Origin header differs)"
        if scope["method"] not in ("GET", "HEAD") and origin is None:
            return "a change must come from the review page itself (no Origin header)"
        first = scope["path"].lstrip("/").split("/", 1)[0]
        if not secrets.compare_digest(first.encode(), self.token.encode()):
            return "the address lacks the review's token: open the URL thumbctl review printed"
        return None


def _with_headers(send: Send) -> Send:
    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [
                *message.get("headers", []),
                *((name.encode(), value.encode()) for name, value in SECURITY_HEADERS.items()),
            ]
        await send(message)

    return sending


class Json(JSONResponse):
    """JSON with every character outside ASCII escaped: a name with bytes that are not UTF-8 (a lone
    surrogate in Python) is sent as it is, never a failed encoding."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def _error(status: int, code: str, message: str) -> Response:
    return Json({"error": {"code": code, "message": message}}, status_code=status)


async def _http_error(request: Request, exc: Exception) -> Response:
    """A path that names nothing, or a method a route does not take: a JSON error like the others."""
    status = exc.status_code if isinstance(exc, HTTPException) else 400
    return _error(status, "not_found" if status == 404 else "bad_request", str(getattr(exc, "detail", exc)))


async def _gone(request: Request, exc: Exception) -> Response:
    """The browser went away in the middle of its request: nothing to answer, nothing changed."""
    return Response(status_code=400)


def _session(request: Request) -> ReviewSession:
    return request.app.state.session  # type: ignore[no-any-return]


async def _answer(work: Callable[[], object]) -> Response:
    """``work()`` run in a thread, its JSON answered; a thumbctl error as a clear JSON error."""
    try:
        result = await run_in_threadpool(work)
    except ThumbctlError as exc:
        return _error(_status(exc), exc.code, exc.message)
    except Exception as exc:  # noqa: BLE001 - a fault of thumbctl's: one line on the page, not a traceback
        return _error(500, "internal_error", f"thumbctl failed: {type(exc).__name__}: {str(exc)[:300]}")
    return result if isinstance(result, Response) else Json(result, headers={"cache-control": "no-store"})


def _status(exc: ThumbctlError) -> int:
    if isinstance(exc, ItemNotFound):
        return 404
    if isinstance(exc, ReviewConflict):
        return 409
    return 400 if isinstance(exc, UsageError) else 503


async def page(request: Request) -> Response:
    """The page, with the first page of the listing in it (a JSON data block, which no CSP blocks: it
    is never run), so the first screen needs no request of its own."""
    html = resources.files(__package__).joinpath("static/review.html").read_text(encoding="utf-8")
    session = _session(request)
    try:
        first = await run_in_threadpool(session.listing, Listing())
    except ThumbctlError:
        first = None  # the page asks again and shows the error
    if first is not None:
        data = json.dumps(first, ensure_ascii=True).replace("<", "\\u003c").replace(">", "\\u003e")
        html = html.replace("<!--first-page-->", f'<script type="application/json" id="first">{data}</script>')
    return Response(html, media_type="text/html; charset=utf-8", headers={"cache-control": "no-store"})


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC:
        return _error(404, "not_found", "no such file of the page")
    data = resources.files(__package__).joinpath(f"static/{name}").read_bytes()
    return Response(data, media_type=STATIC[name])


async def photos(request: Request) -> Response:
    query = request.query_params
    try:
        listing = Listing(
            shown=Shown(query.get("shown", "all")),
            ratio=query.get("ratio", ""),
            below=_number(query.get("below", "0.5"), "below", 0.0, 1.0),
            offset=int(_number(query.get("offset", "0"), "offset", 0, 10**9)),
            limit=int(_number(query.get("limit", "40"), "limit", 1, 200)),
        )
    except ValueError as exc:
        return _error(400, "bad_request", str(exc)[:200])
    session = _session(request)
    return await _answer(lambda: session.listing(listing))


def _number(text: str, name: str, low: float, high: float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} must be a number in {low}..{high}") from None
    if not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{name} must be a number in {low}..{high}")
    return value


async def photo(request: Request) -> Response:
    session, digest = _session(request), request.path_params["digest"]
    return await _answer(lambda: session.photo(digest).to_json())


async def apply(request: Request) -> Response:
    body = await _json_body(request)
    if isinstance(body, Response):
        return body
    version, changes = body.get("version"), body.get("changes")
    if not isinstance(version, str) or not isinstance(changes, dict) or len(changes) > 64:
        return _error(400, "bad_request", 'send {"version": "...", "changes": {"4:3": [x, y] or null}}')
    parsed: dict[str, tuple[float, float] | None] = {}
    for ratio, point in changes.items():
        if point is not None and not _point_like(point):
            return _error(400, "bad_focus", f"the focus of {str(ratio)[:20]} must be [x, y] with both in 0..1")
        parsed[str(ratio)] = (float(point[0]), float(point[1])) if point is not None else None
    session, digest = _session(request), request.path_params["digest"]
    return await _answer(lambda: session.apply(digest, version, parsed).to_json())


def _point_like(point: object) -> bool:
    return (
        isinstance(point, list)
        and len(point) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in point)
        and all(0 <= v <= 1 for v in point)
    )


async def approve(request: Request) -> Response:
    body = await _json_body(request)
    if isinstance(body, Response):
        return body
    version = body.get("version")
    if not isinstance(version, str):
        return _error(400, "bad_request", 'send {"version": "..."}')
    session, digest = _session(request), request.path_params["digest"]
    return await _answer(lambda: session.approve(digest, version).to_json())


async def batch(request: Request) -> Response:
    session, batch_id = _session(request), request.path_params["batch_id"]
    return await _answer(lambda: _progress(session.batch(batch_id)))


async def cancel(request: Request) -> Response:
    session, batch_id = _session(request), request.path_params["batch_id"]
    return await _answer(lambda: _progress(session.cancel(batch_id)))


def _progress(batch: BatchView) -> dict[str, object]:
    """A batch as the page follows it: its state, counts and how many of its items are done; once it
    has ended, its failures (what the page says of a render that failed)."""
    return batch.to_json(with_failures=batch.is_terminal) | {"done": batch.done}


async def preview(request: Request) -> Response:
    session, digest = _session(request), request.path_params["digest"]
    return await _answer(lambda: Response(session.preview(digest), media_type="image/jpeg", headers=_cached()))


async def thumbnail(request: Request) -> Response:
    session, digest = _session(request), request.path_params["digest"]
    name = request.query_params.get("name", "")

    def read() -> Response:
        data, media = session.thumbnail(digest, name)
        return Response(data, media_type=media, headers=_cached())

    return await _answer(read)


def _cached() -> dict[str, str]:
    """Images are asked for with their version in the address: a new version is a new address."""
    return {"cache-control": "private, max-age=3600"}


async def _json_body(request: Request) -> dict[str, object] | Response:
    """The request's JSON object, read up to :data:`BODY_LIMIT` bytes; else the error to answer."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return _error(415, "bad_request", "send JSON (Content-Type: application/json)")
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > BODY_LIMIT:
            return _error(413, "bad_request", f"the request is over {BODY_LIMIT // 1024} KB")
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        return _error(400, "bad_request", "the request is not valid JSON")
    if not isinstance(body, dict):
        return _error(400, "bad_request", "send a JSON object")
    return body
