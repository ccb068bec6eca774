"""Google ADK sessions: cwstore's CwstoreSessionService beside ADK's own
DatabaseSessionService, both on PostgreSQL, driven by a real ADK ``Runner``.

A deterministic fake model (no network) and one tool: each turn the user asks a
question, the model calls the tool ``lookup`` (which writes a session state key and,
every fifth turn, a user-scoped one), the tool answers, the model replies with text:
four events a turn. ``--sessions`` sessions run ``--turns`` turns each; every turn runs
on both services, alternating which goes first, and after every turn both sessions'
events must be identical (content, author, kind of actions, state), else the run stops.

Each service has a database of its own on the server of ``--dsn`` (created, and dropped
at the end). Reported: the bytes of each service's tables (``pg_total_relation_size``,
after ``VACUUM ANALYZE``, minus the same before the run), ``append_event`` p50/p95 and
``get_session`` (whole session) p50/p95, and the ratios cwstore / ADK.

    python benchmarks/adk_sessions.py --dsn postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import AsyncGenerator
from typing import Any

import asyncpg
from _results import RESULTS, command_line, run_header, versions, write_section
from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.adk.sessions.session import Session
from google.adk.tools.tool_context import ToolContext
from google.genai import types

import cwstore
from cwstore.adk import CwstoreSessionService

APP = "bench_app"
WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
    "amber",
    "basalt",
    "cobalt",
    "dune",
    "ember",
    "fjord",
    "granite",
    "harbor",
    "indigo",
    "jasper",
]


def sentence(seed: int, n: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 13) % len(WORDS)] for i in range(n))


class FakeModel(BaseLlm):
    """Calls ``lookup`` once per user message, then answers with text."""

    model: str = "fake-model"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1]
        parts = last.parts or []
        response = next((p.function_response for p in parts if p.function_response), None)
        if response is None:
            question = "".join(p.text or "" for p in parts)
            yield LlmResponse(
                content=types.Content(
                    role="model",
                    parts=[
                        types.Part(
                            function_call=types.FunctionCall(
                                name="lookup", args={"query": question[:40]}
                            )
                        )
                    ],
                ),
                usage_metadata=types.GenerateContentResponseUsageMetadata(
                    prompt_token_count=len(llm_request.contents) * 50,
                    candidates_token_count=12,
                    total_token_count=len(llm_request.contents) * 50 + 12,
                ),
            )
            return
        result = (response.response or {}).get("result", "")
        yield LlmResponse(
            content=types.Content(
                role="model", parts=[types.Part(text=f"Here is what I found: {result}")]
            ),
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=len(llm_request.contents) * 50,
                candidates_token_count=40,
                total_token_count=len(llm_request.contents) * 50 + 40,
            ),
        )


def lookup(query: str, tool_context: ToolContext) -> dict[str, Any]:
    """Looks a query up."""
    turn = int(tool_context.state.get("turns", 0)) + 1
    tool_context.state["turns"] = turn
    tool_context.state["last_query"] = query
    if turn % 5 == 0:
        tool_context.state["user:topics"] = turn // 5
    return {"result": sentence(turn + len(query), 30)}


def timed_service(inner: BaseSessionService, sink: list[float]) -> BaseSessionService:
    original = inner.append_event

    async def append_event(session: Session, event: Event) -> Event:
        t = time.perf_counter()
        try:
            return await original(session, event)
        finally:
            sink.append(time.perf_counter() - t)

    inner.append_event = append_event  # type: ignore[method-assign]
    return inner


def _content(event: Event) -> Any:
    """The event's content without the function call ids ADK draws at random."""
    if event.content is None:
        return None
    content = event.content.model_dump(mode="json", exclude_none=True)
    for part in content.get("parts", []):
        for name in ("function_call", "function_response"):
            part.get(name, {}).pop("id", None)
    return content


def comparable(session: Session) -> list[tuple[Any, ...]]:
    """What must be identical between the two services' sessions: each event's
    author, content (up to random call ids), actions and usage."""
    return [
        (
            e.author,
            _content(e),
            e.actions.model_dump(mode="json", exclude_none=True),
            e.usage_metadata.model_dump(mode="json") if e.usage_metadata else None,
        )
        for e in session.events
    ]


async def table_bytes(dsn: str, schema: str) -> tuple[int, int]:
    """(every byte of the schema's tables: pg_total_relation_size, what the rows take:
    the same without each relation's free space and visibility maps, a few pages each
    once vacuumed however few rows it holds)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("VACUUM ANALYZE")
        row = await conn.fetchrow(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) AS total,"
            "       coalesce(sum(pg_relation_size(c.oid)"
            "                    + coalesce(pg_relation_size(c.reltoastrelid), 0)"
            "                    + (SELECT coalesce(sum(pg_relation_size(i.indexrelid)), 0)"
            "                         FROM pg_index i WHERE i.indrelid = c.oid)), 0) AS main"
            "  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'm')",
            schema,
        )
        assert row is not None
        return int(row["total"]), int(row["main"])
    finally:
        await conn.close()


def _target(ratio: float) -> str:
    """Issue 36's target for a ratio cwstore / ADK: at most 1.0."""
    return "<= 1.0x (" + ("met" if ratio <= 1.0 else "not met") + ")"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


