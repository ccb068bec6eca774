"""``cwstore demo``: several agent workers, one durable memory, live.

N workers run as separate processes (``spawn``), each with its own
:func:`cwstore.connect_sync`, and write into ONE graph the way StateWeave agents that
share a memory would. Every step of a worker appends, in small atomic batches:

* a ``goal`` whose parents are the graph's current frontier (``store.frontier``), and
  an ``inference`` from it;
* a ``tool_call`` editing the shared file ``src/app.py`` and its ``tool_result``;
* a new version of the resource ``src/app.py``. All workers edit that one key, so its
  chain really races: the node lists the key's head (read through
  ``store.project``) among its parents, and when another worker moved the key first the
  append fails with :class:`~cwstore.ChainConflictError`; the worker re-reads the head,
  re-creates its node on top of it (a new id: parents are part of it) and retries;
* semantic memory: ``semantic:memory:team.convention``, shared by every worker (so it
  races the same way), and ``semantic:memory:worker-<n>.progress``, one per worker;
* a ``verification`` and an ``answer``.

The parent shows progress (a live table on a terminal, a line a second otherwise), then
prints what the graph can answer: a query over causal history through the documented
SQL functions, shown with its text so it can be pasted into psql, and its rows; the
projection halfway through beside the projection now; and how to connect with psql.

With no ``--dsn`` (nor ``CWSTORE_DSN``) it runs on the embedded server. Every run
writes a new graph (``demo-<timestamp>-<random>``); ``--graph`` must name a graph that
holds no nodes yet.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import queue as queue_mod
import secrets
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, LiteralString

from rich.console import Console
from rich.live import Live
from rich.table import Table

from .document import sort_parents
from .drivers._conninfo import without_password
from .errors import ChainConflictError, Error, InputError, UnknownGraphError
from .identity import compute_id
from .results import Projection

if TYPE_CHECKING:
    from .drivers._protocol import Connection

__all__ = ["run_demo"]

APP_KEY = "src/app.py"
SHARED_MEMORY = ("memory", "team.convention")
MAX_WORKERS = 32
MAX_ATTEMPTS = 200
READY_TIMEOUT = 120.0

_SYSTEM_PROMPT = (
    "You are a StateWeave agent in a team of workers sharing one durable memory.\n"
    "Tools: read_file, edit_file, bash_command.\n"
    "Semantic types: memory, preference, wisdom, artifact"
)
_CONVENTIONS = (
    "keep functions in src/app.py under 40 lines",
    "type-annotate every public function",
    "log through the app logger, never print",
    "one feature flag per change",
    "tests beside the code they test",
)
_FEATURES = ("parser", "cache", "retry", "metrics", "auth", "export", "search", "config")

# The queries (a) the demo runs and shows. Placeholders are filled with quoted
# literals (drivers.psycopg.statement) so the text shown is exactly the text run, and
# pasteable into psql.
_Q_BY_WORKER: LiteralString = """\
SELECT (n.payload -> 'worker')::int AS worker,
       count(*) AS tool_results,
       min(a.depth) AS nearest,
       max(a.depth) AS farthest
  FROM cwstore.ancestors({graph}, {answer}) AS a
  JOIN cwstore.node_view AS n ON n.graph = {graph} AND n.seq = a.seq
 WHERE a.kind = 'tool_result'
 GROUP BY 1
 ORDER BY 1;"""

_Q_NEAREST: LiteralString = """\
SELECT a.depth, a.seq, a.id, n.payload ->> 'worker' AS worker,
       n.payload -> 'result' ->> 'summary' AS result
  FROM cwstore.ancestors({graph}, {answer}) AS a
  JOIN cwstore.node_view AS n ON n.graph = {graph} AND n.seq = a.seq
 WHERE a.kind = 'tool_result'
 ORDER BY a.depth, a.seq
 LIMIT 5;"""


# --- workers ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """What one worker process needs (picklable: it crosses the spawn boundary)."""

    dsn: str
    graph: str
    index: int
    steps: int


def _node(
    kind: str, parents: Sequence[str], payload: Any, key: str | None = None, *, with_id: bool
) -> dict[str, Any]:
    """A runtime node. With ``with_id`` its id is computed here, because a later node of
    the same batch names it as a parent; otherwise the store computes it."""
    ps = sort_parents(parents)
    node: dict[str, Any] = {"kind": kind, "parents": ps, "payload": payload}
    if key is not None:
        node["resourceKey"] = key
    if with_id:
        node = {"id": compute_id(kind, ps, payload, key), **node}
    return node


class _Worker:
    """One agent: runs its steps against a store and reports through a queue."""

    def __init__(self, store: Any, cfg: WorkerConfig, report: Any) -> None:
        self.store = store
        self.cfg = cfg
        self.report = report
        self.nodes = 0
        self.conflicts = 0
        self.by_key: dict[str, int] = {}
        self.step_no = 0

    def _send(self) -> None:
        self.report.put(("progress", self.cfg.index, self.step_no, self.nodes, self.conflicts))

    def _append(self, nodes: list[dict[str, Any]]) -> list[Any]:
        stored = self.store.append(self.cfg.graph, nodes)
        self.nodes += sum(1 for _ in stored)
        self._send()
        return list(stored)

    def _heads(self) -> dict[str, tuple[str, int]]:
        """Every key's head now: key -> (node id, version). One projection read."""
        p: Projection = self.store.project(self.cfg.graph)
        heads = {k: (r.id, r.version) for k, r in p.resources.items()}
        for m in p.memory:
            heads[f"semantic:{m.type}:{m.key}"] = (m.id, m.version)
        return heads

    def _append_keyed(
        self,
        build: Callable[[dict[str, tuple[str, int]]], list[dict[str, Any]]],
        heads: dict[str, tuple[str, int]],
    ) -> list[Any]:
        """Append nodes that extend key chains; on a chain race re-read and rebuild.

        ``build`` makes the batch from the heads it is given, listing each key's head
        among the node's parents. The store never adds a head for us (that would turn
        a lost race into a silent overwrite), so a lost race is a ChainConflictError:
        the other worker's version is now the head, and ours is re-made on top of it.
        """
        for _ in range(MAX_ATTEMPTS):
            try:
                return self._append(build(heads))
            except ChainConflictError as exc:
                self.conflicts += 1
                key = exc.key or "?"
                self.by_key[key] = self.by_key.get(key, 0) + 1
                self._send()
                heads = self._heads()
        raise Error(f"worker {self.cfg.index}: gave up after {MAX_ATTEMPTS} chain conflicts")

    def step(self, s: int) -> None:
        w, graph, steps = self.cfg.index, self.cfg.graph, self.cfg.steps
        self.step_no = s
        feature = _FEATURES[(w + s) % len(_FEATURES)]

        # 1. A goal on top of everything the team has done so far (the frontier).
        frontier = self.store.frontier(graph)
        goal = _node(
            "goal",
            frontier,
            f"Worker {w}, step {s}: add the {feature} feature to {APP_KEY}",
            with_id=True,
        )
        inference = _node(
            "inference",
            [goal["id"]],
            {"worker": w, "step": s, "text": f"Edit {APP_KEY}: add {feature}(), then verify."},
            with_id=True,
        )
        self._append([goal, inference])

        # 2. The agent reads the file (and the team's memory), then edits it. Another
        #    worker may write a new version meanwhile: that is the race.
        heads = self._heads()
        call_payload = {
            "name": "edit_file",
            "args": {"file_path": APP_KEY, "insert": f"def {feature}_{w}_{s}(): ..."},
            "worker": w,
        }
        tool_call = _node("tool_call", [inference["id"]], call_payload, with_id=True)
        tool_result = _node(
            "tool_result",
            [tool_call["id"]],
            {
                "tool": "edit_file",
                "worker": w,
                "result": {"path": APP_KEY, "ok": True, "summary": f"added {feature}_{w}_{s}()"},
            },
            with_id=True,
        )
        self._append([tool_call, tool_result])

        # 3. The new version of src/app.py: parents = the tool result + the key's head.
        def version(h: dict[str, tuple[str, int]]) -> list[dict[str, Any]]:
            head = h.get(APP_KEY)
            base = head[0] if head else "empty"
            content_hash = hashlib.sha256(f"{base}+{feature}_{w}_{s}".encode()).hexdigest()
            payload = {
                "path": APP_KEY,
                "operation": "edit_file",
                "worker": w,
                "step": s,
                "basedOnVersion": head[1] if head else 0,
                "contentHash": content_hash,
            }
            parents = [tool_result["id"]] + ([head[0]] if head else [])
            return [_node("resource", parents, payload, APP_KEY, with_id=False)]

        resource = self._append_keyed(version, heads)[0]

        # 4. Semantic memory: one key the whole team shares, one of this worker's own.
        stype, skey = SHARED_MEMORY
        own_key = f"worker-{w}.progress"

        def memory(h: dict[str, tuple[str, int]]) -> list[dict[str, Any]]:
            out = []
            for key, content in (
                (skey, f"{_CONVENTIONS[(w * 7 + s) % len(_CONVENTIONS)]} (worker {w}, step {s})"),
                (own_key, {"step": s, "of": steps, "lastEdit": f"{feature}_{w}_{s}"}),
            ):
                rkey = f"semantic:{stype}:{key}"
                head = h.get(rkey)
                parents = [resource.id] + ([head[0]] if head else [])
                payload = {"type": stype, "key": key, "content": content}
                out.append(_node("semantic", parents, payload, rkey, with_id=False))
            return out

        self._append_keyed(memory, heads)

        # 5. Check the edit and answer.
        verification = _node(
            "verification",
            [resource.id],
            {"method": "post_mutation_read", "path": APP_KEY, "worker": w},
            with_id=True,
        )
        answer = _node(
            "answer",
            [verification["id"]],
            f"Worker {w}: {feature}_{w}_{s}() is in {APP_KEY} and verified (step {s}/{steps}).",
            with_id=False,
        )
        self._append([verification, answer])


