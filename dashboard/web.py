"""The HTTP side: the page, its JSON API and the event stream (aiohttp; docs/dashboard.md).

- ``GET /``: the page (static HTML, CSS and JavaScript from the package);
- ``GET /api/stream``: Server-Sent Events: a ``snapshot`` first, then ``events``, ``fleet``,
  ``status`` and ``sample`` deltas;
- ``GET /api/state``: the snapshot alone (scripts, tests);
- ``GET /api/workers``: one page of the fleet (``sort``, ``desc``, ``state``, ``zone``, ``q``,
  ``offset``, ``limit``); ``GET /api/workers/{id}``: its row, tasks and recent events;
- ``GET /api/tasks``: tasks from the supervisor (``task`` id prefix, ``worker``, ``pending``,
  ``after``);
- ``GET /api/events``: the events seen, newest first (``kind``, ``q``, ``worker``, ``before``,
  ``limit``);
- ``POST /api/actions/{drain,undrain,query}``: an action, with the token header (auth.py);
  ``POST /api/auth``: 204 when the token header is right, 403 otherwise (429 while the
  client's last wrong token is less than a second old).

A request naming a host that is not allowed gets a 421 (auth.Hosts: DNS rebinding); bad
parameters a 400 with one sentence; a static file that is not the page's a 404. Nothing a
browser sends can stop the server, and aiohttp's own complaints (a request line too long, a
malformed request) are one JSON log line each, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from corral.cli import logs
from corral.client import ControlFailed, Unreachable

from . import auth, stream
from .follower import Follower

if TYPE_CHECKING:
    import socket

    from corral.client import ControlClient

    from .cli import DashboardConfig

STATIC = Path(str(resources.files("corral.dashboard") / "static"))
KEEPALIVE_S = 15.0
MAX_PAGE = 500
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
ACTIONS = {"drain": True, "undrain": True, "query": False}  # verb -> takes a worker
FOLLOWER = web.AppKey("follower", Follower)
HUB = web.AppKey("hub", stream.Hub)
TOKEN = web.AppKey("token", str)
HOSTS = web.AppKey("hosts", auth.Hosts)
THROTTLE = web.AppKey("throttle", auth.Throttle)
# The page's own files, by name: nothing else is looked up on disk.
FILES = {p.name: p for p in STATIC.iterdir() if p.is_file()}
log = logs.get("dashboard.web")


class OneLine(logging.Handler):
    """aiohttp's own log records (a request it could not parse, an error in a handler) as one
    structured line each: what happened and the exception's sentence, no traceback."""

    def emit(self, record: logging.LogRecord) -> None:
        fields: dict[str, Any] = {"logger": record.name}
        level = "error" if record.levelno >= logging.ERROR else "warning"
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None:
            fields["error"] = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            if isinstance(exc, HttpProcessingError):  # the client's fault: not our error
                level = "warning"
        getattr(log, level)(" ".join(record.getMessage().split())[:300], **fields)


