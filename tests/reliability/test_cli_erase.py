"""``cwstore erase`` and ``cwstore retention`` as a user runs them (``python -m cwstore``).

On a terminal they ask first and erase only on ``y``; without one they refuse unless
``--yes`` and erase nothing; ``retention --dry-run`` lists and erases nothing; a
``cwstore tail`` of a graph that gets erased ends with a message, never a traceback.
"""

from __future__ import annotations

import json
import os
import pty
import queue
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import IO, Any

import cwstore

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("CWSTORE_DSN", None)
    return env


def cli(*args: str, answer: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run the CLI; with ``answer``, on a terminal (a pty) that types it."""
    cmd = [sys.executable, "-m", "cwstore", *args]
    if answer is None:
        return subprocess.run(
            cmd, stdin=subprocess.DEVNULL, capture_output=True, env=_env(), timeout=300
        )
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            cmd, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()
        )
        os.close(slave)
        slave = -1
        os.write(master, answer)
        out, err = proc.communicate(timeout=300)
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _graph(dsn: str, tenant: str | None = None, nodes: int = 2) -> str:
    name = f"cli-{uuid.uuid4().hex[:12]}"
    with cwstore.connect_sync(dsn, tenant=tenant) as store:
        for i in range(nodes):
            store.append(name, [{"kind": "goal", "parents": [], "payload": i}])
    return name


def _exists(dsn: str, graph: str) -> bool:
    with cwstore.connect_sync(dsn) as store:
        return graph in {g.name for g in store.graphs()}


def _lines(out: bytes) -> list[Any]:
    return [json.loads(line) for line in out.decode().splitlines() if line.strip()]


def test_without_a_terminal_it_refuses_and_erases_nothing(db_dsn: str) -> None:
    g = _graph(db_dsn)
    run = cli("erase", "--graph", g, "--dsn", db_dsn)
    err = run.stderr.decode()
    assert run.returncode == 2, err
    assert "--yes" in err and "Traceback" not in err
    assert _exists(db_dsn, g)


def test_yes_erases_without_asking(db_dsn: str) -> None:
    g = _graph(db_dsn, nodes=3)
    run = cli("erase", "--graph", g, "--reason", "asked", "--yes", "--dsn", db_dsn)
    assert run.returncode == 0, run.stderr.decode()
    assert _lines(run.stdout) == [{"graph": g, "nodes": 3}]
    assert not _exists(db_dsn, g)


def test_on_a_terminal_it_asks_and_only_yes_erases(db_dsn: str) -> None:
    g = _graph(db_dsn)
    run = cli("erase", "--graph", g, "--dsn", db_dsn, answer=b"n\n")
    err = run.stderr.decode()
    assert run.returncode == 1, err
    assert "2 nodes" in err and "nothing erased" in err
    assert _exists(db_dsn, g)
    run = cli("erase", "--graph", g, "--dsn", db_dsn, answer=b"y\n")
    assert run.returncode == 0, run.stderr.decode()
    assert _lines(run.stdout) == [{"graph": g, "nodes": 2}]
    assert not _exists(db_dsn, g)


def test_erase_of_an_unknown_graph_is_a_message(db_dsn: str) -> None:
    run = cli("erase", "--graph", "no-such-graph", "--yes", "--dsn", db_dsn)
    err = run.stderr.decode()
    assert run.returncode == 1 and "no-such-graph" in err and "Traceback" not in err


def test_erase_a_tenant(db_dsn: str) -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    names = sorted(_graph(db_dsn, tenant=tenant, nodes=1) for _ in range(3))
    run = cli("erase", "--tenant", tenant, "--batch", "2", "--yes", "--dsn", db_dsn)
    assert run.returncode == 0, run.stderr.decode()
    assert sorted(r["graph"] for r in _lines(run.stdout)) == names
    assert not any(_exists(db_dsn, g) for g in names)


def test_retention_dry_run_lists_and_erases_nothing_then_yes_erases(db_dsn: str) -> None:
    tenant = f"r-{uuid.uuid4().hex[:8]}"
    names = sorted(_graph(db_dsn, tenant=tenant, nodes=1) for _ in range(2))
    time.sleep(1.2)
    args = ("retention", "--idle", "1s", "--tenant", tenant, "--dsn", db_dsn)
    run = cli(*args, "--dry-run")
    assert run.returncode == 0, run.stderr.decode()
    listed = _lines(run.stdout)
    assert [r["graph"] for r in listed] == names
    assert all(r["tenant"] == tenant and r["length"] == 1 for r in listed)
    assert all(_exists(db_dsn, g) for g in names)

    run = cli(*args)
    assert run.returncode == 2 and "--yes" in run.stderr.decode()
    assert all(_exists(db_dsn, g) for g in names)

    run = cli(*args, answer=b"\n")
    assert run.returncode == 1 and "2 graphs" in run.stderr.decode()
    assert all(_exists(db_dsn, g) for g in names)

    run = cli(*args, "--batch", "1", "--yes")
    assert run.returncode == 0, run.stderr.decode()
    assert sorted(r["graph"] for r in _lines(run.stdout)) == names
    assert not any(_exists(db_dsn, g) for g in names)


def _readline(stream: IO[bytes], timeout: float = 60) -> bytes:
    """One line of ``stream``, or an AssertionError after ``timeout`` seconds."""
    box: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: box.put(stream.readline()), daemon=True).start()
    try:
        return box.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"no line within {timeout}s") from None


def test_tail_of_a_graph_that_gets_erased_ends_with_a_message(db_dsn: str) -> None:
    g = _graph(db_dsn, nodes=2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cwstore", "tail", "--graph", g, "--dsn", db_dsn],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    try:
        assert proc.stdout is not None
        seen = [json.loads(_readline(proc.stdout)) for _ in range(2)]
        assert [n["sequence"] for n in seen] == [1, 2]
        with cwstore.connect_sync(db_dsn) as store:
            store.erase(g)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = err.decode()
    assert proc.returncode == 1, text
    assert "erased" in text and "Traceback" not in text
    assert out == b""