def _worker_main(cfg: WorkerConfig, report: Any, go: Any) -> None:
    """Entry point of a worker process: connect, wait for the start signal, run."""
    from .store import connect_sync

    try:
        store = connect_sync(cfg.dsn, min_size=1, max_size=2, migrate_schema=False)
    except Error as exc:
        report.put(("error", cfg.index, f"could not connect: {exc.message}"))
        return
    try:
        with store:
            report.put(("ready", cfg.index))
            if not go.wait(READY_TIMEOUT):
                report.put(("error", cfg.index, "never got the start signal"))
                return
            worker = _Worker(store, cfg, report)
            for s in range(1, cfg.steps + 1):
                worker.step(s)
            report.put(("done", cfg.index, worker.nodes, worker.conflicts, worker.by_key))
    except Error as exc:
        report.put(("error", cfg.index, exc.message))
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # reported in one line; the parent prints no traceback
        report.put(("error", cfg.index, f"{type(exc).__name__}: {exc}"))


# --- the parent ------------------------------------------------------------------------


@dataclass(slots=True)
class _Status:
    step: int = 0
    nodes: int = 0
    conflicts: int = 0
    state: str = "starting"
    by_key: dict[str, int] = field(default_factory=dict)


def _progress_table(status: list[_Status], steps: int, elapsed: float) -> Table:
    total = sum(s.nodes for s in status)
    rate = total / elapsed if elapsed > 0 else 0.0
    t = Table(title=f"{len(status)} workers, one graph", show_footer=True)
    t.add_column("worker", footer="total")
    t.add_column("step", justify="right", footer="")
    t.add_column("nodes committed", justify="right", footer=str(total))
    t.add_column("conflicts retried", justify="right", footer=str(sum(s.conflicts for s in status)))
    t.add_column("", footer=f"{rate:,.0f} nodes/s, {elapsed:.1f} s")
    for i, s in enumerate(status, 1):
        t.add_row(str(i), f"{s.step}/{steps}", str(s.nodes), str(s.conflicts), s.state)
    return t


