"""``cwstore view`` under hostile use, over plain HTTP (no browser): a foreign Host
header, live streams that clients open by the dozen and leave, a node with large
versions, out-of-range times, a database that goes away.

Backends are counted in ``pg_stat_activity`` of the test's own database.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode, urlsplit

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from support.view import view_server

import cwstore

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

STREAMS = 20


@pytest.fixture(scope="module")
def dsn(db_dsn: str) -> str:
    """Graph ``g`` (3 nodes) and ``big`` (key ``file:big``, 12 versions of 100 kB)."""
    with cwstore.connect_sync(db_dsn) as store:
        nodes = store.append(
            "g", [{"kind": "goal", "parents": [], "payload": f"n{i}"} for i in range(3)]
        )
        assert len(nodes) == 3
        last = store.append("big", [{"kind": "goal", "parents": [], "payload": "start"}])[0]
        for i in range(12):
            last = store.append(
                "big",
                [
                    {
                        "kind": "resource",
                        "parents": [last.id],
                        "payload": {"v": i, "text": "x" * 100_000},
                        "resourceKey": "file:big",
                    }
                ],
            )[0]
    return db_dsn


@pytest.fixture(scope="module")
def server(dsn: str) -> Iterator[str]:
    with view_server(dsn) as url:
        yield url


def _get(url: str, path: str, host: str | None = None) -> tuple[int, Any, int]:
    """(status, parsed JSON body, body bytes) of GET ``path``, with a Host header."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)
    try:
        conn.request("GET", "/" + path, headers={"Host": host or parts.netloc})
        r = conn.getresponse()
        body = r.read()
        return r.status, json.loads(body), len(body)
    finally:
        conn.close()


