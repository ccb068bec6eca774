"""The same LangGraph session through LangGraph's PostgreSQL saver and cwstore's.

A chat of ``--steps`` steps (default 1,000): each step stores the new message as a
pending write of the previous checkpoint, then a checkpoint whose ``messages`` channel
holds the whole list so far (as ``add_messages`` hands it over) and a ``step`` counter.
Then ``--reads`` reads of past checkpoints picked at random. Each saver gets its own new
database on the server of ``--dsn`` (an admin DSN), dropped afterwards.

Each saver's session runs in a process of its own (a fresh interpreter: neither
measures with the other's heap), in ``--rounds`` alternating rounds (LangGraph, cwstore,
LangGraph, ...). Between the puts and the reads the database is vacuumed and analyzed,
as autovacuum leaves a database in use.

Reported, side by side, per round and as the median over the rounds: bytes the thread
takes (its tables' total relation size, indexes and TOAST included, after minus
before), put p50 and p95, past-checkpoint read p50 and p95 (by the saver that wrote the
session), the same reads each by a new saver (first_read: what a process reads of a
thread it has not seen; not a target of the issue, reported beside it), and the ratios. The targets
of issue 25: bytes <= 1/10, put p50 <= 1/2, read p50 <= 1/2 of LangGraph's saver.

    python benchmarks/langgraph_saver.py --dsn postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from _workload import _WORDS
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver

import cwstore
from cwstore.langgraph import CwstoreSaver


def _dsn_for(admin: str, db: str) -> str:
    return psycopg.conninfo.make_conninfo(admin, dbname=db)


def _size(dsn: str, tables: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            f"WHERE c.relkind IN ('r', 'p') AND {tables}"
        ).fetchone()
    return int(row[0]) if row else 0


def _session(
    saver: BaseCheckpointSaver[Any],
    steps: int,
    reads: int,
    seed: int,
    between: Callable[[], None] = lambda: None,
    fresh: Callable[[], BaseCheckpointSaver[Any]] | None = None,
) -> tuple[list[float], list[float], list[float]]:
    """Run the session: the puts, then ``between()``, then the reads, then (given
    ``fresh``) the same reads each by a new saver, as a process's first read of a
    thread; the put, read and new-saver read latencies in seconds."""
    thread = "bench-" + uuid.uuid4().hex[:8]
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    messages: list[BaseMessage] = []
    versions: dict[str, Any] = {}
    puts: list[float] = []
    stored: list[Any] = []
    # Chat text: 40 words a message from the workload's vocabulary. A repeated sentence
    # would let TOAST compress LangGraph's re-stored lists to almost nothing, which real
    # conversations do not.
    words = random.Random(seed)
    for step in range(steps):
        cls = HumanMessage if step % 2 == 0 else AIMessage
        text = " ".join(words.choice(_WORDS) for _ in range(40))
        message = cls(content=f"{step}: {text}", id=f"m-{step}")
        if stored:
            saver.put_writes(config, [("messages", [message])], f"task-{step}")
        messages = [*messages, message]
        new = {
            "messages": saver.get_next_version(versions.get("messages"), None),
            "step": saver.get_next_version(versions.get("step"), None),
        }
        versions.update(new)
        checkpoint = {
            **checkpoint,
            "id": _uuid6(),
            "channel_values": {"messages": messages, "step": step},
            "channel_versions": dict(versions),
            "versions_seen": {"agent": dict(versions)},
        }
        metadata: Any = {"source": "loop", "step": step, "parents": {}}
        t0 = time.perf_counter()
        config = saver.put(config, checkpoint, metadata, new)
        puts.append(time.perf_counter() - t0)
        stored.append(config)
    between()
    rng = random.Random(seed)
    read_times: list[float] = []
    for _ in range(reads):
        target = rng.choice(stored[: max(1, len(stored) - 1)])
        t0 = time.perf_counter()
        tup = saver.get_tuple(target)
        read_times.append(time.perf_counter() - t0)
        assert tup is not None
    first_reads: list[float] = []
    rng = random.Random(seed)
    for _ in range(reads if fresh else 0):
        target = rng.choice(stored[: max(1, len(stored) - 1)])
        assert fresh is not None
        reader = fresh()
        t0 = time.perf_counter()
        tup = reader.get_tuple(target)
        first_reads.append(time.perf_counter() - t0)
        assert tup is not None
    return puts, read_times, first_reads


def _uuid6() -> str:
    from langgraph.checkpoint.base.id import uuid6

    return str(uuid6(clock_seq=-1))


def _vacuum_analyze(dsn: str) -> None:
    """What autovacuum does to a database in use: the reads are planned with the
    tables' statistics, as they are once a thread's tables have been in use a while."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def _pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[int(q) - 1] * 1000 if len(xs) > 1 else xs[0] * 1000