def _progress_line(status: list[_Status], elapsed: float) -> str:
    total = sum(s.nodes for s in status)
    rate = total / elapsed if elapsed > 0 else 0.0
    per = ", ".join(f"w{i} {s.nodes}/{s.conflicts}" for i, s in enumerate(status, 1))
    return (
        f"[{elapsed:5.1f}s] {total} nodes ({rate:,.0f}/s), "
        f"{sum(s.conflicts for s in status)} conflicts retried | nodes/conflicts: {per}"
    )


def _default_graph() -> str:
    return f"demo-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _short(value: Any, width: int = 60) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


class _Reports:
    """The workers' reports, read off their queue into ``status`` (one per worker),
    with what went wrong (``errors``) and which workers have ended (``finished``)."""

    def __init__(self, procs: list[Any], report: Any, status: list[_Status], steps: int) -> None:
        self.procs = procs
        self.report = report
        self.status = status
        self.steps = steps
        self.errors: list[str] = []
        self.finished: set[int] = set()

    def handle(self, msg: tuple[Any, ...]) -> None:
        kind, idx = msg[0], int(msg[1])
        st = self.status[idx - 1]
        if kind == "ready":
            st.state = "ready"
        elif kind == "progress":
            st.step, st.nodes, st.conflicts = int(msg[2]), int(msg[3]), int(msg[4])
            st.state = "running"
        elif kind == "done":
            st.nodes, st.conflicts, st.by_key = int(msg[2]), int(msg[3]), dict(msg[4])
            st.step, st.state = self.steps, "done"
            self.finished.add(idx)
        elif kind == "error":
            st.state = "failed"
            self.errors.append(f"worker {idx}: {msg[2]}")
            self.finished.add(idx)

    def drain(self, timeout: float) -> None:
        """Handle every report that arrives within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                msg = (
                    self.report.get(timeout=max(left, 0.0))
                    if left > 0
                    else self.report.get_nowait()
                )
            except queue_mod.Empty:
                return
            self.handle(msg)

    def check_dead(self) -> None:
        """Count a worker that exited without a last report as failed."""
        for i, p in enumerate(self.procs, 1):
            if i not in self.finished and not p.is_alive():
                self.drain(0.2)  # its last reports may still be in the pipe
                if i not in self.finished:
                    self.status[i - 1].state = "failed"
                    self.errors.append(f"worker {i}: exited with code {p.exitcode}")
                    self.finished.add(i)

    def follow(self) -> None:
        """One round: the reports of the next 0.1 s, then the workers that died."""
        self.drain(0.1)
        self.check_dead()

    def all_ready(self) -> bool:
        """Wait until every worker has connected (or failed); ``False`` when one failed
        or they did not all connect in time (said in ``errors``)."""
        deadline = time.monotonic() + READY_TIMEOUT
        n = len(self.procs)
        while sum(1 for s in self.status if s.state in ("ready", "failed")) < n:
            if time.monotonic() > deadline:
                self.errors.append("workers did not start in time")
                return False
            self.follow()
        return not self.errors

    def running(self) -> bool:
        return len(self.finished) < len(self.procs)


def _collect(
    procs: list[Any],
    report: Any,
    go: Any,
    status: list[_Status],
    steps: int,
    console: Console,
) -> tuple[float, list[str]]:
    """Start the workers together, follow their reports until they all end."""
    reports = _Reports(procs, report, status, steps)
    # Wait until every worker has connected, so they really start together.
    if not reports.all_ready():
        return 0.0, reports.errors
    go.set()
    t0 = time.monotonic()

    def elapsed() -> float:
        return time.monotonic() - t0

    if console.is_terminal:
        _follow_live(reports, console, elapsed)
    else:
        _follow_in_lines(reports, console, elapsed)
    return elapsed(), reports.errors


def _follow_live(reports: _Reports, console: Console, elapsed: Callable[[], float]) -> None:
    """Follow the workers to their end in a table redrawn in place (a terminal)."""
    status, steps = reports.status, reports.steps
    with Live(_progress_table(status, steps, 0.0), console=console, refresh_per_second=8) as live:
        while reports.running():
            reports.follow()
            live.update(_progress_table(status, steps, elapsed()))
        live.update(_progress_table(status, steps, elapsed()))


def _follow_in_lines(reports: _Reports, console: Console, elapsed: Callable[[], float]) -> None:
    """Follow the workers to their end, a progress line a second, then the table (not a
    terminal: a log keeps every line)."""
    next_line = 1.0
    while reports.running():
        reports.follow()
        if elapsed() >= next_line:
            console.print(_progress_line(reports.status, elapsed()), markup=False, highlight=False)
            next_line += 1.0
    console.print(_progress_table(reports.status, reports.steps, elapsed()))


def _print_sql(console: Console, title: str, query: LiteralString, conn: Connection) -> None:
    """Show a query's text as it can be pasted into psql, run it, show its rows."""
    console.print(f"\n[bold]{title}[/bold]")
    console.print(query, markup=False, highlight=False, soft_wrap=True)
    rows = conn.fetch(query)
    t = Table(show_edge=True)
    for c in rows[0].keys() if rows else ():
        t.add_column(c)
    for r in rows:
        t.add_row(*("" if v is None else str(v) for v in r))
    console.print(t)
    console.print(f"({len(rows)} row{'s' if len(rows) != 1 else ''})", highlight=False)


