"""The same LangGraph threads through LangGraph's PostgreSQL saver and cwstore's.

Workloads (``--workloads``, all by default; each reported as its own configuration):

- ``agent``: a tool agent, ``--agent-threads`` threads of ``--agent-turns`` turns, run by
  LangGraph itself: a ``StateGraph`` of a deterministic fake chat model (LangChain's
  ``GenericFakeChatModel``, no network) and a ``ToolNode`` of two tools. Each turn the user
  asks, the model calls one tool (``lookup`` and ``add`` in turn), the tool answers, the
  model replies: five checkpoints a turn, stored with ``durability="sync"`` (each put
  before the next step, so a put is timed without the graph's own thread beside it).
  Reported: bytes, put p50/p95 (every ``put`` the graph makes) and turn p50/p95
  (``invoke`` of one user message).
- ``chat``: for each of ``--steps`` (default 300): a chat of that many steps. Each step
  stores the new message as a pending write of the previous checkpoint, then a
  checkpoint whose ``messages`` channel holds the whole list so far (as
  ``add_messages`` hands it over) and a ``step`` counter. Then ``--reads`` reads of past
  checkpoints picked at random, first by the saver that wrote the thread, then each by
  a new saver (first_read: what a process reads of a thread it has not seen). Between
  the puts and the reads the database is vacuumed and analyzed, as autovacuum leaves a
  database in use. Reported: bytes, put p50/p95, read p50/p95, first_read p50, and the
  put p50 of the first and of the last 50 puts (as for ``growth``).
- ``growth``: a chat of ``--growth-steps`` steps in a database whose saver tables were
  analyzed while empty, with autovacuum off on them, so every put is planned with the
  statistics of empty tables. Reported: put p50 of the first 50 and of the last 50 puts,
  their ratio.

Every configuration also reports the sequential scans of the saver's tables during it
(``seq_scans``, from ``pg_stat_user_tables`` once the saver's connections are closed).

Bytes: the saver's tables' total relation size (indexes and TOAST included), after
minus before. Each saver gets its own new database on the server of ``--dsn`` (an admin
DSN), dropped afterwards, and runs in a process of its own (a fresh interpreter: neither
measures with the other's heap), in ``--rounds`` rounds per configuration, alternating
which saver goes first. Reported per round and as the median over the rounds of the
ratio cwstore / LangGraph, with the targets of issue 35 (and issue 25's at 1,000 steps):
met or not.

    python benchmarks/langgraph_saver.py --dsn postgresql://postgres@127.0.0.1:5432/postgres
    python benchmarks/langgraph_saver.py --workloads chat --steps 1000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from _results import RESULTS, command_line, run_header, versions, write_section
from _workload import _WORDS
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

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


Metrics = dict[str, float]


def _freeze_statistics(dsn: str, tables: str) -> None:
    """The saver's tables analyzed while empty, autovacuum off on them: every later
    plan sees the statistics of empty tables."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                f"WHERE c.relkind = 'r' AND {tables}"
            ).fetchall()
        ]
        for name in names:
            conn.execute(
                f"ALTER TABLE {name} SET (autovacuum_enabled = off, toast.autovacuum_enabled = off)"
            )
            conn.execute(f"ANALYZE {name}")


def _seq_scans(dsn: str, tables: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(s.seq_scan), 0) FROM pg_stat_user_tables s "
            "JOIN pg_class c ON c.oid = s.relid JOIN pg_namespace n ON n.oid = c.relnamespace "
            f"WHERE {tables}"
        ).fetchone()
    return int(row[0]) if row else 0


def _chat(saver: Any, savers: Any, dsn: str, steps: int, args: argparse.Namespace) -> Metrics:
    puts, reads, first_reads = _session(
        saver, steps, args.reads, args.seed, lambda: _vacuum_analyze(dsn), savers.fresh
    )
    return {
        "put_p50_ms": _pct(puts, 50),
        "put_p95_ms": _pct(puts, 95),
        "read_p50_ms": _pct(reads, 50),
        "read_p95_ms": _pct(reads, 95),
        "first_read_p50_ms": _pct(first_reads, 50),
        **_ends(puts),
    }


def _ends(puts: list[float]) -> Metrics:
    """Put p50 of the first 50 and of the last 50 puts, and their ratio."""
    first, last = _pct(puts[:50], 50), _pct(puts[-50:], 50)
    return {
        "first50_put_p50_ms": first,
        "last50_put_p50_ms": last,
        "last50_over_first50": last / first,
    }