def _backends(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _listeners(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM cwstore.listeners l JOIN pg_stat_activity a ON a.pid = l.pid"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _open_stream(url: str, graph: str) -> socket.socket:
    """A client of ``/api/live`` that has read the stream's first event."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname or "", parts.port or 80), timeout=30)
    query = urlencode({"graph": graph, "after": 0})
    sock.sendall(f"GET /api/live?{query} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode("ascii"))
    seen = b""
    while b"event: node" not in seen:
        chunk = sock.recv(65536)
        assert chunk, seen
        seen += chunk
    assert seen.startswith(b"HTTP/1.1 200"), seen[:200]
    return sock


def _until(cond: Any, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.2)


# ------------------------------------------------------------------ Host header


def test_a_foreign_host_is_refused(server: str) -> None:
    port = urlsplit(server).port
    for host in (
        f"attacker.example:{port}",
        "attacker.example",
        f"localhost.attacker.example:{port}",
    ):
        status, body, _ = _get(server, "api/graphs", host=host)
        assert status == 403, host
        assert body["error"]["type"] == "forbidden_host"
        assert "graphs" not in body
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        status, body, _ = _get(server, "api/graphs", host=host)
        assert status == 200, host
        assert [g["name"] for g in body["graphs"]] == ["big", "g"]


def test_a_host_the_user_names_is_served(dsn: str) -> None:
    with view_server(dsn, "--allow-host", "view.lan") as url:
        port = urlsplit(url).port
        assert _get(url, "api/graphs", host=f"view.lan:{port}")[0] == 200
        assert _get(url, "api/graphs", host=f"other.lan:{port}")[0] == 403


# ------------------------------------------------------------------ live streams


def test_live_streams_share_connections_and_give_them_back(dsn: str) -> None:
    # Backends of others (the module's server) are not this view's.
    others = _backends(dsn)
    with view_server(dsn) as url:
        assert _get(url, "api/state?graph=g")[0] == 200
        socks = [_open_stream(url, "g") for _ in range(STREAMS)]
        try:
            during = _backends(dsn) - others
            # The store's pool (8) and one listening connection, however many pages
            # follow.
            assert during <= 9, f"{during} backends for {STREAMS} live streams"
            assert _listeners(dsn) <= 1
            with cwstore.connect_sync(dsn) as store:
                store.append("g", [{"kind": "goal", "parents": [], "payload": "live"}])
            for s in socks[:3]:
                seen = b""
                while b'"seq": 4' not in seen:
                    chunk = s.recv(65536)
                    assert chunk
                    seen += chunk
        finally:
            for s in socks:
                s.close()
        # The clients left: their streams end, the listening connection closes.
        _until(lambda: _listeners(dsn) == 0)
        assert _listeners(dsn) == 0
        _until(lambda: _backends(dsn) - others <= 8)
        assert _backends(dsn) - others <= 8


def test_too_many_live_streams_are_refused(dsn: str) -> None:
    with view_server(dsn, "--max-live", "2") as url:
        socks = [_open_stream(url, "g") for _ in range(2)]
        try:
            status, body, _ = _get(url, "api/live?graph=g")
            assert status == 503 and body["error"]["type"] == "busy"
        finally:
            for s in socks:
                s.close()


# ------------------------------------------------------------------ payload sizes


def test_node_history_sends_previews_and_one_payload_on_demand(server: str, dsn: str) -> None:
    with cwstore.connect_sync(dsn) as store:
        versions = store.history("big", "file:big")
    assert len(versions) == 12
    last = versions[-1]
    status, body, size = _get(server, "api/node?" + urlencode({"graph": "big", "id": last.id}))
    assert status == 200
    assert body["history"]["versions"] == 12 and len(body["history"]["rows"]) == 12
    # the node's own payload (100 kB) and a preview of each version, not 12 payloads
    assert size < 150_000, size
    for row in body["history"]["rows"]:
        assert "payload" not in row and len(row["preview"]) <= 200
        assert row["bytes"] > 100_000
    status, one, _ = _get(
        server, "api/payload?" + urlencode({"graph": "big", "id": versions[0].id})
    )
    assert status == 200
    assert json.loads(one["payload_text"]) == versions[0].payload


# ------------------------------------------------------------------ bad times, outages


def test_out_of_range_times_are_bad_requests(server: str) -> None:
    for t in ("0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"):
        status, body, _ = _get(server, "api/state?" + urlencode({"graph": "g", "time": t}))
        assert status == 400, body
        assert body["error"]["type"] == "bad_request"
        assert "datetime" not in body["error"]["message"]


class _Proxy:
    """A TCP forwarder to PostgreSQL that can be cut, as a database outage looks to the
    view (connections reset, new ones refused)."""

    def __init__(self, host: str, port: int) -> None:
        # A host that is a folder is the server's Unix socket (the embedded server's).
        self.target: tuple[str, int] | str = (
            f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
        )
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.socks: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if isinstance(self.target, str):
                upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                upstream.connect(self.target)
            else:
                upstream = socket.create_connection(self.target)
            self.socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        # shutdown first: a close alone leaves the accept() blocked in the other thread
        # listening (Linux), so a pool's next connection would still get through.
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
        for s in self.socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def test_a_database_outage_is_503_on_every_route(dsn: str) -> None:
    params = conninfo_to_dict(dsn)
    proxy = _Proxy(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
    proxied = (
        f"postgresql://{params.get('user') or 'postgres'}@127.0.0.1:{proxy.port}/{params['dbname']}"
    )
    with view_server(proxied) as url:
        assert _get(url, "api/state?graph=g")[0] == 200
        proxy.cut()
        for path in ("api/state?graph=g", "api/graphs", "api/window?graph=g"):
            status, body, _ = _get(url, path)
            assert status == 503, (path, body)
            assert set(body["error"]) == {"type", "message"}


# ------------------------------------------------------------------ bounded reads


@contextlib.contextmanager
def _graphs_locked(dsn: str) -> Iterator[None]:
    """Every read of a graph waits while this holds ``cwstore.graphs`` exclusively."""
    with psycopg.connect(dsn) as conn:
        conn.execute("LOCK TABLE cwstore.graphs IN ACCESS EXCLUSIVE MODE")
        try:
            yield
        finally:
            conn.rollback()


def _waiting_view_reads(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'cwstore view' AND state = 'active'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_read_whose_client_left_is_cancelled(server: str, dsn: str) -> None:
    parts = urlsplit(server)
    with _graphs_locked(dsn):
        sock = socket.create_connection((parts.hostname or "", parts.port or 80), timeout=30)
        sock.sendall(f"GET /api/window?graph=g HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode())
        _until(lambda: _waiting_view_reads(dsn) == 1, 10)
        assert _waiting_view_reads(dsn) == 1  # the read waits for the lock
        sock.close()
        # the client left: its read stops waiting while the lock is still held
        _until(lambda: _waiting_view_reads(dsn) == 0, 10)
        assert _waiting_view_reads(dsn) == 0


def test_a_read_past_the_statement_timeout_is_503(dsn: str) -> None:
    with view_server(dsn, "--statement-timeout", "1") as url, _graphs_locked(dsn):
        started = time.monotonic()
        status, body, _ = _get(url, "api/window?graph=g")
        assert status == 503 and body["error"]["type"] == "timeout", body
        assert time.monotonic() - started < 10


def test_a_key_value_dsn_is_served(dsn: str) -> None:
    """libpq's key=value form (``host=... dbname=...``), not only a URL: its settings are
    added to it without losing its database (urlunsplit dropped the // of a host-less
    URL)."""
    params = conninfo_to_dict(dsn)
    text = " ".join(f"{k}={v}" for k, v in params.items() if v is not None)
    with view_server(text) as url:
        assert _get(url, "api/graphs")[0] == 200
