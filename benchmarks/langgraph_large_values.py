"""Peak memory of a LangGraph put and read of one large channel value, client and backend.

For each shape (``bytes``, ``str``, ``dict`` of many small values) and size (``--mb``)
it puts one checkpoint whose channel ``big`` holds the value through a
:class:`~cwstore.langgraph.CwstoreSaver` on a one-connection store, then reads it back
with a saver that remembers nothing. Client: :mod:`tracemalloc`'s peak during each
call (the value built before). Backend: how much the peak resident set size of the
store's one backend (``VmHWM`` of ``/proc/<pid>/status``, less the shared memory it
touched, ``RssShmem``) grew during the call, as ``benchmarks/append_memory.py``
measures an append; each call in a new backend that did a put and read of a
value of two parts first. Seconds are with tracemalloc on (several times slower for a
dict). The server must run on this machine, the schema set up.

    python benchmarks/langgraph_large_values.py --dsn postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

try:
    import cwstore
except ImportError:  # run from a checkout without installing
    sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
    import cwstore

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from cwstore.langgraph import CwstoreSaver

MB = 1_000_000


def _value(shape: str, size: int) -> Any:
    if shape == "bytes":
        return os.urandom(size)
    if shape == "str":
        return "é" + "x" * (size - 2)
    return {f"k{i}": {"n": i, "s": "v" * 20, "f": [i, 0.5]} for i in range(size // 55)}


def _size(value: Any) -> int:
    if isinstance(value, bytes):
        return len(value)
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "RssShmem"):
            out[key] = int(value.split()[0]) * 1024
    return out


def _growth(before: dict[str, int], after: dict[str, int]) -> int:
    return (after["VmHWM"] - before["VmHWM"]) - (after["RssShmem"] - before["RssShmem"])


def _measure(pid: int, call: Callable[[], Any]) -> tuple[int, int, float]:
    """Client peak, backend growth and seconds of ``call``."""
    gc.collect()
    before = _status(pid)
    tracemalloc.start()
    t = time.perf_counter()
    try:
        call()
        took = time.perf_counter() - t
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, _growth(before, _status(pid)), took


@contextmanager
def _store(dsn: str) -> Iterator[tuple[cwstore.Store, int]]:
    """A store of one connection, a fresh backend (its pid) that did a small put and
    read of a large value already."""
    tag = f"cwlgbig_{uuid.uuid4().hex[:8]}"
    params = conninfo_to_dict(dsn)
    params["application_name"] = tag
    with cwstore.connect_sync(make_conninfo(**params), min_size=1, max_size=1) as store:
        with psycopg.connect(dsn, autocommit=True) as c:
            row = c.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (tag,)
            ).fetchone()
        assert row is not None
        warm = CwstoreSaver(store)
        warm.get_tuple(_put(warm, f"{tag}-warm", _value("bytes", 1_200_000)))
        yield store, int(row[0])


def _put(saver: CwstoreSaver, thread: str, value: Any) -> Any:
    checkpoint: Any = {
        **empty_checkpoint(),
        "id": str(uuid6(clock_seq=-1)),
        "channel_values": {"big": value},
        "channel_versions": {"big": 1},
    }
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    return saver.put(config, checkpoint, {"step": 1}, {"big": 1})


def _one(
    dsn: str, shape: str, size: int
) -> tuple[int, tuple[int, int, float], tuple[int, int, float]]:
    """The value's size, and what its put and its read took (see :func:`_measure`)."""
    value = _value(shape, size)
    with _store(dsn) as (store, pid):
        saver = CwstoreSaver(store)
        stored: list[Any] = []
        put = _measure(pid, lambda: stored.append(_put(saver, uuid.uuid4().hex, value)))
    with _store(dsn) as (store, pid):
        get = _measure(pid, lambda: CwstoreSaver(store).get_tuple(stored[0]))
    return _size(value), put, get


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True, help="a server on this machine, schema set up")
    parser.add_argument("--mb", nargs="*", type=int, default=[10, 50])
    parser.add_argument("--shapes", nargs="*", default=["bytes", "str", "dict"])
    args = parser.parse_args(argv)
    print(
        f"{'shape':<6} {'MB':>4} {'put client':>12} {'put backend':>12} "
        f"{'get client':>12} {'get backend':>12} {'put s':>6} {'get s':>6}"
    )
    for mb in args.mb:
        for shape in args.shapes:
            size, put, get = _one(args.dsn, shape, mb * MB)
            cells = [f"{m / size:10.2f}x" for m in (put[0], put[1], get[0], get[1])]
            print(
                f"{shape:<6} {size / MB:>4.0f} "
                + " ".join(f"{c:>12}" for c in cells)
                + f" {put[2]:6.1f} {get[2]:6.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
