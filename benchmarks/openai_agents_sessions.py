"""The same OpenAI Agents SDK conversations through SQLAlchemySession and CwstoreSession.

A real ``Runner`` with a deterministic fake model and two tools (no network) runs
``--sessions`` conversations of ``--turns`` turns each, every turn twice: once on the
SDK's ``SQLAlchemySession`` (asyncpg) and once on cwstore's ``CwstoreSession``, each in
its own new database on the server of ``--dsn`` (an admin DSN), dropped afterwards;
which of the two goes first alternates turn by turn. A turn is a user message, then,
as the turn number decides, zero, one or two rounds of tool calls (one or two calls
each) and an answer: the Runner stores the input, each tool round and the answer as
it goes (its per-turn saves). After every turn both sessions' items are read back and
must be equal (the run stops otherwise).

Reported, side by side: bytes the sessions take (the tables' total relation size,
indexes and TOAST included, after minus before, after ``VACUUM ANALYZE`` as
autovacuum leaves a database in use), the p50 and p95 of the Runner's ``add_items``
(append) and ``get_items`` (read) calls, timed around the session's own method, and
the ratios cwstore / SQLAlchemy. Targets: each ratio <= 1.0x.

    python benchmarks/openai_agents_sessions.py --dsn postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from _results import RESULTS, command_line, run_header, versions, write_section
from _workload import _WORDS
from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled
from agents.extensions.memory import SQLAlchemySession
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

import cwstore
from cwstore.openai_agents import CwstoreSession

set_tracing_disabled(True)


SCALE = {"words": 1.0}
"""How much longer than the defaults the tool outputs and answers are (--scale)."""


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


class ScriptedModel(Model):
    """A model whose every answer follows from the conversation so far: the number of
    tool rounds a turn gets (0-2) and each call's arguments come from the user
    message, the call ids from the turn and round, the answer from the tool outputs."""

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
        **_: Any,
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        user_at = max(i for i, item in enumerate(items) if dict(item).get("role") == "user")
        user = str(dict(items[user_at]).get("content"))
        rounds_done = sum(
            1 for item in items[user_at:] if dict(item).get("type") == "function_call_output"
        )
        rng = random.Random(user)
        tool_rounds = rng.choice((0, 1, 1, 2))
        turn = user.split(" ", 1)[0]
        output: list[Any]
        if rounds_done < tool_rounds:
            calls = rng.choice((1, 1, 2))
            output = [
                ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc_{turn}_{rounds_done}_{c}",
                    call_id=f"call_{turn}_{rounds_done}_{c}",
                    name=("lookup", "weather")[c % 2],
                    arguments=json.dumps({"query": _text(rng, 6)}),
                    status="completed",
                )
                for c in range(calls)
            ]
        else:
            output = [
                ResponseOutputMessage(
                    type="message",
                    id=f"msg_{turn}",
                    role="assistant",
                    status="completed",
                    content=[
                        ResponseOutputText(
                            type="output_text",
                            text=_text(rng, round(80 * SCALE["words"])),
                            annotations=[],
                        )
                    ],
                )
            ]
        return ModelResponse(output=list(output), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError


@function_tool
def lookup(query: str) -> str:
    """Look something up."""
    return _text(random.Random("lookup " + query), round(60 * SCALE["words"]))


@function_tool
def weather(query: str) -> str:
    """The weather somewhere."""
    return _text(random.Random("weather " + query), round(25 * SCALE["words"]))


class Timed:
    """A session whose ``add_items`` and ``get_items`` calls are timed."""

    def __init__(self, inner: Any, appends: list[float], reads: list[float]) -> None:
        self.inner = inner
        self.session_id = inner.session_id
        self.session_settings = inner.session_settings
        self.appends = appends
        self.reads = reads

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        t = time.perf_counter()
        items = await self.inner.get_items(limit)
        self.reads.append(time.perf_counter() - t)
        return items  # type: ignore[no-any-return]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        t = time.perf_counter()
        await self.inner.add_items(items)
        self.appends.append(time.perf_counter() - t)

    async def pop_item(self) -> TResponseInputItem | None:
        return await self.inner.pop_item()  # type: ignore[no-any-return]

    async def clear_session(self) -> None:
        await self.inner.clear_session()


def _dsn_for(admin: str, db: str) -> str:
    return psycopg.conninfo.make_conninfo(admin, dbname=db)


def _sizes(dsn: str, where: str) -> dict[str, int]:
    """Each table's total relation size (indexes and TOAST included), after VACUUM
    ANALYZE."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        rows = conn.execute(
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            f"WHERE c.relkind IN ('r', 'p') AND {where}"
        ).fetchall()
    return {str(name): int(size) for name, size in rows}


