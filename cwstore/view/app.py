"""The ASGI application of ``cwstore view``: the page, its static files and a JSON API.

Every route reads; none writes. State as of a point comes from the database's as-of
functions (``projection_v1`` through :meth:`AsyncStore.project`, ``ancestors``,
``descendants``, ``key_history``), never from a fold here or in the browser. Each
request's error becomes a JSON object ``{"error": {"type", "message"}}`` with an HTTP
status (400 bad parameter, 404 unknown graph or node, 500 anything else), never a
traceback (503 when the database cannot be reached or a read ran past its statement
timeout). A graph erased while the page follows it: the live stream ends with an
``erased`` event, and an error of type ``graph_erased`` (404) tells it apart from
``unknown_graph``.

Hostile use is bounded: a request whose ``Host`` header names neither an address nor
``localhost`` nor a host the user allowed is refused (403, against DNS rebinding); a
request whose client leaves is cancelled, its query with it; live streams share the
store's pool and one follower (:mod:`cwstore.view.live`), at most ``max_live`` at once;
a node's history sends a preview of each version, a payload only on demand.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any, LiteralString

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cwstore import (
    AsyncConnection,
    AsyncStore,
    CausalNode,
    DatabaseError,
    Error,
    GraphErasedError,
    InputError,
    PermissionDeniedError,
    Row,
    StoreTimeoutError,
    UnknownGraphError,
    ValidationError,
    named_queries,
)

from .live import Busy, LiveHub

__all__ = ["MAX_WINDOW", "ViewConfig", "create_app", "host_allowed", "psql_set"]

log = logging.getLogger("cwstore.view")

Q: dict[str, LiteralString] = named_queries("cwstore.view")
MAX_WINDOW = 2000
MAX_GRAPHS = 500
RELATIVES_LIMIT = 200
RELATIVES_DEPTH = 10
HISTORY_LIMIT = 200
PAYLOAD_CHARS = 100_000
"""Characters of a node's own payload ``/api/node`` sends; ``/api/payload`` sends all."""
PREVIEW_CHARS = 200
"""Characters of each version's payload text a node's history sends (the page shows 50)."""


@dataclass(frozen=True, slots=True)
class ViewConfig:
    """What the page starts with: the graph to open (or the list) and the window size."""

    first_graph: str | None = None
    window: int = 300
    hosts: frozenset[str] = frozenset()
    """Host names (lower case, no port) served besides addresses and ``localhost``."""
    port: int | None = None
    """The port a Host header must name, when it names one (``None``: any)."""


