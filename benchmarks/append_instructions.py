"""Instructions the server executes per append, counted by callgrind (issue 37).

Server CPU time per call, as ``write_door_floor.py`` and row 8 measure it, moves by
tens of percent from one run to the next on a shared machine: a change that saves a
twentieth of an append cannot be seen in it. The number of instructions the backend
executes can: valgrind's callgrind counts them, and for the same binary, the same data
and the same statements the count repeats to a fraction of a percent. This measures
that count, for the baseline beside cwstore's write door.

It makes a scratch cluster with the PostgreSQL binaries of ``--pg-bin`` (``pg_config
--bindir`` by default), installs cwstore's schema (the tree this script runs from), and
creates one procedure per workload that appends in a loop and commits after each call,
so each append is a transaction of its own as a client's is. Each workload then runs in
a single-user backend (``postgres --single``) under callgrind, twice on a fresh copy of
the cluster: ``--first`` appends, then ``--first + --calls``. The difference over
``--calls`` is the instructions of one append, without the backend's start, the
procedure's compilation and its first plans. What this leaves out: the client protocol
(parse, bind, the rows sent back) and the kernel's share (the commit's WAL write and
flush), which the baseline's time holds more of than cwstore's; so the ratio of
instructions is larger than the ratio of server CPU time. Use it for before and after,
one tree against another on one machine.

The workloads:

- **baseline**: row 8's statement, a stream's counter row ``UPDATE`` feeding the
  ``INSERT`` of its event.
- **single node**: ``append_v1`` of one node, the child of the one before (row 8's).
- **keyed node**: ``append_v1`` of one resource node, the next version of one key
  (every node a LangGraph saver writes is keyed).
- **batch of 10**: ``append_v1`` of ten nodes, a chain (per node).
- **checkpoint**: ``append_v1`` of one keyed node with a LangGraph checkpoint's payload
  (``CHECKPOINT``), the next version of its key, declaring it the frontier.
- **LangGraph put** (per put, two nodes): what cwstore's LangGraph saver appends for a
  step that adds a message: the message (row 8's payload), the next version of the
  message chain's key, then the checkpoint (``CHECKPOINT``), the first version of a key
  of its own, its parents the message and the checkpoint before, declared the frontier.

Run as root, PostgreSQL runs as ``--os-user`` (``postgres`` by default). The cluster is
deleted at the end.

    python benchmarks/append_instructions.py
    python benchmarks/append_instructions.py --write-results
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
from _results import command_line, run_header, versions, write_section

from cwstore.drivers.psycopg import PsycopgConnection
from cwstore.migrate import apply_migrations_sync

PAYLOAD = (
    '{"writer":1,"n":5,"text":"'
    + "Reading the module to find where the handler parses its configuration. " * 3
    + '"}'
)
"""Row 8's payload (``_peers.payload``), as JSON.stringify writes it."""

CHECKPOINT = (
    '{"checkpoint_id":"1f1f1e8e-36c1-6b1c-800c-5e234ca07d28",'
    '"parent_checkpoint_id":"1f1f1e8e-368b-6524-800b-a079181799bb",'
    '"ts":"2026-12-07T02:49:57.541532+00:00",'
    '"metadata":{"json":{"source":"loop","step":12,"parents":{}}},'
    '"checkpoint":{"json":{"v":4,"channel_versions":{"__start__":12,"messages":14,'
    '"branch:to:agent":14,"branch:to:tools":14},"versions_seen":{"__input__":{},'
    '"__start__":{"__start__":11},"agent":{"branch:to:agent":12},'
    '"tools":{"branch:to:tools":13}},"updated_channels":["branch:to:agent","messages"]}},'
    '"values":{},"inline":{"branch:to:agent":{"version":14,"json":null}},'
    '"messages":{"messages":[["lg:msg:messages",1,11]]}}'
)
"""A checkpoint node's payload as cwstore's LangGraph saver writes it (one of the
agent workload's in benchmarks/langgraph_saver.py): 634 bytes, 39 strings."""