def _growth(saver: Any, savers: Any, dsn: str, steps: int, args: argparse.Namespace) -> Metrics:
    puts, _, _ = _session(saver, steps, 0, args.seed)
    return {"put_p50_ms": _pct(puts, 50), **_ends(puts)}


@tool
def lookup(query: str) -> str:
    """Look a question up: a paragraph of text."""
    words = random.Random(query)
    return " ".join(words.choice(_WORDS) for _ in range(60))


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _model_turns(threads: int, turns: int, seed: int) -> Iterator[AIMessage]:
    """What the fake model says, in order: per turn a tool call, then an answer."""
    words = random.Random(seed)
    for t in range(threads):
        for turn in range(turns):
            call: Any = (
                {"name": "lookup", "args": {"query": f"{t}-{turn} " + words.choice(_WORDS)}}
                if turn % 2 == 0
                else {"name": "add", "args": {"a": turn, "b": words.randrange(1000)}}
            )
            yield AIMessage(content="", tool_calls=[{**call, "id": f"call-{t}-{turn}"}])
            yield AIMessage(content=" ".join(words.choice(_WORDS) for _ in range(40)))


def _agent(saver: Any, savers: Any, dsn: str, steps: int, args: argparse.Namespace) -> Metrics:
    threads, turns = args.agent_threads, args.agent_turns
    model = GenericFakeChatModel(messages=_model_turns(threads, turns, args.seed))

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup, add]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=saver)
    puts: list[float] = []
    put = saver.put

    def timed_put(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return put(*a, **k)
        finally:
            puts.append(time.perf_counter() - t0)

    saver.put = timed_put
    words = random.Random(args.seed + 1)
    turn_times: list[float] = []
    for t in range(threads):
        config: Any = {"configurable": {"thread_id": f"agent-{uuid.uuid4().hex[:8]}-{t}"}}
        for _ in range(turns):
            question = " ".join(words.choice(_WORDS) for _ in range(20))
            t0 = time.perf_counter()
            graph.invoke({"messages": [HumanMessage(question)]}, config, durability="sync")
            turn_times.append(time.perf_counter() - t0)
    return {
        "put_p50_ms": _pct(puts, 50),
        "put_p95_ms": _pct(puts, 95),
        "turn_p50_ms": _pct(turn_times, 50),
        "turn_p95_ms": _pct(turn_times, 95),
        "puts": len(puts),
    }


WORKLOADS: dict[str, Callable[[Any, Any, str, int, argparse.Namespace], Metrics]] = {
    "agent": _agent,
    "chat": _chat,
    "growth": _growth,
}


def _run(admin: str, name: str, workload: str, steps: int, args: argparse.Namespace) -> Metrics:
    """One saver through one workload, in a new database, dropped afterwards."""
    make = SAVERS[name]
    db = f"lgbench_{name[:2]}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    dsn = _dsn_for(admin, db)
    try:
        savers = make(dsn)
        with savers as saver:
            if workload == "growth":
                _freeze_statistics(dsn, savers.tables)
            before = _size(dsn, savers.tables)
            scans = _seq_scans(dsn, savers.tables)
            metrics = WORKLOADS[workload](saver, savers, dsn, steps, args)
            after = _size(dsn, savers.tables)
        time.sleep(1)  # the saver's backends have exited, their statistics flushed
        metrics["seq_scans"] = _seq_scans(dsn, savers.tables) - scans
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    return {"bytes": after - before, **metrics}


class _PG:
    tables = "n.nspname = 'public'"

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
    tables = "n.nspname = 'cwstore'"

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


SAVERS: dict[str, type[Any]] = {"langgraph_postgres": _PG, "cwstore": _CW}


# The targets of issue 35 (and issue 25's at 1,000 steps), on the median ratio
# cwstore / LangGraph, per configuration.
TARGETS: dict[str, Metrics] = {
    "agent": {"bytes": 1.0, "put_p50_ms": 1.0},
    "chat 300": {"bytes": 0.5, "put_p50_ms": 1.0},
    "chat 1000": {"bytes": 0.1, "put_p50_ms": 0.5, "read_p50_ms": 0.5},
}
GROWTH_TARGET = 1.5


def run_apart(name: str, workload: str, steps: int, args: argparse.Namespace) -> Metrics:
    """:func:`_run` of one saver in a new interpreter."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_run, (args.dsn, name, workload, steps, args))


def _configuration(workload: str, steps: int, args: argparse.Namespace) -> dict[str, Any]:
    rounds = []
    for i in range(args.rounds):
        order = list(SAVERS) if i % 2 == 0 else list(reversed(SAVERS))
        one: dict[str, Any] = {name: run_apart(name, workload, steps, args) for name in order}
        one["ratio"] = {
            k: one["cwstore"][k] / one["langgraph_postgres"][k]
            for k in one["cwstore"]
            if k.endswith("_ms") or k == "bytes"
        }
        rounds.append(one)
        print(f"{workload} {steps}: round {i + 1}: {json.dumps(one['ratio'])}", file=sys.stderr)
    keys = rounds[0]["ratio"]
    median = {k: statistics.median(r["ratio"][k] for r in rounds) for k in keys}
    out: dict[str, Any] = {
        "median": {
            name: {k: statistics.median(r[name][k] for r in rounds) for k in rounds[0][name]}
            for name in SAVERS
        },
        "median_ratio_cwstore_over_langgraph": median,
        "rounds": rounds,
    }
    label = workload if workload == "agent" else f"{workload} {steps}"
    if label in TARGETS:
        out["met"] = {k: median[k] <= v for k, v in TARGETS[label].items()}
    if workload == "growth":
        out["met"] = {
            "last50_over_first50": out["median"]["cwstore"]["last50_over_first50"] <= GROWTH_TARGET
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--steps", type=int, nargs="+", default=[300])
    parser.add_argument("--growth-steps", type=int, default=1000)
    parser.add_argument("--agent-threads", type=int, default=3)
    parser.add_argument("--agent-turns", type=int, default=30)
    parser.add_argument("--reads", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=25)
    parser.add_argument(
        "--write-results", action="store_true", help="write its section of benchmarks/RESULTS.md"
    )
    args = parser.parse_args()
    report: dict[str, Any] = {"load_average_before": os.getloadavg()}
    for workload in args.workloads:
        lengths = {"agent": [0], "chat": args.steps, "growth": [args.growth_steps]}[workload]
        for steps in lengths:
            label = workload if workload == "agent" else f"{workload} {steps}"
            report[label] = _configuration(workload, steps, args)
    report["load_average_after"] = os.getloadavg()
    print(json.dumps(report, indent=2))
    if args.write_results:
        with psycopg.connect(args.dsn) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        facts = {
            "PostgreSQL": str(row[0]) if row else "?",
            "Packages": versions("langgraph", "langgraph-checkpoint-postgres", "langchain-core"),
            "Load average before / after": " → ".join(
                " / ".join(f"{x:.2f}" for x in report[k])
                for k in ("load_average_before", "load_average_after")
            ),
        }
        title = "LangGraph savers"
        header = run_header(title, command_line(sys.argv), facts)
        write_section("langgraph-saver", header + "\n" + markdown(report) + "\n")
        print(f"wrote section 'langgraph-saver' of {RESULTS}", file=sys.stderr)


def _shown(key: str, value: float) -> str:
    return f"{value / 1e6:.2f} MB" if key == "bytes" else f"{value:.2f} ms"


def markdown(report: dict[str, Any]) -> str:
    """Each configuration's medians over its rounds, the ratio's range, and its targets."""
    lines = [
        "A ratio is cwstore / PostgresSaver within a round: its median over the rounds and "
        "its range across them.",
        "",
        "| configuration | measure | PostgresSaver | cwstore | ratio, median (range) | target |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for label, config in report.items():
        if not isinstance(config, dict):
            continue
        theirs, ours = config["median"]["langgraph_postgres"], config["median"]["cwstore"]
        targets = TARGETS.get(label, {})
        met = config.get("met", {})
        for key in [*config["median_ratio_cwstore_over_langgraph"], "last50_over_first50"]:
            if key not in ours:
                continue
            if key == "last50_over_first50":
                ratios = [r["cwstore"][key] for r in config["rounds"]]
                cells = (f"{theirs[key]:.2f}x", f"{ours[key]:.2f}x")
                target = GROWTH_TARGET if label.startswith("growth") else None
            else:
                ratios = [r["ratio"][key] for r in config["rounds"]]
                cells = (_shown(key, theirs[key]), _shown(key, ours[key]))
                target = targets.get(key)
            verdict = "" if key not in met else (" (met)" if met[key] else " (not met)")
            lines.append(
                f"| {label} | {key} | {cells[0]} | {cells[1]} | "
                f"{statistics.median(ratios):.2f}x ({min(ratios):.2f} to {max(ratios):.2f}) | "
                + (f"≤ {target}x{verdict}" if target is not None else "")
                + " |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
