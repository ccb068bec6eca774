"""A backend's peak memory for one node of a ~4 MiB payload, by door and payload shape.

For each shape (``--shapes``; all by default) it writes one node whose payload is just
under ``MAX_PAYLOAD_BYTES`` through three doors, each in a fresh backend:

- ``append``: ``cwstore.append_v1`` called directly with the batch as JSON text;
- ``copy``: ``Store.import_state`` as the owner (COPY into ``cwstore.nodes``; payloads
  are checked in Python);
- ``rows``: ``Store.import_state`` as a ``cwstore_writer`` login (``import_rows_v1``,
  whose payloads are checked by the same SQL as ``append_v1``'s).

Before the call, the backend does the same on a tiny payload (so plans and catalog
caches are loaded); the number given is how much the backend's peak resident set size
(``VmHWM`` of ``/proc/<pid>/status``) grew during the big call, less the shared memory it
touched meanwhile (``RssShmem``: shared buffers, WAL buffers), in bytes and as a multiple
of the payload. The server must run on this machine. It creates a scratch database on
the server of ``--dsn`` (the role needs CREATEDB and CREATEROLE) and drops it at the end.

    python benchmarks/append_memory.py --dsn postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from _results import RESULTS, command_line, run_header, write_section
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

try:
    import cwstore
except ImportError:  # run from a checkout without installing
    sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
    import cwstore

from cwstore import _jsontext, compute_id, roles
from cwstore.document import MAX_PAYLOAD_BYTES
from cwstore.drivers.psycopg import PsycopgConnection
from cwstore.migrate import apply_migrations_sync

T0 = "2025-01-01T00:00:00.000Z"


def _fill(unit: Callable[[int], Any], wrap: Callable[[list[Any]], Any]) -> Any:
    """``wrap`` of as many ``unit(i)`` as fit under MAX_PAYLOAD_BYTES."""
    one = len(_jsontext.dumps(unit(10**6)).encode()) + 1  # a member "k":1 as ["k",1] is 1 more
    n = (MAX_PAYLOAD_BYTES - 64) // one
    return wrap([unit(10**6 + i) for i in range(n)])


def _deep(depth: int) -> Any:
    """Objects nested ``depth`` deep, a long string at the bottom, under the limit."""
    inner: Any = "x" * (MAX_PAYLOAD_BYTES - 8 * depth - 64)
    for _ in range(depth):
        inner = {"a": inner}
    return inner


def _deep_many() -> Any:
    """Many objects each nested 60 deep."""
    one: Any = 1
    for _ in range(60):
        one = {"a": one}
    return _fill(lambda i: one, list)


SHAPES: dict[str, Callable[[], Any]] = {
    "tiny_objects": lambda: _fill(lambda i: {"a": 1}, list),
    "wide_object": lambda: dict(_fill(lambda i: (f"k{i}", 1), lambda xs: xs)),
    "deep_chain": lambda: _deep(9_000),
    "deep_many": _deep_many,
    "long_strings": lambda: _fill(lambda i: "y" * 40_000 + str(i), list),
    "one_string": lambda: {"s": "z" * (MAX_PAYLOAD_BYTES - 16)},
    "many_arrays": lambda: _fill(lambda i: [], list),
    "number_arrays": lambda: _fill(lambda i: [i, [i]], list),
}


def _node(payload: Any) -> dict[str, Any]:
    return {
        "id": compute_id("tool_result", [], payload),
        "kind": "tool_result",
        "parents": [],
        "payload": payload,
        "createdAt": T0,
    }


def _status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS", "RssShmem"):
            out[key] = int(value.split()[0]) * 1024
    return out


def _growth(before: dict[str, int], after: dict[str, int]) -> int:
    """Peak private memory growth: VmHWM's growth less the shared pages touched."""
    return (after["VmHWM"] - before["VmHWM"]) - (after["RssShmem"] - before["RssShmem"])