def _side_by_side(then: Projection, now: Projection, shown_workers: int) -> Table:
    def app(p: Projection) -> str:
        r = p.resources.get(APP_KEY)
        if r is None:
            return "(no version yet)"
        by = r.payload.get("worker") if isinstance(r.payload, dict) else "?"
        return f"version {r.version} (seq {r.sequence}, by worker {by})"

    def mem(p: Projection, key: str) -> str:
        for m in p.memory:
            if m.type == SHARED_MEMORY[0] and m.key == key:
                c = m.content
                if isinstance(c, dict) and "step" in c:  # a worker's own progress key
                    return f"v{m.version}: step {c['step']}/{c.get('of')}, {c.get('lastEdit')}()"
                return f"v{m.version}: {_short(c, 60)}"
        return "(not written yet)"

    def frontier(p: Projection) -> str:
        n = len(p.frontier)
        heads = ", ".join(f"{f.kind} #{f.sequence}" for f in p.frontier[:3])
        return f"{n} head{'s' if n != 1 else ''}: {heads}{', …' if n > 3 else ''}"

    def counts(p: Projection) -> str:
        c = p.counts
        return ", ".join(
            _plural(c.get(kind, 0), word)
            for kind, word in (("goal", "goal"), ("answer", "answer"), ("semantic", "memory write"))
        )

    t = Table(title="point-in-time read: the projection halfway, and now")
    t.add_column("")
    t.add_column(f"as of seq {then.length}")
    t.add_column(f"now (seq {now.length})")
    t.add_row("frontier", frontier(then), frontier(now))
    t.add_row(APP_KEY, app(then), app(now))
    t.add_row(f"memory {SHARED_MEMORY[1]}", mem(then, SHARED_MEMORY[1]), mem(now, SHARED_MEMORY[1]))
    for w in range(1, shown_workers + 1):
        key = f"worker-{w}.progress"
        t.add_row(f"memory {key}", mem(then, key), mem(now, key))
    t.add_row("nodes", counts(then), counts(now))
    t.add_row(
        "latest answer",
        f"#{then.latest_answer.sequence} {_short(then.latest_answer.payload, 38)}"
        if then.latest_answer
        else "(none yet)",
        f"#{now.latest_answer.sequence} {_short(now.latest_answer.payload, 38)}"
        if now.latest_answer
        else "(none yet)",
    )
    return t


