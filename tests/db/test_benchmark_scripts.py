"""The benchmark script that calls the write door's internal functions still runs.

``benchmarks/write_door_floor.py`` prices ``append_v1`` against copies of cwstore's
tables and calls the door's internal SQL functions (``_node_problem``,
``_batch_fields``, ``_writer_life``) by their signatures: a change to one of them
breaks the script, not the suite, unless the script runs here (8fb9541 changed
``_batch_fields``' arguments, and the script failed until 2026-12-07). A run of a few
calls, the script's own check of every row it wrote included.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

ROWS = [
    "baseline",
    "node row",
    "+ edge, frontier",
    "+ node checks",
    "+ batch checks",
    "+ edge, frontier by a statement trigger",
    "+ edge, frontier by a row trigger",
    "append_v1",
    "one statement (prototype)",
]


def test_write_door_floor_runs_and_checks_what_it_wrote(pg_admin_dsn: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "write_door_floor.py"),
            "--dsn",
            pg_admin_dsn,
            "--rounds",
            "1",
            "--calls",
            "3",
            "--warmup",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    measured = [
        line.split(" | ")[0].removeprefix("| ")
        for line in done.stdout.splitlines()
        if line.startswith("| ") and " µs (" in line
    ]
    assert measured == ROWS
