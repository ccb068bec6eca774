"""Run ``cwstore view``: open the store, bind the address, serve with uvicorn."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import webbrowser
from collections.abc import Sequence
from dataclasses import replace
from urllib.parse import quote

import uvicorn

from .. import InputError, connect
from .app import MAX_WINDOW, ViewConfig, create_app
from .live import LiveHub

__all__ = ["serve"]


def serve(
    dsn: str,
    *,
    graph: str | None,
    host: str,
    port: int,
    open_browser: bool,
    window: int,
    allow_hosts: Sequence[str] = (),
    max_live: int = 100,
    statement_timeout: int = 30,
    pooler: str | None = None,
    listen_dsn: str | None = None,
) -> int:
    """Serve the page on ``host:port`` until interrupted (Ctrl-C, SIGTERM); returns 0.

    Prints the page's address on stdout first (one line, ``cwstore view: <url> ...``).
    Serves requests whose Host header is an IP address, ``localhost``, ``host`` or one
    of ``allow_hosts`` (403 otherwise); follows at most ``max_live`` live streams; every
    read runs under a ``statement_timeout`` of that many seconds. ``pooler`` and
    ``listen_dsn`` are :func:`cwstore.connect`'s (``"transaction"`` behind a
    transaction-mode pooler: the live streams poll, or listen on ``listen_dsn``).

    Raises :class:`InputError` when the address cannot be bound or the window is out of
    range, :class:`UnknownGraphError` when ``graph`` is not there (or not the role's).
    """
    if not 10 <= window <= MAX_WINDOW:
        raise InputError(f"--window {window}: give 10 to {MAX_WINDOW} nodes")
    names = frozenset(h.lower().strip("[]").removesuffix(".") for h in (host, *allow_hosts))
    config = ViewConfig(first_graph=graph, window=window, hosts=names)
    return asyncio.run(
        _serve(
            dsn,
            host,
            port,
            open_browser,
            config,
            max_live,
            statement_timeout,
            pooler=pooler,
            listen_dsn=listen_dsn,
        )
    )


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


APPLICATION_NAME = "cwstore view"
"""The view's connections' ``application_name`` (what ``pg_stat_activity`` shows)."""


def _named(dsn: str) -> str:
    """``dsn`` with the view's ``application_name`` added: a URL's query parameter, or
    one more ``key=value`` of libpq's other form (both drivers read either)."""
    if "://" not in dsn:
        return f"{dsn} application_name='{APPLICATION_NAME}'"
    # (Not through urlunsplit: it drops the "//" of a URL with no host,
    # postgresql:///db?host=/run/postgresql.)
    base, _, query = dsn.partition("?")
    extra = "application_name=" + quote(APPLICATION_NAME)
    return f"{base}?{query}&{extra}" if query else f"{base}?{extra}"


async def _serve(
    dsn: str,
    host: str,
    port: int,
    open_browser: bool,
    config: ViewConfig,
    max_live: int,
    statement_timeout: int,
    *,
    pooler: str | None,
    listen_dsn: str | None,
) -> int:
    graph = config.first_graph
    # Every read of the view is bounded in time; a request whose client left is
    # cancelled sooner (app._Guard). One store: its pool serves the store's reads, the
    # view's own queries and the live streams, its follower wakes them.
    store = await connect(
        _named(dsn),
        min_size=1,
        max_size=8,
        migrate_schema=False,
        statement_timeout=statement_timeout,
        pooler=pooler,
        listen_dsn=listen_dsn,
    )
    live: LiveHub | None = None
    try:
        if graph is not None:
            await store.length(graph)
        sock = _bind(host, port)
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{bound}/" + (f"#/g/{quote(graph, safe='')}" if graph else "")
        live = LiveHub(store, max_live)
        app = create_app(store, replace(config, port=bound), live)
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
        if live is not None:
            await live.close()
        await store.close()
    return 0
