"""Peak resident set size growth of one call, measured in a fresh process.

Memory is the process's peak resident set size (``VmHWM`` in ``/proc/self/status``,
reset before the call by writing ``5`` to ``/proc/self/clear_refs``; where that is not
allowed, ``VmRSS`` sampled every 2 ms), after the C heap's free pages are handed back
(``malloc_trim``), so memory reused from an earlier free counts.

A long test run leaves the C allocator in a state a user's process is not in (glibc
raises the size from which it maps a block after large blocks are freed, and a large
string then grows inside a fragmented heap): the same import grew the test process by
11x its text size alone and by 16.5x at the end of the suite. :func:`import_in_child`
therefore runs the call in a new interpreter, which measures the call and not the run's
history. Run as ``python -m support.peak_rss CLIENT DSN GRAPH FORM`` with the JSON
text on standard input.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cwstore
from cwstore import StateLike


def _release_free_heap() -> None:
    """Return the C heap's free pages to the kernel (glibc), so reusing them counts."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/self/status")


class PeakRSS:
    """Peak resident set size growth (bytes) of this process inside a ``with`` block."""

    def __init__(self) -> None:
        self.growth = 0
        self.method = ""

    @contextlib.contextmanager
    def measure(self) -> Iterator[PeakRSS]:
        _release_free_heap()
        base = _status_kb("VmRSS")
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to VmRSS
            self.method = "VmHWM"
        except OSError:
            self.method = "VmRSS sampled"
        peak = [base]
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.002):
                peak[0] = max(peak[0], _status_kb("VmRSS"))

        sampler = None
        if self.method != "VmHWM":
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
        try:
            yield self
        finally:
            stop.set()
            if sampler is not None:
                sampler.join()
            top = _status_kb("VmHWM") if self.method == "VmHWM" else peak[0]
            self.growth = max(0, top - base) * 1024


@dataclass(frozen=True)
class ImportMeasure:
    """What :func:`import_in_child` saw: the import's count and the peak RSS growth."""

    count: int
    growth: int
    method: str


def import_in_child(client: str, dsn: str, graph: str, text: str, form: str) -> ImportMeasure:
    """Import ``text`` into ``graph`` with a new ``client`` ("async" or "sync") in a new
    interpreter and measure that call: ``form`` "text" hands the JSON text over as is,
    "objects" parses it first (outside the measured block), as the runtime hands a
    parsed document over."""
    tests_dir = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests_dir), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-m", "support.peak_rss", client, dsn, graph, form],
        input=text.encode(),
        capture_output=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"the measuring process failed:\n{done.stderr.decode()}")
    return ImportMeasure(**json.loads(done.stdout))


async def _measure_import(
    client: str, dsn: str, graph: str, text: str, form: str
) -> dict[str, object]:
    document: StateLike = json.loads(text) if form == "objects" else text
    if client == "async":
        store = await cwstore.connect(dsn, min_size=1, max_size=1, migrate_schema=False)
        try:
            with PeakRSS().measure() as mem:
                count = await store.import_state(graph, document)
        finally:
            await store.close()
    else:
        sync_store = cwstore.connect_sync(dsn, min_size=1, max_size=1, migrate_schema=False)
        try:
            with PeakRSS().measure() as mem:
                count = sync_store.import_state(graph, document)
        finally:
            sync_store.close()
    return {"count": count, "growth": mem.growth, "method": mem.method}


def main(argv: list[str]) -> None:
    client, dsn, graph, form = argv
    text = sys.stdin.buffer.read().decode()
    print(json.dumps(asyncio.run(_measure_import(client, dsn, graph, text, form))))


if __name__ == "__main__":
    main(sys.argv[1:])