def quiet_aiohttp() -> None:
    """Route aiohttp's loggers through `OneLine` (they print tracebacks to stderr else)."""
    for name in ("aiohttp.server", "aiohttp.web", "aiohttp.internal", "aiohttp.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [OneLine()]
        logger.propagate = False
        logger.setLevel(logging.WARNING)


class BadRequest(ValueError):
    pass


def _int(req: web.Request, name: str, default: int, lo: int = 0, hi: int = 1 << 31) -> int:
    raw = req.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, not {raw[:40]!r}") from None
    if not lo <= value <= hi:
        raise BadRequest(f"{name} must be between {lo} and {hi}")
    return value


def _flag(req: web.Request, name: str) -> bool:
    return req.query.get(name, "") in ("1", "true", "yes", "on")


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@web.middleware
async def guard(request: web.Request,
                handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                ) -> web.StreamResponse:
    """Security headers on every answer; a host not allowed gets a 421, bad input a 400, an
    unreachable supervisor a 503, a refused request a 409, never a crash."""
    resp: web.StreamResponse
    try:
        if not request.app[HOSTS].allows(request.headers.get("Host")):
            log.warning("request for a host not allowed", host=request.headers.get("Host",
                        "")[:200], peer=request.remote, path=request.path[:200])
            resp = _error(421, "this dashboard does not answer for that host name (start it "
                          "with --allow-host NAME to allow one)")
        else:
            resp = await handler(request)
    except BadRequest as exc:
        resp = _error(400, str(exc))
    except Unreachable as exc:
        resp = _error(503, f"supervisor unreachable: {exc}")
    except ControlFailed as exc:
        resp = _error(404 if exc.error.code == "not_found" else 409, str(exc))
    for k, v in SECURITY_HEADERS.items():
        resp.headers.setdefault(k, v)
    return resp


async def index(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


async def static(request: web.Request) -> web.StreamResponse:
    """One of the page's files; any other name is a 404 (never a path on disk)."""
    path = FILES.get(request.match_info["name"])
    if path is None:
        return _error(404, "no such file")
    return web.FileResponse(path)


def _snapshot(app: web.Application) -> dict[str, Any]:
    return {**app[FOLLOWER].snapshot(), "actions": bool(app[TOKEN])}


async def state(request: web.Request) -> web.Response:
    return web.json_response(_snapshot(request.app))


async def events_stream(request: web.Request) -> web.StreamResponse:
    hub = request.app[HUB]
    if hub.full():
        return _error(503, f"too many browsers ({hub.max_browsers}) on this dashboard")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    await resp.prepare(request)
    sub = hub.subscribe()
    sub.task = asyncio.current_task()
    try:
        await resp.write(f"retry: {stream.RETRY_MS}\n\n".encode())
        hub.send(sub, "snapshot", _snapshot(request.app))
        while not sub.dropped:
            try:
                payload = await asyncio.wait_for(sub.queue.get(), KEEPALIVE_S)
            except TimeoutError:
                payload = b": keep-alive\n\n"
            await resp.write(payload)
    except (asyncio.CancelledError, ConnectionResetError):
        if sub.dropped:
            log.info("browser dropped: it fell behind", peer=request.remote)
    finally:
        hub.unsubscribe(sub)
    return resp


async def workers(request: web.Request) -> web.Response:
    f = request.app[FOLLOWER]
    page = f.fleet.page(sort=request.query.get("sort", "id"), desc=_flag(request, "desc"),
                        state=request.query.get("state", ""), zone=request.query.get("zone", ""),
                        q=request.query.get("q", ""), offset=_int(request, "offset", 0),
                        limit=_int(request, "limit", 100, 1, MAX_PAGE))
    return web.json_response({**page, "summary": f.fleet.summary(),
                              "now_ms": round(f.wall_ms())})


async def worker(request: web.Request) -> web.Response:
    f = request.app[FOLLOWER]
    wid = request.match_info["id"]
    row = f.fleet.rows.get(wid)
    if row is None:
        return _error(404, f"no worker {wid!r}")
    tasks = _walled(f, await f.call("tasks", {"worker": wid, "limit": _int(
        request, "limit", 200, 1, MAX_PAGE)}))
    return web.json_response({"worker": row, "tasks": tasks["tasks"], "more": tasks["next"],
                              "events": f.log.query(worker=wid, limit=50),
                              "now_ms": round(f.wall_ms())})


async def tasks(request: web.Request) -> web.Response:
    args: dict[str, Any] = {"limit": _int(request, "limit", 100, 1, MAX_PAGE)}
    for name in ("task", "worker", "after"):
        if request.query.get(name):
            args[name] = request.query[name]
    if _flag(request, "pending"):
        args["pending"] = True
    f = request.app[FOLLOWER]
    return web.json_response(_walled(f, await f.call("tasks", args)))


def _walled(f: Follower, page: dict[str, Any]) -> dict[str, Any]:
    """A tasks page with each last error's time on the dashboard's wall clock (``at_ms``):
    the supervisor's ``t`` is on its own monotonic clock, ``now`` the same clock's reading."""
    now, wall = page.get("now"), f.wall_ms()
    for t in page["tasks"]:
        e = t.get("last_error")
        if e and isinstance(now, int | float):
            e["at_ms"] = round(wall - 1000.0 * (now - e["t"]))
    return page


async def events(request: web.Request) -> web.Response:
    f = request.app[FOLLOWER]
    before = _int(request, "before", 0) or None
    found = f.log.query(kind=request.query.get("kind", ""), q=request.query.get("q", ""),
                        worker=request.query.get("worker", ""), before=before,
                        limit=_int(request, "limit", 100, 1, MAX_PAGE))
    return web.json_response({"events": found, "newest": f.log.n})


def _refusal(request: web.Request, what: str) -> web.Response | None:
    """None when the request may act; else its answer: 429 while the client's last wrong
    token is under `auth.GUESS_EVERY_S` old (the token is not even checked), 403 otherwise.
    Every refused token is logged with the client's address."""
    app, peer = request.app, request.remote or "?"
    throttle, now = app[THROTTLE], time.monotonic()
    wait = throttle.wait(peer, now)
    if wait > 0 and auth.presented(request.headers):
        return web.json_response({"error": f"too many wrong tokens: try again in {wait:.1f} s"},
                                 status=429, headers={"Retry-After": str(int(wait) + 1)})
    why = auth.check(request.headers, app[TOKEN] or None, app[HOSTS])
    if why is None:
        return None
    if why == "wrong token":
        throttle.refused(peer, now)
    log.warning("refused", what=what, peer=peer, reason=why)
    return _error(403, why)


async def check_auth(request: web.Request) -> web.Response:
    refused = _refusal(request, "unlock")
    return refused if refused is not None else web.Response(status=204)


async def action(request: web.Request) -> web.Response:
    verb = request.match_info["verb"]
    refused = _refusal(request, f"action {verb[:40]}")
    if refused is not None:
        return refused
    if verb not in ACTIONS:
        return _error(404, f"no action {verb!r}; actions: {', '.join(ACTIONS)}")
    args: dict[str, Any] = {}
    if ACTIONS[verb]:
        body: Any = None
        with contextlib.suppress(ValueError):
            body = await request.json()
        worker_id = body.get("worker") if isinstance(body, dict) else None
        if not isinstance(worker_id, str) or not worker_id:
            raise BadRequest(f'{verb}: send {{"worker": "ID"}} as JSON')
        args["worker"] = worker_id
    try:
        result = await request.app[FOLLOWER].act(verb, args)
    except (ControlFailed, Unreachable) as exc:
        log.warning("action failed", action=verb, peer=request.remote, error=str(exc), **args)
        raise
    log.info("action", action=verb, peer=request.remote, **args)
    return web.json_response({"ok": True, "result": result})


def make_app(follower: Follower, hub: stream.Hub, token: str | None,
             hosts: auth.Hosts) -> web.Application:
    app = web.Application(middlewares=[guard], client_max_size=64 * 1024)
    app[FOLLOWER], app[HUB], app[TOKEN] = follower, hub, token or ""
    app[HOSTS], app[THROTTLE] = hosts, auth.Throttle()
    app.router.add_get("/", index)
    app.router.add_get("/static/{name}", static)
    app.router.add_get("/api/stream", events_stream)
    app.router.add_get("/api/state", state)
    app.router.add_get("/api/workers", workers)
    app.router.add_get("/api/workers/{id}", worker)
    app.router.add_get("/api/tasks", tasks)
    app.router.add_get("/api/events", events)
    app.router.add_post("/api/auth", check_auth)
    app.router.add_post("/api/actions/{verb}", action)

    async def follow(app: web.Application) -> Any:
        task = asyncio.create_task(follower.run())
        yield
        await follower.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    app.cleanup_ctx.append(follow)
    return app


def serve(cfg: DashboardConfig, sock: socket.socket, client: ControlClient) -> None:
    """Serve on the bound socket until SIGTERM or SIGINT."""
    hub = stream.Hub()
    follower = Follower(client, hub, cfg.follow)
    host, port = sock.getsockname()[:2]
    log.info("dashboard serving", url=f"http://{host}:{port}/", control=",".join(cfg.control),
             actions=cfg.token is not None, hosts=sorted(cfg.hosts.names))
    quiet_aiohttp()
    web.run_app(make_app(follower, hub, cfg.token, cfg.hosts), sock=sock, shutdown_timeout=1.0,
                print=None, access_log=None)
