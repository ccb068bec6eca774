"""Running ``cwstore view`` as the user runs it, in a process of its own."""

from __future__ import annotations

import contextlib
import json
import re
import select
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def view_server(dsn: str, *args: str) -> Iterator[str]:
    """Run ``cwstore view --dsn DSN --port 0 --no-browser ARGS``; yield its base URL."""
    cmd = [sys.executable, "-m", "cwstore", "view", "--dsn", dsn, "--port", "0", "--no-browser"]
    proc = subprocess.Popen(
        [*cmd, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline() if ready else ""
        m = re.search(r"(http://\S+?/)", line)
        if m is None:
            proc.kill()
            _, err = proc.communicate(timeout=10)
            raise AssertionError(f"cwstore view did not start: {line!r} {err!r}")
        yield m.group(1)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 15
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if proc.poll() is None:
                proc.kill()
        proc.wait()


def sse_events(url: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The (event, data) pairs of the text/event-stream at ``url``, as they arrive."""
    with urllib.request.urlopen(url, timeout=60) as resp:
        event, data = "message", ""
        for raw in resp:
            line = raw.decode("utf-8").rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
            elif line == "" and data:
                yield event, json.loads(data)
                event, data = "message", ""