PROCEDURES = r"""
CREATE TABLE counter (stream text PRIMARY KEY, length bigint NOT NULL);
CREATE TABLE items (stream text, seq bigint, id text, payload text, PRIMARY KEY (stream, seq));

CREATE PROCEDURE bench_baseline(p_calls integer) LANGUAGE plpgsql AS $$
DECLARE
  v_payload text := (SELECT payload FROM bench_payload WHERE name = 'row 8');
  v_seq bigint;
BEGIN
  INSERT INTO counter VALUES ('bench', 0);
  COMMIT;
  FOR i IN 1 .. p_calls LOOP
    WITH c AS (UPDATE counter SET length = length + 1 WHERE stream = 'bench' RETURNING length)
    INSERT INTO items SELECT 'bench', c.length, 'ev' || i, v_payload FROM c
    RETURNING seq INTO v_seq;
    COMMIT;
  END LOOP;
END $$;

CREATE PROCEDURE bench_append(p_calls integer, p_batch integer, p_kind text, p_key text,
                              p_payload text DEFAULT 'row 8', p_declare boolean DEFAULT false)
LANGUAGE plpgsql AS $$
DECLARE
  v_payload json := (SELECT payload FROM bench_payload WHERE name = p_payload)::json;
  v_nodes text[];
  v_n integer := 0;
BEGIN
  FOR i IN 1 .. p_calls LOOP
    v_nodes := '{}';
    FOR j IN 1 .. p_batch LOOP
      v_n := v_n + 1;
      v_nodes := v_nodes || json_build_object(
        'id', 'cw_' || lpad(to_hex(v_n), 24, '0'), 'kind', p_kind,
        'parents', CASE WHEN v_n = 1 THEN '[]'::json
                        ELSE json_build_array('cw_' || lpad(to_hex(v_n - 1), 24, '0')) END,
        'payload', v_payload, 'createdAt', '2026-01-01T00:00:00.000Z',
        'resourceKey', p_key)::text;
    END LOOP;
    PERFORM * FROM cwstore.append_v1(
      'bench', ('[' || array_to_string(v_nodes, ',') || ']')::json, NULL,
      CASE WHEN p_declare THEN json_build_array('cw_' || lpad(to_hex(v_n), 24, '0')) END);
    COMMIT;
  END LOOP;
END $$;

CREATE PROCEDURE bench_put(p_calls integer) LANGUAGE plpgsql AS $$
DECLARE
  v_message json := (SELECT payload FROM bench_payload WHERE name = 'row 8')::json;
  v_checkpoint json := (SELECT payload FROM bench_payload WHERE name = 'checkpoint')::json;
  v_m text;
  v_c text;
BEGIN
  FOR i IN 1 .. p_calls LOOP
    v_m := 'cw_' || lpad(to_hex(2 * i - 1), 24, '0');
    v_c := 'cw_' || lpad(to_hex(2 * i), 24, '0');
    PERFORM * FROM cwstore.append_v1('bench', json_build_array(
      json_build_object('id', v_m, 'kind', 'inference',
        'parents', CASE WHEN i = 1 THEN '[]'::json
                        ELSE json_build_array('cw_' || lpad(to_hex(2 * i - 3), 24, '0')) END,
        'payload', v_message, 'createdAt', '2026-01-01T00:00:00.000Z',
        'resourceKey', 'lg:msg:messages'),
      json_build_object('id', v_c, 'kind', 'verification',
        'parents', CASE WHEN i = 1 THEN json_build_array(v_m)
                        ELSE json_build_array('cw_' || lpad(to_hex(2 * i - 2), 24, '0'), v_m) END,
        'payload', v_checkpoint, 'createdAt', '2026-01-01T00:00:00.000Z',
        'resourceKey', 'lg:cp:' || i)), NULL, json_build_array(v_c));
    COMMIT;
  END LOOP;
END $$;
"""


@dataclass(frozen=True)
class Workload:
    """One way of appending: the procedure call for ``calls`` appends, and how many
    nodes (or events) each append writes."""

    name: str
    call: str
    nodes: int

    def statement(self, calls: int) -> str:
        return self.call.format(calls=calls)


WORKLOADS = (
    Workload("baseline", "CALL bench_baseline({calls})", 1),
    Workload("single node", "CALL bench_append({calls}, 1, 'inference', NULL)", 1),
    Workload("keyed node", "CALL bench_append({calls}, 1, 'resource', 'src/a.ts')", 1),
    Workload("batch of 10", "CALL bench_append({calls}, 10, 'inference', NULL)", 10),
    Workload(
        "checkpoint", "CALL bench_append({calls}, 1, 'verification', 'cp', 'checkpoint', true)", 1
    ),
    Workload("LangGraph put", "CALL bench_put({calls})", 2),
)