async def run(args: argparse.Namespace) -> None:
    admin = await asyncpg.connect(args.dsn)
    base = args.dsn.rsplit("/", 1)[0]
    for db in ("adk_bench_cw", "adk_bench_db"):
        await admin.execute(f"DROP DATABASE IF EXISTS {db}")
        await admin.execute(f"CREATE DATABASE {db}")
    cw_dsn, db_dsn = f"{base}/adk_bench_cw", f"{base}/adk_bench_db"
    sa_url = db_dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
    try:
        cw = await CwstoreSessionService.from_dsn(cw_dsn, setup=True)
        adk = DatabaseSessionService(sa_url)
        await adk.prepare_tables()
        cw_before = await table_bytes(cw_dsn, "cwstore")
        db_before = await table_bytes(db_dsn, "public")
        appends: dict[str, list[float]] = {"cwstore": [], "adk": []}
        services = {
            "cwstore": timed_service(cw, appends["cwstore"]),
            "adk": timed_service(adk, appends["adk"]),
        }
        agent = LlmAgent(name="helper", model=FakeModel(), instruction="Help.", tools=[lookup])
        runners = {
            name: Runner(app_name=APP, agent=agent, session_service=svc)
            for name, svc in services.items()
        }
        # Session ids as ADK draws them when none is given (a UUID), three users.
        ids = [str(uuid.uuid4()) for _ in range(args.sessions)]
        users = {sid: f"user-{k % 3:04d}" for k, sid in enumerate(ids)}
        for sid in ids:
            for svc in services.values():
                await svc.create_session(app_name=APP, user_id=users[sid], session_id=sid)
        for turn in range(args.turns):
            for k, sid in enumerate(ids):
                user = users[sid]
                order = ["cwstore", "adk"] if (turn + k) % 2 == 0 else ["adk", "cwstore"]
                message = types.Content(
                    role="user", parts=[types.Part(text=sentence(turn * 31 + k, 20) + "?")]
                )
                for name in order:
                    async for _ in runners[name].run_async(
                        user_id=user, session_id=sid, new_message=message
                    ):
                        pass
                got = {
                    name: await svc.get_session(app_name=APP, user_id=user, session_id=sid)
                    for name, svc in services.items()
                }
                a, b = got["cwstore"], got["adk"]
                assert a is not None and b is not None
                if comparable(a) != comparable(b) or a.state != b.state:
                    raise SystemExit(f"turn {turn}, session {sid}: the services differ")
        reads: dict[str, list[float]] = {"cwstore": [], "adk": []}
        for r in range(args.reads):
            sid = ids[r % len(ids)]
            user = users[sid]
            order = ["cwstore", "adk"] if r % 2 == 0 else ["adk", "cwstore"]
            for name in order:
                t = time.perf_counter()
                await services[name].get_session(app_name=APP, user_id=user, session_id=sid)
                reads[name].append(time.perf_counter() - t)
        await cw.close()
        await adk.close()
        cw_after = await table_bytes(cw_dsn, "cwstore")
        db_after = await table_bytes(db_dsn, "public")
        cw_bytes, cw_main = (a - b for a, b in zip(cw_after, cw_before, strict=True))
        db_bytes, db_main = (a - b for a, b in zip(db_after, db_before, strict=True))
        events = args.sessions * args.turns * 4
        out = [
            f"{args.sessions} sessions x {args.turns} turns, {events} events each side, "
            f"{args.reads} reads; events identical after every turn. A real ADK `Runner`, "
            "a fake model calling one tool a turn (two session state keys, a `user:` key "
            "every fifth turn), four events a turn, the two services alternating; bytes "
            "of each service's tables after `VACUUM ANALYZE`, each in a database of its own.",
            "",
            "| | ADK DatabaseSessionService | cwstore | ratio | target |",
            "| --- | --- | --- | --- | --- |",
            f"| bytes of the sessions | {db_bytes / 1e6:.2f} MB | {cw_bytes / 1e6:.2f} MB "
            f"| {cw_bytes / db_bytes:.2f}x | {_target(cw_bytes / db_bytes)} |",
            f"| the same without free space and visibility maps | {db_main / 1e6:.2f} MB "
            f"| {cw_main / 1e6:.2f} MB | {cw_main / db_main:.2f}x | |",
        ]
        for label, data in (("append_event", appends), ("get_session (whole)", reads)):
            for q, qn in ((0.5, "p50"), (0.95, "p95")):
                x, y = pct(data["adk"], q), pct(data["cwstore"], q)
                target = _target(y / x) if qn == "p50" else ""
                out.append(f"| {label} {qn} | {x:.2f} ms | {y:.2f} ms | {y / x:.2f}x | {target} |")
        out += [
            "",
            f"(append_event medians: {statistics.median(appends['adk']) * 1000:.2f} / "
            f"{statistics.median(appends['cwstore']) * 1000:.2f} ms, "
            f"{len(appends['adk'])} / {len(appends['cwstore'])} calls)",
        ]
        print("\n".join(out))
        if args.write_results:
            facts = {
                "PostgreSQL": str(await admin.fetchval("SHOW server_version")),
                "Packages": versions("google-adk", "sqlalchemy", "asyncpg"),
            }
            title = "Google ADK sessions"
            header = run_header(title, command_line(sys.argv), facts)
            write_section("adk-sessions", header + "\n" + "\n".join(out) + "\n")
            print(f"wrote section 'adk-sessions' of {RESULTS}")
    finally:
        if not args.keep:
            for db in ("adk_bench_cw", "adk_bench_db"):
                await admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        await admin.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dsn", required=True, help="a DSN whose role may create databases")
    p.add_argument("--sessions", type=int, default=6)
    p.add_argument("--turns", type=int, default=25)
    p.add_argument("--reads", type=int, default=120)
    p.add_argument("--keep", action="store_true", help="keep the two databases")
    p.add_argument(
        "--write-results", action="store_true", help="write its section of benchmarks/RESULTS.md"
    )
    asyncio.run(run(p.parse_args()))


assert cwstore.__version__
if __name__ == "__main__":
    main()
