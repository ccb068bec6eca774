"""Running ``cwstore view`` as the user runs it, in a process of its own."""

from __future__ import annotations

import contextlib
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator


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