COLLECTED = re.compile(r"Collected : (\d+)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """A scratch PostgreSQL cluster in ``root``, run as ``user`` (None: this user)."""

    def __init__(self, bindir: Path, root: Path, user: str | None) -> None:
        self.bindir, self.root, self.user = bindir, root, user
        self.data = root / "data"

    def run(self, argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        if self.user is not None:
            argv = ["runuser", "-u", self.user, "--", *argv]
        return subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)

    def checked(self, argv: list[str]) -> None:
        done = self.run(argv)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed:\n{done.stdout}{done.stderr}")

    def make(self) -> None:
        if self.user is not None:
            shutil.chown(self.root, self.user)
        self.checked(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ]
        )

    @contextmanager
    def started(self) -> Iterator[str]:
        """The cluster running on a free port; yields its DSN."""
        port = _free_port()
        options = f"-p {port} -k {self.root} -c listen_addresses=127.0.0.1"
        self.checked(
            [
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.data),
                "-o",
                options,
                "-l",
                str(self.root / "server.log"),
                "-w",
                "start",
            ]
        )
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            self.checked([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-w", "stop"])

    def instructions(self, statement: str) -> int:
        """Instructions of a single-user backend on a fresh copy of the cluster that
        runs ``statement`` (commits off the disk's clock: synchronous_commit off)."""
        copy = self.root / "copy"
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(self.data, copy, symlinks=True)
        if self.user is not None:
            subprocess.run(["chown", "-R", self.user, str(copy)], check=True)
        done = self.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                str(self.bindir / "postgres"),
                "--single",
                "-D",
                str(copy),
                "postgres",
            ],
            stdin=f"SET synchronous_commit = off;\n{statement};\n",
        )
        found = COLLECTED.search(done.stderr)
        if done.returncode != 0 or found is None or "ERROR:" in done.stdout + done.stderr:
            raise SystemExit(f"{statement} under callgrind failed:\n{done.stdout}{done.stderr}")
        return int(found.group(1))


def _install(dsn: str) -> str:
    """cwstore's schema and the workloads' procedures; returns the server's version."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        apply_migrations_sync(PsycopgConnection(conn))
        conn.execute("CREATE TABLE bench_payload (name text, payload text)")
        conn.execute(
            "INSERT INTO bench_payload VALUES ('row 8', %s), ('checkpoint', %s)",
            (PAYLOAD, CHECKPOINT),
        )
        conn.execute(PROCEDURES)
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "unknown"


def _verify(cluster: Cluster, calls: int) -> None:
    """Each workload appended every node it was given (a door that refused them all
    would cost less and measure nothing): its count checked in a backend of its own."""
    for w in WORKLOADS:
        check = (
            "SELECT count(*) = {n} FROM items"
            if w.name == "baseline"
            else "SELECT length = {n} FROM cwstore.graphs WHERE name = 'bench'"
        ).format(n=calls * w.nodes)
        copy = cluster.root / "copy"
        cluster.instructions(w.statement(calls))  # leaves its copy behind
        done = cluster.run(
            [str(cluster.bindir / "postgres"), "--single", "-D", str(copy), "postgres"],
            stdin=check + ";\n",
        )
        if '= "t"' not in done.stdout:
            raise SystemExit(f"{w.name}: {check} is not true:\n{done.stdout}{done.stderr}")


def measure(cluster: Cluster, first: int, calls: int) -> dict[str, float]:
    """Instructions per append of each workload."""
    out = {}
    for w in WORKLOADS:
        short = cluster.instructions(w.statement(first))
        long = cluster.instructions(w.statement(first + calls))
        out[w.name] = (long - short) / calls
        print(f"{w.name}: {out[w.name]:,.0f} instructions an append", file=sys.stderr)
    return out


def markdown(per_append: dict[str, float], header: str, calls: int) -> str:
    base = per_append["baseline"]
    lines = [
        header,
        "",
        "Instructions the backend executes per append (callgrind; a single-user backend, a",
        f"commit after each append, the difference between two runs over {calls} appends),",
        "for row 8's one-statement baseline and `append_v1`; what each workload is, in the",
        "script's docstring. The count leaves out the client protocol and the kernel's",
        "share, so its ratio to the baseline is larger than server CPU time's: read it as",
        "before and after, one tree against another.",
        "",
        "| workload | instructions per append | per node | ratio to baseline |",
        "| --- | ---: | ---: | ---: |",
    ]
    for w in WORKLOADS:
        n = per_append[w.name]
        lines.append(
            f"| {w.name} | {n / 1e6:.3f} M | {n / w.nodes / 1e6:.3f} M | {n / base:.1f}x |"
        )
    return "\n".join(lines) + "\n"


def _bindir(given: str | None) -> Path:
    if given:
        return Path(given)
    found = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True)
    return Path(found.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg-bin", help="PostgreSQL's bin directory (pg_config --bindir)")
    parser.add_argument("--os-user", default="postgres", help="who runs PostgreSQL, as root")
    parser.add_argument("--first", type=int, default=20)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (it counts the instructions)")
    bindir = _bindir(args.pg_bin)
    user = args.os_user if os.geteuid() == 0 else None
    with tempfile.TemporaryDirectory(prefix="cwinstr-") as tmp:
        cluster = Cluster(bindir, Path(tmp), user)
        cluster.make()
        with cluster.started() as dsn:
            version = _install(dsn)
        _verify(cluster, 3)
        per_append = measure(cluster, args.first, args.calls)
    header = run_header(
        "Instructions per append",
        command_line(sys.argv),
        {"PostgreSQL": f"{version} ({bindir})", "Packages": versions("psycopg")},
    )
    text = markdown(per_append, header, args.calls)
    print(text)
    if args.write_results:
        write_section("append-instructions", text)


if __name__ == "__main__":
    main()