class _Problem(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


class _JSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        return _dumps(content).encode("utf-8")


def _error(status: int, kind: str, message: str) -> Response:
    return _JSON({"error": {"type": kind, "message": message}}, status_code=status)


def _problem_of(exc: BaseException) -> _Problem:
    if isinstance(exc, _Problem):
        return exc
    if isinstance(exc, GraphErasedError):
        return _Problem(404, "graph_erased", exc.message)
    if isinstance(exc, UnknownGraphError):
        return _Problem(404, "unknown_graph", exc.message)
    if isinstance(exc, InputError | ValidationError) or (
        isinstance(exc, DatabaseError) and exc.sqlstate == _INVALID_PARAMETER
    ):
        return _Problem(400, "bad_request", exc.message)
    if isinstance(exc, PermissionDeniedError):
        return _Problem(403, "permission_denied", exc.message)
    if isinstance(exc, Busy):
        return _Problem(503, "busy", exc.message)
    if isinstance(exc, StoreTimeoutError):
        return _Problem(503, "timeout", exc.message)
    if isinstance(exc, DatabaseError) and _unreachable(exc.sqlstate):
        return _Problem(503, "database unreachable", exc.message)
    if isinstance(exc, Error):
        return _Problem(500, type(exc).__name__, exc.message)
    return _Problem(500, "internal", f"{type(exc).__name__}: {exc}")


_INVALID_PARAMETER = "22023"
"""What a read function raises for an argument out of its range (a request's value)."""


def _unreachable(sqlstate: str | None) -> bool:
    """A connection-level failure: no SQLSTATE (the socket or the driver), class 08
    (connection exception), or the server shutting down or starting (57P01 to 57P03)."""
    return sqlstate is None or sqlstate.startswith("08") or sqlstate in ("57P01", "57P02", "57P03")


def host_allowed(host_header: str, hosts: frozenset[str], port: int | None) -> bool:
    """Whether a request's ``Host`` header names this view: an IP address, ``localhost``
    or one of ``hosts``, with ``port`` when it has a port. A DNS-rebinding page names
    its own domain, which is none of these."""
    h = host_header.strip().lower()
    if h.startswith("["):  # [IPv6]:port
        name, _, rest = h[1:].partition("]")
        if rest and not rest.startswith(":"):
            return False
        given = rest[1:]
    elif h.count(":") > 1:  # an IPv6 address must be in brackets
        return False
    else:
        name, _, given = h.partition(":")
    if given and (not given.isdigit() or (port is not None and int(given) != port)):
        return False
    name = name.removesuffix(".")
    if not name:
        return False
    if name == "localhost" or name in hosts:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class _Guard:
    """ASGI middleware: refuse a foreign ``Host`` (403), and cancel a request whose
    client disconnects (its database query is cancelled with it). Live streams watch
    for the disconnect themselves (Starlette's streaming response does)."""

    def __init__(self, app: ASGIApp, config: ViewConfig) -> None:
        self.app, self.config = app, config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
        if not host_allowed(host, self.config.hosts, self.config.port):
            response = _error(
                403,
                "forbidden_host",
                f"this view does not serve host {host[:200]!r}; "
                "start it with --allow-host NAME to serve a name",
            )
            await response(scope, receive, send)
            return
        if scope["path"] == "/api/live" or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        await _cancelled_on_disconnect(self.app, scope, receive, send)


async def _cancelled_on_disconnect(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send
) -> None:
    """Run the request; cancel it when the client disconnects first."""

    async def nothing_more() -> Message:  # a GET has no body to read
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    handler = asyncio.ensure_future(app(scope, nothing_more, send))

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait({handler, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not handler.done():
            handler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await handler


Handler = Callable[[Request], Awaitable[Response]]


def _json_errors(handler: Handler) -> Handler:
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except Exception as exc:
            problem = _problem_of(exc)
            if problem.status >= 500:
                log.warning("%s %s: %s", request.method, request.url.path, problem.message)
            return _error(problem.status, problem.kind, problem.message)

    return wrapped


# ------------------------------------------------------------------ parameters


def _text(request: Request, name: str) -> str:
    value = request.query_params.get(name)
    if not value:
        raise InputError(f"parameter {name!r} is required")
    if "\x00" in value:
        raise InputError(f"parameter {name!r} holds NUL")
    return value


def _int(request: Request, name: str, default: int | None, lo: int, hi: int) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InputError(f"parameter {name!r} must be an integer, got {raw!r}") from None
    if not lo <= value <= hi:
        raise InputError(f"parameter {name!r} must be between {lo} and {hi}, got {value}")
    return value


def _time(request: Request, name: str) -> datetime | None:
    raw = request.query_params.get(name)
    if not raw:
        return None
    try:
        t = datetime.fromisoformat(raw.strip().replace("z", "Z"))
    except ValueError:
        raise InputError(f"parameter {name!r}: {raw!r} is not an RFC 3339 timestamp") from None
    if t.tzinfo is None or t.utcoffset() is None:
        raise InputError(f"parameter {name!r}: {raw!r} needs a zone (Z or +hh:mm)")
    try:
        return t.astimezone(UTC)
    except OverflowError:
        raise InputError(
            f"parameter {name!r}: {raw!r} is out of range (years 1 to 9999 in UTC)"
        ) from None


def psql_set(name: str, value: str | int) -> str:
    """A psql ``\\set`` line giving variable ``name`` the text ``value`` (quoted for psql:
    backslashes and quotes doubled), to put before a snippet that reads ``:'name'``."""
    if isinstance(value, int):
        return f"\\set {name} {value}"
    quoted = value.replace("\\", "\\\\").replace("'", "\\'")
    return f"\\set {name} '{quoted}'"


def _window_bounds(at: int, length: int, size: int) -> tuple[int, int]:
    """Nodes lo..hi to draw: ``size`` of them, about three quarters up to ``at``."""
    if length == 0:
        return 1, 0
    lo = max(1, at - (size * 3) // 4)
    hi = min(length, lo + size - 1)
    lo = max(1, hi - size + 1)
    return lo, hi


def _node_event(node: CausalNode) -> dict[str, Any]:
    return {
        "seq": node.sequence,
        "id": node.id,
        "kind": node.kind,
        "parents": list(node.parents),
        "createdAt": node.created_at,
        "resourceKey": node.resource_key,
    }


# ------------------------------------------------------------------ the app


class _Handlers:
    """The view's request handlers, one method each, over what they share: an open store
    (for the as-of reads, and its pool for the queries of ``cwstore/view/queries.sql``,
    each run in a read-only snapshot), the view's settings and the hub of its live
    streams."""

    def __init__(self, store: AsyncStore, config: ViewConfig, live: LiveHub) -> None:
        self.store = store
        self.config = config
        self.live = live
        static = resources.files("cwstore.view") / "static"
        self.index_html = (static / "index.html").read_text(encoding="utf-8")

    async def graph_row(self, conn: AsyncConnection, graph: str) -> Row:
        row = await conn.fetchrow(Q["view_graph"], graph)
        if row is None:
            raise UnknownGraphError(graph=graph)
        return row

    async def index(self, request: Request) -> Response:
        return HTMLResponse(self.index_html, headers={"Cache-Control": "no-store"})

    async def api_config(self, request: Request) -> Response:
        return _JSON(
            {
                "first_graph": self.config.first_graph,
                "window": self.config.window,
                "max": MAX_WINDOW,
            }
        )

    async def api_graphs(self, request: Request) -> Response:
        search = request.query_params.get("q") or None
        if search is not None and "\x00" in search:
            raise InputError("parameter 'q' holds NUL")
        async with self.store.connection() as conn, conn.transaction(snapshot=True):
            roles_on = bool(await conn.fetchval(Q["view_roles_on"]))
            rows = await conn.fetch(Q["view_graphs"], search, MAX_GRAPHS + 1)
        graphs = [
            {
                "name": r["name"],
                "length": r["length"],
                "tenant": r["tenant"],
                "created_at": r["created_at"].isoformat(),
                "last_write": r["last_write"].isoformat() if r["last_write"] else None,
            }
            for r in rows[:MAX_GRAPHS]
        ]
        return _JSON({"roles": roles_on, "graphs": graphs, "more": len(rows) > MAX_GRAPHS})

    async def api_state(self, request: Request) -> Response:
        graph = _text(request, "graph")
        t = _time(request, "time")
        at = _int(request, "at", None, 0, 2**62)
        if t is not None and at is not None:
            raise InputError("give 'at' or 'time', not both")
        length = await self.store.length(graph)
        as_of: int | datetime | None = t if t is not None else at
        if isinstance(as_of, int) and as_of > length:
            as_of = length
        p = await self.store.project(graph, as_of=as_of)
        sql = "\n".join((psql_set("graph", graph), psql_set("at", p.length), Q["psql_state"]))
        memory = [
            {"type": m.type, "key": m.key, "version": m.version, "seq": m.sequence, "id": m.id}
            for m in p.memory
        ]
        body = {"graph": graph, "at": p.length, "length": length, "state": p.to_json_obj()}
        return _JSON({**body, "memory": memory, "sql": sql})

    async def api_window(self, request: Request) -> Response:
        graph = _text(request, "graph")
        at_q = _int(request, "at", None, 0, 2**62)
        size = _int(request, "size", self.config.window, 10, MAX_WINDOW) or self.config.window
        async with (
            self.store.connection() as conn,
            conn.transaction(snapshot=True),
        ):
            g = await self.graph_row(conn, graph)
            length = int(g["length"])
            at = length if at_q is None else min(at_q, length)
            lo, hi = _window_bounds(at, length, size)
            nodes = await conn.fetch(Q["view_window_nodes"], g["graph_id"], lo, hi)
            edges = await conn.fetch(Q["view_window_edges"], g["graph_id"], lo, hi)
        before = (await self.store.project(graph, lo - 1)).counts if lo > 1 else {}
        upto = (await self.store.project(graph, hi)).counts if hi < length else {}
        total = (await self.store.project(graph, length)).counts if hi < length else {}
        after = {k: n - upto.get(k, 0) for k, n in total.items() if n - upto.get(k, 0) > 0}
        return _JSON(
            {
                "graph": graph,
                "length": length,
                "at": at,
                "lo": lo,
                "hi": hi,
                "nodes": [
                    {
                        "seq": r["seq"],
                        "id": r["id"],
                        "kind": r["kind"],
                        "createdAt": r["created_at_text"],
                        "resourceKey": r["resource_key"],
                        "preview": r["preview"],
                    }
                    for r in nodes
                ],
                "edges": [[r["child_seq"], r["parent_seq"]] for r in edges],
                "before": {"count": lo - 1, "kinds": before},
                "after": {"count": max(0, length - hi), "kinds": after},
            }
        )

    async def api_node(self, request: Request) -> Response:
        graph = _text(request, "graph")
        node_id = _text(request, "id")
        depth = _int(request, "depth", RELATIVES_DEPTH, 0, 2**31 - 1) or None
        limit = _int(request, "limit", RELATIVES_LIMIT, 1, 10_000) or RELATIVES_LIMIT
        async with (
            self.store.connection() as conn,
            conn.transaction(snapshot=True),
        ):
            g = await self.graph_row(conn, graph)
            n = await conn.fetchrow(Q["view_node"], g["graph_id"], node_id, PAYLOAD_CHARS)
            if n is None:
                raise _Problem(404, "unknown_node", f"graph {graph!r} has no node {node_id!r}")
            anc = await conn.fetch(Q["view_ancestors"], graph, node_id, depth, limit + 1)
            desc = await conn.fetch(Q["view_descendants"], graph, node_id, depth, limit + 1)
            key = n["resource_key"]
            history: list[dict[str, Any]] = []
            versions = 0
            if key is not None:
                versions = int(await conn.fetchval(Q["view_key_versions"], g["graph_id"], key))
                found = await conn.fetch(
                    Q["view_key_history"], g["graph_id"], key, HISTORY_LIMIT, PREVIEW_CHARS
                )
                history = [
                    {
                        "version": v["version"],
                        "seq": v["seq"],
                        "id": v["id"],
                        "kind": v["kind"],
                        "createdAt": v["created_at_text"],
                        "preview": v["preview"],
                        "bytes": v["bytes"],
                    }
                    for v in reversed(found)
                ]
        sql = [psql_set("graph", graph), psql_set("node", node_id)]
        if key is not None:
            sql.append(psql_set("key", key))
        sql.append(Q["psql_node"])
        if key is not None:
            sql.append(Q["psql_key"])

        def rel(rows: list[Row]) -> dict[str, Any]:
            return {
                "rows": [
                    {"seq": r["seq"], "id": r["id"], "kind": r["kind"], "depth": r["depth"]}
                    for r in rows[:limit]
                ],
                "more": len(rows) > limit,
            }

        return _JSON(
            {
                "graph": graph,
                "node": {
                    "seq": n["seq"],
                    "id": n["id"],
                    "kind": n["kind"],
                    "parents": list(n["parents"]),
                    "createdAt": n["created_at_text"],
                    "recordedAt": n["recorded_at"].isoformat(),
                    "resourceKey": key,
                    "payload_text": n["payload_text"],
                    "payload_chars": n["payload_chars"],
                    "payload_truncated": n["payload_chars"] > PAYLOAD_CHARS,
                },
                "depth": depth,
                "ancestors": rel(anc),
                "descendants": rel(desc),
                "history": {"key": key, "versions": versions, "rows": history},
                "sql": "\n".join(sql),
            }
        )

    async def api_payload(self, request: Request) -> Response:
        graph = _text(request, "graph")
        node_id = _text(request, "id")
        async with self.store.connection() as conn, conn.transaction(snapshot=True):
            g = await self.graph_row(conn, graph)
            text = await conn.fetchval(Q["view_payload"], g["graph_id"], node_id)
        if text is None:
            raise _Problem(404, "unknown_node", f"graph {graph!r} has no node {node_id!r}")
        return _JSON({"graph": graph, "id": node_id, "payload_text": text})

    async def api_live(self, request: Request) -> Response:
        graph = _text(request, "graph")
        after = _int(request, "after", 0, 0, 2**62) or 0
        await self.store.length(graph)
        self.live.open()

        async def events() -> AsyncIterator[str]:
            yield "retry: 2000\n: following\n\n"
            try:
                async for node in self.live.follow(graph, after):
                    yield f"event: node\ndata: {_dumps(_node_event(node))}\n\n"
            except GraphErasedError as exc:
                # The stream's last event: the page stops following and says so.
                body = {"type": "graph_erased", "graph": graph, "message": exc.message}
                yield f"event: erased\ndata: {_dumps(body)}\n\n"
            except Exception as exc:
                problem = _problem_of(exc)
                body = {"type": problem.kind, "message": problem.message}
                yield f"event: problem\ndata: {_dumps(body)}\n\n"

        return StreamingResponse(
            events(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def not_found(self, request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        return _error(status, "not_found" if status == 404 else "http", f"{request.url.path}")

    async def no_icon(self, request: Request) -> Response:
        return Response(status_code=204)


def create_app(store: AsyncStore, config: ViewConfig, live: LiveHub) -> ASGIApp:
    """The view's ASGI app: its routes over :class:`_Handlers`, the API's errors as JSON,
    behind the host guard."""
    h = _Handlers(store, config, live)
    routes = [
        Route("/", h.index),
        Route("/favicon.ico", h.no_icon),
        Route("/api/config", _json_errors(h.api_config)),
        Route("/api/graphs", _json_errors(h.api_graphs)),
        Route("/api/state", _json_errors(h.api_state)),
        Route("/api/window", _json_errors(h.api_window)),
        Route("/api/node", _json_errors(h.api_node)),
        Route("/api/payload", _json_errors(h.api_payload)),
        Route("/api/live", _json_errors(h.api_live)),
        Mount("/static", StaticFiles(packages=[("cwstore.view", "static")]), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: h.not_found})
    return _Guard(app, config)