def run_demo(
    dsn_arg: str | None,
    workers: int,
    steps: int,
    graph: str | None,
    console: Console | None = None,
) -> int:
    """Run the demo; returns the exit code. Raises :class:`cwstore.Error` on failure.

    Parameters
    ----------
    dsn_arg:
        A DSN, or None for ``CWSTORE_DSN`` / the embedded server.
    workers, steps:
        How many worker processes, and how many steps each.
    graph:
        The graph to write (must hold no nodes); None for a new ``demo-…`` name.
    """
    from ._dsn import resolve_dsn

    if not 1 <= workers <= MAX_WORKERS:
        raise InputError(f"--workers must be between 1 and {MAX_WORKERS}, got {workers}")
    if steps < 1:
        raise InputError(f"--steps must be at least 1, got {steps}")
    if graph is not None and not graph:
        raise InputError("--graph must not be empty")
    # soft_wrap: long lines (SQL, commands) stay whole, so they can be copied.
    out = console or Console(soft_wrap=True, width=None if sys.stdout.isatty() else 120)
    embedded = not (dsn_arg or os.environ.get("CWSTORE_DSN"))
    if embedded:
        out.print("starting (or reusing) the embedded PostgreSQL…", highlight=False)
    dsn = resolve_dsn(dsn_arg, embedded=None)
    graph = graph or _default_graph()
    _start_graph(dsn, graph)
    out.print(
        f"graph [bold]{graph}[/bold]: {workers} worker processes x {steps} steps, "
        f"all editing {APP_KEY} and the shared memory key "
        f"semantic:{SHARED_MEMORY[0]}:{SHARED_MEMORY[1]}",
        highlight=False,
    )
    _run_workers(dsn, graph, workers, steps, out)
    half = _show_reads(dsn, graph, workers, out)
    _print_next_steps(dsn, graph, half, embedded, out)
    return 0


