"""The ``cwstore`` subcommands that talk to PostgreSQL.

Each is a thin client of :class:`cwstore.Store`: it parses flags, calls one method and
prints. stdout is data (JSON where it is data), stderr is progress and errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .. import _jsontext
from ..document import parse_document
from ..errors import InputError
from ..results import ErasedItem
from ._common import add_dsn, add_vocab_flags, as_of, cli_dsn, open_store, read_input, vocabulary

__all__ = ["register"]


def cmd_init(args: argparse.Namespace) -> int:
    from .. import migrate, roles
    from .._arg_checks import check_pooler
    from ..drivers.psycopg import open_connection

    members = _tenant_members(args.tenant)
    dsn = cli_dsn(args.dsn)
    with open_connection(dsn, pooled=check_pooler(args.pooler)) as conn:
        if args.dry_run:
            st = migrate.status_sync(conn)
            print(
                json.dumps(
                    {"current": st.current_version, "pending": [m.filename for m in st.pending]}
                )
            )
            return 0
        done = migrate.setup_sync(conn, citus=args.citus, roles=args.roles)
        print(
            f"schema up to date (applied {len(done.applied)} "
            f"migration{'s' if len(done.applied) != 1 else ''})",
            file=sys.stderr,
        )
        if done.on_citus:
            print(
                "tables distributed by graph on Citus"
                if args.citus
                else "distributed on Citus: its settings (sql/citus.sql) re-applied",
                file=sys.stderr,
            )
        elif done.citus_available:
            print(
                "note: this database has the citus extension; `cwstore init --citus` "
                "distributes the tables by graph",
                file=sys.stderr,
            )
        if done.roles:
            print(f"roles {roles.READER}, {roles.WRITER} and {roles.ADMIN} ready", file=sys.stderr)
        for tenant, role in members:
            roles.add_tenant_member_sync(conn, tenant, role)
            print(f"role {role} belongs to tenant {tenant!r}", file=sys.stderr)
    return 0


def _tenant_members(specs: list[str]) -> list[tuple[str, str]]:
    members = []
    for spec in specs:
        tenant, sep, role = spec.rpartition("=")
        if not sep or not tenant or not role:
            raise InputError(f"--tenant {spec!r}: expected TENANT=ROLE, e.g. acme=alice")
        members.append((tenant, role))
    return members


def cmd_import(args: argparse.Namespace) -> int:
    doc = parse_document(read_input(args.file))
    with open_store(args, migrate=True) as store:
        n = store.import_state(args.graph, doc, vocabulary=vocabulary(args))
    print(f"imported {n} nodes into graph {args.graph!r}", file=sys.stderr)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        text = store.export_json(args.graph, as_of=as_of(args))
    if args.indent:
        text = _jsontext.pretty(_jsontext.loads_stored(text), args.indent)
    sys.stdout.write(text + "\n")
    return 0


def cmd_graphs(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        graphs = store.graphs()
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "name": g.name,
                        "length": g.length,
                        "vocabulary": list(g.vocabulary) if g.vocabulary else None,
                        "tenant": g.tenant,
                    }
                    for g in graphs
                ]
            )
        )
        return 0
    if not graphs:
        print("no graphs yet", file=sys.stderr)
    for g in graphs:
        print(f"{g.name}\t{g.length}")
    return 0


def cmd_append(args: argparse.Namespace) -> int:
    value = parse_document(read_input(args.file))
    frontier = None
    if isinstance(value, dict) and "nodes" in value:
        frontier = value.get("frontier")
        value = value["nodes"]
    if not isinstance(value, list):
        raise InputError('expected a JSON list of nodes (or {"nodes": [...], "frontier": [...]})')
    with open_store(args, migrate=True) as store:
        stored = store.append(
            args.graph, value, expected_length=args.expected_length, frontier=frontier
        )
    for n in stored:
        sys.stdout.write(n.to_json() + "\n")
    return 0


def cmd_tail(args: argparse.Namespace) -> int:
    """Print nodes as JSON lines until interrupted. With ``--all``, an erasure is a line
    ``{"cursor", "erased": true, "graph_id"}``; a tail of one graph whose graph is erased
    ends with a message on stderr (exit 1, :class:`GraphErasedError`)."""
    with open_store(args) as store:
        if args.all:
            for item in store.tail_all(args.cursor):
                if isinstance(item, ErasedItem):
                    line = json.dumps(
                        {"cursor": str(item.cursor), "erased": True, "graph_id": item.graph_id}
                    )
                else:
                    line = (
                        json.dumps(
                            {"cursor": str(item.cursor), "graph": item.graph},
                            ensure_ascii=False,
                        )[:-1]
                        + ',"node":'
                        + item.node.to_json()
                        + "}"
                    )
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
        else:
            if not args.graph:
                raise InputError("tail needs --graph G (or --all)")
            for node in store.tail(args.graph, after=args.after):
                sys.stdout.write(node.to_json() + "\n")
                sys.stdout.flush()
    return 0


def cmd_server(args: argparse.Namespace) -> int:
    from .. import server

    if args.action == "status":
        st = server.server_status()
        print(json.dumps(st, default=str, indent=2))
        if st.get("dsn"):
            print(f"connect with: psql '{st['dsn']}'", file=sys.stderr)
        else:
            print(
                "not running: any cwstore command (or cwstore server start) starts it",
                file=sys.stderr,
            )
        return 0
    if args.action == "start":
        print(server.ensure_server())
        return 0
    stopped = server.stop_server()
    print("stopped" if stopped else "not running", file=sys.stderr)
    return 0


def register(sub: Any) -> None:
    """Add the database subcommands to the ``cwstore`` parser."""
    p = sub.add_parser("init", help="create or upgrade the schema (idempotent)")
    add_dsn(p)
    p.add_argument("--dry-run", action="store_true", help="only show pending migrations")
    p.add_argument(
        "--roles",
        action="store_true",
        help="also create the roles cwstore_reader, cwstore_writer and cwstore_admin and "
        "grant them (needs CREATEROLE)",
    )
    p.add_argument(
        "--citus",
        action="store_true",
        help="on a Citus coordinator: distribute the tables by graph (docs/scaling.md)",
    )
    p.add_argument(
        "--tenant",
        action="append",
        default=[],
        metavar="TENANT=ROLE",
        help="let ROLE (and its members) read and write TENANT's graphs; repeatable",
    )
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("import", help="import an AgentState document into an empty graph")
    p.add_argument("file", help="path to the JSON document, or - for stdin")
    p.add_argument("--graph", required=True, help="graph name")
    add_dsn(p)
    add_vocab_flags(p)
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("export", help="print a graph (or a prefix) as AgentState v1 JSON")
    p.add_argument("--graph", required=True)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--as-of", type=int, metavar="SEQ", help="the first SEQ nodes")
    g.add_argument(
        "--as-of-time", metavar="RFC3339", help="up to the last node whose createdAt <= this time"
    )
    p.add_argument("--indent", type=int, default=0, help="pretty-print with this indent")
    add_dsn(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("graphs", help="list graphs with their lengths")
    p.add_argument("--json", action="store_true")
    add_dsn(p)
    p.set_defaults(func=cmd_graphs)

    p = sub.add_parser("append", help="append a JSON list of nodes to a graph")
    p.add_argument("file", help="JSON list of nodes (or {nodes, frontier}); - for stdin")
    p.add_argument("--graph", required=True)
    p.add_argument(
        "--expected-length",
        type=int,
        default=None,
        help="refuse (conflict) unless the graph has exactly this many nodes",
    )
    add_dsn(p)
    p.set_defaults(func=cmd_append)

    p = sub.add_parser("tail", help="print a graph's nodes as JSON lines, then follow live")
    p.add_argument("--graph")
    p.add_argument("--after", type=int, default=0, help="start after this sequence")
    p.add_argument("--all", action="store_true", help="follow every graph (with --cursor)")
    p.add_argument("--cursor", default=None, help="resume the --all feed after this cursor")
    add_dsn(p)
    p.set_defaults(func=cmd_tail)

    p = sub.add_parser("server", help="the embedded PostgreSQL in CWSTORE_HOME")
    p.add_argument("action", choices=["status", "start", "stop"])
    p.set_defaults(func=cmd_server)