def measure_append(dsn: str, payload_text: str, node: dict[str, Any]) -> tuple[int, float]:
    small = _node({"a": 1})
    with psycopg.connect(dsn, autocommit=True) as c:
        pid = c.info.backend_pid
        batch = _jsontext.dumps([small])
        c.execute("SELECT count(*) FROM cwstore.append_v1(%s, %s::json)", (_name(), batch))
        before = _status(pid)
        big = '[{"id":' + _jsontext.dumps(node["id"]) + ',"kind":"tool_result","parents":[],'
        big += '"payload":' + payload_text + ',"createdAt":"' + T0 + '"}]'
        t = time.perf_counter()
        c.execute("SELECT count(*) FROM cwstore.append_v1(%s, %s::json)", (_name(), big))
        took = time.perf_counter() - t
        return _growth(before, _status(pid)), took


def measure_import(dsn: str, node: dict[str, Any]) -> tuple[int, float]:
    tag = f"cwmem_{uuid.uuid4().hex[:8]}"
    params = conninfo_to_dict(dsn)
    params["application_name"] = tag
    store = cwstore.connect_sync(make_conninfo(**params), min_size=1, max_size=1)
    try:
        small = _node({"a": 1})
        store.import_state(
            _name(), {"version": 1, "nodes": [{**small, "sequence": 1}], "frontier": [small["id"]]}
        )
        with psycopg.connect(dsn, autocommit=True) as c:
            row = c.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (tag,)
            ).fetchone()
        assert row is not None
        pid = int(row[0])
        before = _status(pid)
        doc = {"version": 1, "nodes": [{**node, "sequence": 1}], "frontier": [node["id"]]}
        t = time.perf_counter()
        store.import_state(_name(), doc)
        took = time.perf_counter() - t
        return _growth(before, _status(pid)), took
    finally:
        store.close()


def _name() -> str:
    return f"mem-{uuid.uuid4().hex[:12]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True, help="a server on this machine")
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--doors", nargs="*", default=["append", "copy", "rows"])
    parser.add_argument("--database", default="cwstore_append_memory")
    parser.add_argument(
        "--write-results", action="store_true", help="write its section of benchmarks/RESULTS.md"
    )
    args = parser.parse_args(argv)
    rows: list[str] = []
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(args.database))
        )
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(args.database)))
    params = conninfo_to_dict(args.dsn)
    params["dbname"] = args.database
    dsn = make_conninfo(**params)
    writer = f"cwmem_{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            apply_migrations_sync(PsycopgConnection(conn))
            roles.install_roles_sync(PsycopgConnection(conn))
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN IN ROLE cwstore_writer").format(
                    sql.Identifier(writer)
                )
            )
            roles.add_tenant_member_sync(PsycopgConnection(conn), "bench", writer)
        writer_dsn = make_conninfo(**{**params, "user": writer})
        print(f"{'shape':<14} {'payload':>10} " + " ".join(f"{d:>22}" for d in args.doors))
        for shape in args.shapes:
            payload = SHAPES[shape]()
            text = _jsontext.dumps(payload)
            size = len(text.encode())
            node = _node(payload)
            cells = []
            for door in args.doors:
                if door == "append":
                    grew, took = measure_append(dsn, text, node)
                elif door == "copy":
                    grew, took = measure_import(dsn, node)
                else:
                    grew, took = measure_import(writer_dsn, node)
                cells.append(f"{grew / 2**20:7.1f} MB {grew / size:5.1f}x {took:5.2f}s")
            print(f"{shape:<14} {size:>10,} " + " ".join(f"{c:>22}" for c in cells), flush=True)
            rows.append(f"| {shape} | {size:,} | " + " | ".join(" ".join(c.split()) for c in cells))
        if args.write_results:
            with psycopg.connect(args.dsn) as conn:
                row = conn.execute("SHOW server_version").fetchone()
            facts = {"PostgreSQL": str(row[0]) if row else "?", "cwstore": cwstore.__version__}
            header = run_header("Append memory", command_line(sys.argv), facts)
            table = [
                "One node of ~4 MiB per door and shape, each in a fresh backend: the "
                "backend's peak private memory growth (VmHWM less RssShmem), "
                "as a multiple of the payload, and the call's time.",
                "",
                "| shape | payload bytes | " + " | ".join(args.doors) + " |",
                "| --- | --- | " + " | ".join("---" for _ in args.doors) + " |",
                *(r + " |" for r in rows),
            ]
            write_section("append-memory", header + "\n" + "\n".join(table) + "\n")
            print(f"wrote section 'append-memory' of {RESULTS}")
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(args.database)
                )
            )
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(writer)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
