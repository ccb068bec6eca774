"""Retention sees a LangGraph thread as one unit: every namespace of a thread (one graph
each) is in the thread's retention group, so an old subgraph namespace of a thread used
a moment ago is kept, and a thread idle as a whole goes whole, through the SQL door
(``erase_idle_v1``), the Python client (``store.erase_idle``) and the CLI (``cwstore
retention``). On main before retention groups, the old subgraph namespace was erased.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage
from support.langgraph import put_messages

import cwstore
from cwstore.langgraph import CwstoreSaver
from cwstore.langgraph._mapping import graph_name

REPO = Path(__file__).resolve().parents[2]
IDLE = {"sql": timedelta(seconds=2), "python": timedelta(seconds=2), "cli": timedelta(seconds=6)}
"""Retention's idle time through each door; a graph is made idle by waiting a little
longer. The erase must begin within it of the thread's last write, so the CLI, which
starts a Python process first, gets more (on a loaded Citus run 1 s was not enough)."""


def _wait_idle(door: str) -> None:
    time.sleep(IDLE[door].total_seconds() + 0.2)


def _names(dsn: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as c:
        return {str(r[0]) for r in c.execute("SELECT name FROM cwstore.graphs").fetchall()}


def _thread(saver: CwstoreSaver, thread: str, ns: str) -> None:
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
    put_messages(saver, config, [HumanMessage(content=f"{thread}/{ns}", id=thread + ns)], 1)


def _graphs(thread: str) -> set[str]:
    return {graph_name(thread, ""), graph_name(thread, "child:1")}


def _erase_idle(door: str, dsn: str, store: cwstore.Store) -> set[str]:
    """Erase what has been idle for IDLE through ``door``; the graphs erased."""
    before = _names(dsn)
    if door == "sql":
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SELECT cwstore.erase_idle_v1(%s, NULL, 'retention', 100)", (IDLE[door],))
    elif door == "python":
        store.erase_idle(IDLE[door])
    else:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("CWSTORE_DSN", None)
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "cwstore",
                "retention",
                "--idle",
                f"{IDLE[door].seconds}s",
                "--yes",
                "--dsn",
                dsn,
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    return before - _names(dsn)


@pytest.mark.parametrize("door", ["sql", "python", "cli"])
def test_a_thread_is_kept_while_any_namespace_is_fresh_then_goes_whole(
    db_dsn: str, door: str
) -> None:
    busy, idle = (f"ret-{door}-{uuid.uuid4().hex[:8]}" for _ in range(2))
    with cwstore.connect_sync(db_dsn) as store:
        saver = CwstoreSaver(store)
        _thread(saver, idle, "")
        _thread(saver, idle, "child:1")
        _thread(saver, busy, "child:1")  # the thread's old subgraph namespace
        _wait_idle(door)
        _thread(saver, busy, "")  # the thread used a moment ago
        written = time.monotonic()
        erased = _erase_idle(door, db_dsn, store)
        took = time.monotonic() - written
        assert _graphs(idle) <= erased
        assert not (_graphs(busy) & erased), (
            f"an old namespace of a fresh thread was erased ({took:.1f} s after its write)"
        )
        _wait_idle(door)
        assert _graphs(busy) <= _erase_idle(door, db_dsn, store)