def _start_graph(dsn: str, graph: str) -> None:
    """Make the demo's graph, which must hold no nodes: its system node, declared as the
    frontier (the first system node does not join it by the fold), so the first goal
    (parents = the frontier) builds on it."""
    from .store import connect_sync

    with connect_sync(dsn, min_size=1, max_size=2, migrate_schema=True) as store:
        try:
            length = store.length(graph)
        except UnknownGraphError:
            length = 0
        if length:
            raise InputError(
                f"graph {graph!r} already holds {length} nodes; the demo needs a new graph "
                "(leave out --graph for a fresh name)"
            )
        system = _node("system", [], _SYSTEM_PROMPT, with_id=True)
        store.append(graph, [system], frontier=[system["id"]])


def _run_workers(dsn: str, graph: str, workers: int, steps: int, out: Console) -> None:
    """Run the worker processes to the end, live on ``out``, then say what they wrote;
    raises :class:`cwstore.Error` when any failed (no process is left behind)."""
    ctx = multiprocessing.get_context("spawn")
    report = ctx.Queue()
    go = ctx.Event()
    procs = [
        ctx.Process(
            target=_worker_main,
            args=(WorkerConfig(dsn, graph, i, steps), report, go),
            name=f"cwstore-demo-worker-{i}",
            daemon=True,
        )
        for i in range(1, workers + 1)
    ]
    status = [_Status() for _ in procs]
    try:
        for p in procs:
            p.start()
        elapsed, errors = _collect(procs, report, go, status, steps, out)
        for p in procs:
            p.join(timeout=10)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        report.close()
    if errors:
        for e in errors:
            print(f"cwstore demo: {e}", file=sys.stderr)
        raise Error(f"{len(errors)} worker{'s' if len(errors) != 1 else ''} failed")

    total = sum(s.nodes for s in status)
    conflicts = sum(s.conflicts for s in status)
    by_key: dict[str, int] = {}
    for s in status:
        for k, v in s.by_key.items():
            by_key[k] = by_key.get(k, 0) + v
    keys = ", ".join(f"{k}: {v}" for k, v in sorted(by_key.items())) or "none"
    out.print(
        f"\n{total} nodes committed by {workers} workers in {elapsed:.1f} s "
        f"({total / elapsed if elapsed else 0:,.0f} nodes/s); "
        f"{conflicts} chain conflicts retried ({keys})",
        highlight=False,
    )