def _run(
    admin: str, name: str, make: Callable[[str], Any], tables: str, args: argparse.Namespace
) -> dict[str, float]:
    db = f"lgbench_{name}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    dsn = _dsn_for(admin, db)
    try:
        savers = make(dsn)
        with savers as saver:
            before = _size(dsn, tables)
            puts, reads, first_reads = _session(
                saver, args.steps, args.reads, args.seed, lambda: _vacuum_analyze(dsn), savers.fresh
            )
            after = _size(dsn, tables)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    return {
        "bytes": after - before,
        "put_p50_ms": _pct(puts, 50),
        "put_p95_ms": _pct(puts, 95),
        "read_p50_ms": _pct(reads, 50),
        "read_p95_ms": _pct(reads, 95),
        "first_read_p50_ms": _pct(first_reads, 50),
    }


class _PG:
    def __init__(self, dsn: str) -> None:
        self._cm = PostgresSaver.from_conn_string(dsn)

    def __enter__(self) -> PostgresSaver:
        self._saver = self._cm.__enter__()
        self._saver.setup()
        return self._saver

    def fresh(self) -> PostgresSaver:
        """A new saver on the same connection (LangGraph's remembers nothing anyway)."""
        return PostgresSaver(self._saver.conn)

    def __exit__(self, *exc: object) -> None:
        self._cm.__exit__(None, None, None)


class _CW:
    def __init__(self, dsn: str) -> None:
        self._dsn = dsn

    def __enter__(self) -> CwstoreSaver:
        self._store = cwstore.connect_sync(self._dsn, migrate_schema=True)
        return CwstoreSaver(self._store)

    def fresh(self) -> CwstoreSaver:
        """A new saver on the same store, remembering nothing of the thread."""
        return CwstoreSaver(self._store)

    def __exit__(self, *exc: object) -> None:
        self._store.close()


SAVERS: dict[str, tuple[type[Any], str]] = {
    "langgraph_postgres": (_PG, "n.nspname = 'public'"),
    "cwstore": (_CW, "n.nspname = 'cwstore'"),
}


def run_apart(name: str, args: argparse.Namespace) -> dict[str, float]:
    """:func:`_run` of one saver in a new interpreter."""
    make, tables = SAVERS[name]
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_run, (args.dsn, name[:2], make, tables, args))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=25)
    args = parser.parse_args()
    keys = ("bytes", "put_p50_ms", "read_p50_ms", "first_read_p50_ms")
    rounds = []
    for _ in range(args.rounds):
        one = {name: run_apart(name, args) for name in SAVERS}
        one["ratio_cwstore_over_langgraph"] = {
            k: one["cwstore"][k] / one["langgraph_postgres"][k] for k in keys
        }
        rounds.append(one)
    ratios = {
        k: statistics.median(r["ratio_cwstore_over_langgraph"][k] for r in rounds) for k in keys
    }
    targets = {"bytes": 0.1, "put_p50_ms": 0.5, "read_p50_ms": 0.5}
    report = {
        "steps": args.steps,
        "rounds": rounds,
        "median_ratio_cwstore_over_langgraph": ratios,
        "met": {k: ratios[k] <= targets[k] for k in targets},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