def _pct(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100)[q - 1] if len(xs) > 1 else xs[0]


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    dbs = {"sqlalchemy": f"oa_bench_sqla_{tag}", "cwstore": f"oa_bench_cw_{tag}"}
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        for db in dbs.values():
            conn.execute(f'CREATE DATABASE "{db}"')
    sqla_dsn = _dsn_for(args.dsn, dbs["sqlalchemy"])
    cw_dsn = _dsn_for(args.dsn, dbs["cwstore"])
    params = psycopg.conninfo.conninfo_to_dict(sqla_dsn)
    url = (
        f"postgresql+asyncpg://{params.get('user', 'postgres')}@"
        f"{params.get('host', '127.0.0.1')}:{params.get('port', 5432)}/{params['dbname']}"
    )
    times: dict[str, dict[str, list[float]]] = {name: {"append": [], "read": []} for name in dbs}
    store = await cwstore.connect(cw_dsn, migrate_schema=True)
    try:
        setup = SQLAlchemySession.from_url("setup", url=url, create_tables=True)
        await setup.get_items()
        before = {
            "sqlalchemy": _sizes(sqla_dsn, "n.nspname = 'public'"),
            "cwstore": _sizes(cw_dsn, "n.nspname = 'cwstore'"),
        }
        sessions: dict[str, list[Timed]] = {"sqlalchemy": [], "cwstore": []}
        for s in range(args.sessions):
            sid = f"conversation-{s}"
            sessions["sqlalchemy"].append(
                Timed(
                    SQLAlchemySession(sid, engine=setup.engine),
                    times["sqlalchemy"]["append"],
                    times["sqlalchemy"]["read"],
                )
            )
            sessions["cwstore"].append(
                Timed(
                    CwstoreSession(sid, store),
                    times["cwstore"]["append"],
                    times["cwstore"]["read"],
                )
            )
        agent = Agent(
            name="assistant",
            instructions="Answer, using the tools when asked.",
            model=ScriptedModel(),
            tools=[lookup, weather],
        )
        items_total = 0
        for turn in range(args.turns):
            order = ["sqlalchemy", "cwstore"] if turn % 2 == 0 else ["cwstore", "sqlalchemy"]
            for s in range(args.sessions):
                prompt = f"t{turn}s{s} " + _text(random.Random(f"{turn}/{s}"), 30)
                for name in order:
                    await Runner.run(agent, prompt, session=sessions[name][s])
                theirs = await sessions["sqlalchemy"][s].inner.get_items()
                ours = await sessions["cwstore"][s].inner.get_items()
                if theirs != ours:
                    raise SystemExit(f"turn {turn}, session {s}: the items differ")
                items_total = max(items_total, len(ours))
        await setup.engine.dispose()
        after = {
            "sqlalchemy": _sizes(sqla_dsn, "n.nspname = 'public'"),
            "cwstore": _sizes(cw_dsn, "n.nspname = 'cwstore'"),
        }
    finally:
        await store.close()
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            for db in dbs.values() if not args.keep else ():
                conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    result: dict[str, Any] = {"items_per_session": items_total}
    for name in dbs:
        grown = {
            table: size - before[name].get(table, 0)
            for table, size in after[name].items()
            if size != before[name].get(table, 0)
        }
        result[name] = {
            "bytes": sum(grown.values()),
            "tables": dict(sorted(grown.items(), key=lambda kv: -kv[1])),
            "append_p50": _pct(times[name]["append"], 50) * 1000,
            "append_p95": _pct(times[name]["append"], 95) * 1000,
            "read_p50": _pct(times[name]["read"], 50) * 1000,
            "read_p95": _pct(times[name]["read"], 95) * 1000,
            "appends": len(times[name]["append"]),
            "reads": len(times[name]["read"]),
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--dsn", required=True, help="an admin DSN of the server")
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--turns", type=int, default=25)
    parser.add_argument(
        "--scale", type=float, default=1.0, help="tool outputs and answers this many times longer"
    )
    parser.add_argument("--keep", action="store_true", help="keep the two databases")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--write-results", action="store_true", help="write its section of benchmarks/RESULTS.md"
    )
    args = parser.parse_args()
    SCALE["words"] = args.scale
    result = asyncio.run(_run(args))
    a, b = result["sqlalchemy"], result["cwstore"]
    out = [
        f"{args.sessions} sessions x {args.turns} turns (scale {args.scale}), "
        f"{result['items_per_session']} items "
        f"per session, {b['appends']} appends and {b['reads']} reads each; items equal "
        "after every turn",
        "",
        "| | SQLAlchemySession | CwstoreSession | ratio |",
        "| --- | --- | --- | --- |",
        f"| bytes | {a['bytes']:,} | {b['bytes']:,} | {b['bytes'] / a['bytes']:.2f}x |",
    ]
    for key, label in (("append", "append (add_items)"), ("read", "read (get_items)")):
        for q in ("_p50", "_p95"):
            out.append(
                f"| {label} {q[1:]} | {a[key + q]:.2f} ms | {b[key + q]:.2f} ms | "
                f"{b[key + q] / a[key + q]:.2f}x |"
            )
    for name, label in (("sqlalchemy", "SQLAlchemySession"), ("cwstore", "CwstoreSession")):
        tables = ", ".join(f"{t} {v:,}" for t, v in result[name]["tables"].items())
        out += ["", f"{label} bytes by table (indexes and TOAST included): {tables}"]
    print(json.dumps(result) if args.json else "\n".join(out))
    if args.write_results:
        with psycopg.connect(args.dsn) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        facts = {
            "PostgreSQL": str(row[0]) if row else "?",
            "Packages": versions("openai-agents", "sqlalchemy", "asyncpg", "psycopg"),
        }
        title = "OpenAI Agents SDK sessions"
        header = run_header(title, command_line(sys.argv), facts)
        write_section("openai-agents-sessions", header + "\n" + "\n".join(out) + "\n")
        print(f"wrote section 'openai-agents-sessions' of {RESULTS}")


if __name__ == "__main__":
    main()