def _show_reads(dsn: str, graph: str, workers: int, out: Console) -> int:
    """The latest answer, (a) its causal history in SQL, (b) a point-in-time read at
    half the graph beside now; returns that half-way sequence."""
    from .drivers.psycopg import open_connection, quote_literal, statement
    from .store import connect_sync

    with connect_sync(dsn, min_size=1, max_size=1, migrate_schema=False) as store:
        now = store.project(graph)
        half = max(1, now.length // 2)
        then = store.project(graph, as_of=half)
    answer = now.latest_answer
    if answer is None:  # cannot happen: every step ends with an answer
        raise Error(f"graph {graph!r} has no answer")
    out.print(
        f"graph {graph}: {now.length} nodes; latest answer "
        f"#{answer.sequence} {answer.id}: {_short(answer.payload, 70)}",
        highlight=False,
    )

    # (a) Causal history in SQL.
    with open_connection(dsn) as conn:
        args = {"graph": graph, "answer": answer.id}
        q1 = statement(_Q_BY_WORKER, values=args)
        q2 = statement(_Q_NEAREST, values=args)
        _print_sql(
            out,
            "(a) Whose tool results did the latest answer depend on? "
            "(cwstore.ancestors, then node_view; paste into psql)",
            q1,
            conn,
        )
        _print_sql(out, "... and the nearest of them:", q2, conn)

    # (b) A point-in-time read.
    out.print()
    out.print(_side_by_side(then, now, min(workers, 4)))
    out.print(
        f"the same read: cwstore project --graph {shlex.quote(graph)} --as-of {half}\n"
        f"memory in SQL: SELECT type, key, version, content "
        f"FROM cwstore.semantic_at({quote_literal(graph)}, {half});",
        markup=False,
        highlight=False,
    )
    return half


def _print_next_steps(dsn: str, graph: str, half: int, embedded: bool, out: Console) -> None:
    """(c) The commands to explore the graph further: psql, the CLI, the view."""
    shown, hidden = without_password(dsn)
    dsn_flag = "" if embedded or os.environ.get("CWSTORE_DSN") else f" --dsn {shlex.quote(shown)}"
    g = shlex.quote(graph)
    out.print("\n[bold](c) Explore it yourself[/bold]")
    out.print(f"psql {shlex.quote(shown)}", markup=False, highlight=False)
    if hidden:
        out.print("(password left out: psql asks for it, or set PGPASSWORD)", highlight=False)
    for line in (
        f"cwstore project --graph {g}{dsn_flag}",
        f"cwstore history --graph {g} --key {APP_KEY}{dsn_flag}",
        f"cwstore export --graph {g} --as-of {half}{dsn_flag}",
    ):
        out.print(line, markup=False, highlight=False)
    if embedded:
        out.print(
            "(the embedded server keeps running; stop it with: cwstore server stop)",
            highlight=False,
        )
    out.print("\n[bold]See its history in the browser[/bold] (needs the 'view' extra)")
    out.print(f"cwstore view --graph {g}{dsn_flag}", markup=False, highlight=False)
