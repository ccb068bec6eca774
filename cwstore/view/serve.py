"""Run ``cwstore view``: open the store, bind the address, serve with uvicorn."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import webbrowser
from urllib.parse import quote

import asyncpg
import uvicorn

from .. import DatabaseError, InputError, connect
from .app import MAX_WINDOW, ViewConfig, create_app

__all__ = ["serve"]


def serve(
    dsn: str,
    *,
    graph: str | None,
    host: str,
    port: int,
    open_browser: bool,
    window: int,
) -> int:
    """Serve the page on ``host:port`` until interrupted (Ctrl-C, SIGTERM); returns 0.

    Prints the page's address on stdout first (one line, ``cwstore view: <url> ...``).
    Raises :class:`InputError` when the address cannot be bound or the window is out of
    range, :class:`UnknownGraphError` when ``graph`` is not there (or not the role's).
    """
    if not 10 <= window <= MAX_WINDOW:
        raise InputError(f"--window {window}: give 10 to {MAX_WINDOW} nodes")
    return asyncio.run(_serve(dsn, graph, host, port, open_browser, window))


def _bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise InputError(f"--host {host}: not an address this machine has ({exc})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        hint = " (in use: pick another with --port, or --port 0)" if port else ""
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _has_browser() -> bool:
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        return False
    try:
        webbrowser.get()
    except webbrowser.Error:
        return False
    return True


async def _serve(
    dsn: str, graph: str | None, host: str, port: int, open_browser: bool, window: int
) -> int:
    store = await connect(dsn, min_size=1, max_size=4, migrate_schema=False)
    pool: asyncpg.Pool | None = None
    try:
        try:
            pool = await asyncpg.create_pool(
                store.dsn,
                min_size=1,
                max_size=4,
                server_settings={
                    "default_transaction_read_only": "on",
                    "application_name": "cwstore view",
                },
            )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise DatabaseError(f"{type(exc).__name__}: {exc}") from exc
        if graph is not None:
            await store.length(graph)
        sock = _bind(host, port)
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{bound}/" + (f"#/g/{quote(graph, safe='')}" if graph else "")
        app = create_app(store, pool, ViewConfig(first_graph=graph, window=window))
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                log_level="warning",
                lifespan="off",
                timeout_graceful_shutdown=1,
                access_log=False,
            )
        )
        print(f"cwstore view: {url}  (read-only; Ctrl-C stops it)", flush=True)
        if open_browser and _has_browser():
            threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
        try:
            await server.serve(sockets=[sock])
        finally:
            sock.close()
    finally:
        if pool is not None:
            await pool.close()
        await store.close()
    return 0
