"""``cwstore validate``: in process (``cwstore.cli.main``) and as ``python -m cwstore``.

Exit codes: 0 valid, 1 refused (one line per violation on stderr: code, node index,
id, path, message), 2 input that is not a document at all or a bad option. Whatever
the input, the answer is a message, never a traceback.
"""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import EXAMPLE_FILE
from support.documents import example_turn, generate_session, reseal

from cwstore import _jsontext
from cwstore.cli import main

REPO = Path(__file__).resolve().parents[2]
# The runtime's own example document, copied into the repository byte for byte.
SUMMARY = "valid: AgentState v1, 16 nodes, frontier 1, vocabulary dynamic"

Expected = list[tuple[str, int | None, str | None, str]]
"""Violations expected, as (code, node index, node id, JSON path)."""


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUTF8": "1"}
    env.pop("CWSTORE_DSN", None)
    return env


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cwstore", *args],
        input=stdin,
        capture_output=True,
        encoding="utf-8",
        errors="replace",
        env=_env(),
        cwd=REPO,
        timeout=120,
        check=False,
    )


def write(tmp_path: Path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return str(path)


@pytest.fixture
def example_path(tmp_path: Path) -> str:
    # As the runtime saves it: JSON.stringify(state, null, 2) plus a newline.
    text = json.dumps(example_turn(), indent=2, ensure_ascii=False) + "\n"
    assert text == EXAMPLE_FILE.read_text(encoding="utf-8")
    return write(tmp_path, "example.json", text)


def broken_example() -> tuple[dict[str, Any], Expected]:
    """The example with three breaks, and the (code, index, id, path) expected."""
    doc = example_turn()
    doc["nodes"][4]["createdAt"] = "yesterday"
    doc["nodes"][7]["payload"]["content"] = "edited"  # id no longer matches
    doc["frontier"].append("cw_000000000000000000000000")
    expected = [
        ("created_at", 4, doc["nodes"][4]["id"], "$.nodes[4].createdAt"),
        ("identity", 7, doc["nodes"][7]["id"], "$.nodes[7].id"),
        ("frontier_reference", None, "cw_000000000000000000000000", "$.frontier[1]"),
    ]
    return doc, expected


def assert_violation_lines(stderr: str, expected: Expected) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr
    assert len(lines) == len(expected) + 1, lines
    for line, (code, index, node_id, path) in zip(lines, expected, strict=False):
        fields = line.split("\t")
        assert fields[0] == code
        assert fields[1] == f"node={'-' if index is None else index}"
        assert fields[2] == f"id={node_id or '-'}"
        assert fields[3] == f"path={path}"
        assert fields[4].strip()  # a message
    assert lines[-1] == f"refused: {len(expected)} violation{'s' if len(expected) != 1 else ''}"


# -- valid documents -------------------------------------------------------------------------


def test_example_in_process(example_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", example_path]) == 0
    out, err = capsys.readouterr()
    assert out == SUMMARY + "\n"
    assert err == ""


def test_example_subprocess(example_path: str) -> None:
    run = run_cli("validate", example_path)
    assert (run.returncode, run.stdout, run.stderr) == (0, SUMMARY + "\n", "")


def test_example_json(example_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--json", example_path]) == 0
    out, _ = capsys.readouterr()
    assert json.loads(out) == {"valid": True, "nodes": 16, "frontier": 1}
    run = run_cli("validate", "--json", example_path)
    assert run.returncode == 0
    assert json.loads(run.stdout) == {"valid": True, "nodes": 16, "frontier": 1}


def test_generated_session_compact_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = generate_session(3, 4, odd_payloads=True)
    path = write(tmp_path, "s.json", _jsontext.dumps(doc))
    assert main(["validate", path]) == 0
    out, _ = capsys.readouterr()
    n, f = len(doc["nodes"]), len(doc["frontier"])
    assert out == f"valid: AgentState v1, {n} nodes, frontier {f}, vocabulary dynamic\n"


def test_stdin(example_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = Path(example_path).read_bytes()
    run = run_cli("validate", "-", stdin=data.decode("utf-8"))
    assert (run.returncode, run.stdout) == (0, SUMMARY + "\n")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["validate", "-"]) == 0


def test_stdin_broken(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    doc, expected = broken_example()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(_jsontext.dumps(doc).encode())))
    assert main(["validate", "-"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert_violation_lines(err, expected)


# -- refused documents -----------------------------------------------------------------------


def test_broken_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc, expected = broken_example()
    path = write(tmp_path, "broken.json", json.dumps(doc, indent=2))
    assert main(["validate", path]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert_violation_lines(err, expected)
    run = run_cli("validate", path)
    assert run.returncode == 1 and run.stdout == ""
    assert_violation_lines(run.stderr, expected)


def test_broken_document_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc, expected = broken_example()
    path = write(tmp_path, "broken.json", _jsontext.dumps(doc))
    assert main(["validate", "--json", path]) == 1
    out, err = capsys.readouterr()
    verdict = json.loads(out)
    assert verdict["valid"] is False
    got = [(v["code"], v["index"], v["node_id"], v["path"]) for v in verdict["violations"]]
    assert got == expected
    assert all(v["message"] for v in verdict["violations"])
    assert_violation_lines(err, expected)


def test_fixed_vocabulary_refuses_a_dynamic_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = example_turn()
    node = doc["nodes"][15]
    node["payload"]["type"] = "decision"
    node["resourceKey"] = "semantic:decision:code-style"
    reseal(doc)
    path = write(tmp_path, "dyn.json", _jsontext.dumps(doc))
    assert main(["validate", path]) == 0  # dynamic by default
    out, _ = capsys.readouterr()
    assert out.endswith("vocabulary dynamic\n")
    assert main(["validate", "--fixed-vocabulary", path]) == 1
    out, err = capsys.readouterr()
    assert_violation_lines(
        err, [("semantic_type", 15, doc["nodes"][15]["id"], "$.nodes[15].payload.type")]
    )
    assert "decision" in err
    run = run_cli("validate", "--fixed-vocabulary", path)
    assert run.returncode == 1 and "semantic_type" in run.stderr


def test_fixed_vocabulary_accepts_the_builtin_types(
    example_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", "--fixed-vocabulary", example_path]) == 0
    out, _ = capsys.readouterr()
    assert out == SUMMARY.replace("dynamic", "fixed") + "\n"


# -- --node-types ------------------------------------------------------------------------------

NODE_TYPES = [
    {"name": "memory", "description": "A durable fact."},
    {"name": "artifact", "description": "A durable output."},
    {"name": "preference", "description": "A stable user choice."},
]


def test_node_types_valid(
    tmp_path: Path, example_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    types = write(tmp_path, "types.json", json.dumps(NODE_TYPES))
    assert main(["validate", "--node-types", types, example_path]) == 0
    out, _ = capsys.readouterr()
    assert out.endswith("vocabulary fixed\n")
    narrow = write(tmp_path, "narrow.json", json.dumps(NODE_TYPES[:2]))
    assert main(["validate", "--node-types", narrow, example_path]) == 1
    _, err = capsys.readouterr()
    assert err.startswith("semantic_type\tnode=15\t")
    run = run_cli("validate", "--node-types", narrow, example_path)
    assert run.returncode == 1 and run.stderr.startswith("semantic_type\tnode=15\t")


BAD_NODE_TYPES: list[tuple[str, str, str]] = [
    ("object", json.dumps({"name": "memory"}), "list"),
    ("empty list", "[]", "got 0"),
    ("33 entries", json.dumps([{"name": f"t{i}", "description": "d"} for i in range(33)]), "32"),
    ("bad name", json.dumps([{"name": "Bad Name", "description": "d"}]), "Bad Name"),
    ("twice", json.dumps([NODE_TYPES[0], NODE_TYPES[0]]), "twice"),
    ("unknown field", json.dumps([{"name": "memory", "color": "red"}]), "color"),
    ("name missing", json.dumps([{"description": "d"}]), "name"),
    ("description not text", json.dumps([{"name": "memory", "description": 3}]), "description"),
    ("not JSON", "[{name: memory}]", "not valid JSON"),
    ("empty file", "", "empty"),
]


@pytest.mark.parametrize(
    ("content", "hint"), [pytest.param(c, h, id=name) for name, c, h in BAD_NODE_TYPES]
)
def test_node_types_invalid(
    tmp_path: Path,
    example_path: str,
    capsys: pytest.CaptureFixture[str],
    content: str,
    hint: str,
) -> None:
    types = write(tmp_path, "types.json", content)
    assert main(["validate", "--node-types", types, example_path]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("cwstore validate: --node-types ")
    assert types in err and hint in err
    assert "Traceback" not in err


def test_node_types_missing_file(tmp_path: Path, example_path: str) -> None:
    run = run_cli("validate", "--node-types", str(tmp_path / "nope.json"), example_path)
    assert run.returncode == 2
    assert "nope.json" in run.stderr and "no such file" in run.stderr
    assert "Traceback" not in run.stderr


def test_node_types_and_fixed_vocabulary_exclude_each_other(
    tmp_path: Path, example_path: str
) -> None:
    types = write(tmp_path, "types.json", json.dumps(NODE_TYPES))
    run = run_cli("validate", "--node-types", types, "--fixed-vocabulary", example_path)
    assert run.returncode == 2
    assert "not allowed with" in run.stderr and "Traceback" not in run.stderr


# -- garbage in, a message out ------------------------------------------------------------


def _garbage(tmp_path: Path) -> dict[str, tuple[str, int, str]]:
    """name -> (path, exit code, a word the message must contain)."""
    rng = random.Random(1202)
    binary = bytes([0xFF, 0xFE, 0x00, 0xC3]) + rng.randbytes(4096)
    deep = 100_000
    cases: dict[str, tuple[str, str | bytes, int, str]] = {
        "empty file": ("empty.json", "", 2, "empty"),
        "only whitespace": ("ws.json", " \n\t ", 2, "empty"),
        "empty list": ("list.json", "[]", 1, "object"),
        "a string": ("string.json", '"state"', 1, "object"),
        "truncated": ("trunc.json", _jsontext.dumps(example_turn())[:777], 2, "not valid JSON"),
        "binary": ("binary.bin", binary, 2, "UTF-8"),
        "byte order mark": (
            "bom.json",
            "\ufeff" + _jsontext.dumps(example_turn()),
            2,
            "byte order",
        ),
        "NaN document": ("nan.json", "NaN", 1, "object"),
        "unclosed brackets": ("open.json", "[" * deep, 2, "not valid JSON"),
        "nested brackets": ("nested.json", "[" * deep + "]" * deep, 1, "object"),
        "nested in a payload": (
            "payload.json",
            '{"version":1,"nodes":[{"id":"cw_000000000000000000000000","kind":"goal",'
            '"parents":[],"payload":' + "[" * deep + "]" * deep + ',"createdAt":'
            '"2026-12-02T14:38:31.376Z","sequence":1}],"frontier":[]}',
            1,
            "unrepresentable",
        ),
    }
    out: dict[str, tuple[str, int, str]] = {}
    for name, (file, content, code, word) in cases.items():
        out[name] = (write(tmp_path, file, content), code, word)
    out["a directory"] = (str(tmp_path), 2, "directory")
    out["a missing file"] = (str(tmp_path / "missing.json"), 2, "no such file")
    return out


GARBAGE = [
    "empty file",
    "only whitespace",
    "empty list",
    "a string",
    "truncated",
    "binary",
    "byte order mark",
    "NaN document",
    "unclosed brackets",
    "nested brackets",
    "nested in a payload",
    "a directory",
    "a missing file",
]


@pytest.mark.parametrize("case", GARBAGE)
def test_garbage_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    path, code, word = _garbage(tmp_path)[case]
    assert main(["validate", path]) == code
    out, err = capsys.readouterr()
    assert out == ""
    assert word in err
    assert "Traceback" not in err
    assert len(err.splitlines()) <= 3


def _run_all(jobs: dict[str, tuple[list[str], bytes]]) -> dict[str, tuple[int, str, str]]:
    """Run ``python -m cwstore`` once per job, all at once: name -> (exit, out, err)."""
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "cwstore", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
            cwd=REPO,
        )
        for name, (args, _) in jobs.items()
    }
    out: dict[str, tuple[int, str, str]] = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(jobs[name][1], timeout=120)
        out[name] = (
            proc.returncode,
            stdout.decode("utf-8", "replace"),
            stderr.decode("utf-8", "replace"),
        )
    return out


def test_garbage_subprocess(tmp_path: Path) -> None:
    cases = _garbage(tmp_path)
    results = _run_all({case: (["validate", path], b"") for case, (path, _, _) in cases.items()})
    assert set(results) == set(GARBAGE)
    for case, (code, out, err) in results.items():
        _, want_code, word = cases[case]
        assert (case, code, out) == (case, want_code, "")
        assert word in err, (case, err)
        assert "Traceback" not in err, (case, err)


def test_garbage_on_stdin() -> None:
    rng = random.Random(7)
    inputs = [b"", b"\xff\xfe" + rng.randbytes(512), b"{", b"[" * 100_000]
    results = _run_all({f"stdin {i}": (["validate", "-"], data) for i, data in enumerate(inputs)})
    for name, (code, out, err) in results.items():
        assert (name, code, out) == (name, 2, "")
        assert err.startswith("cwstore validate: ") and "Traceback" not in err, (name, err)


def test_usage_errors() -> None:
    jobs = {
        "no command": ([], b""),
        "no file": (["validate"], b""),
        "unknown flag": (["validate", "--no-such-flag", "x.json"], b""),
    }
    for name, (code, _, err) in _run_all(jobs).items():
        assert (name, code) == (name, 2)
        assert "usage:" in err and "Traceback" not in err, (name, err)


# -- more inputs that once gave a traceback ------------------------------------------------


def test_file_name_too_long_is_a_message() -> None:
    run = run_cli("validate", "a" * 5000)  # ENAMETOOLONG
    assert run.returncode == 2
    assert run.stderr.startswith("cwstore validate: aaaa") and "Traceback" not in run.stderr


def test_deep_value_in_version_is_a_message(tmp_path: Path) -> None:
    deep = 100_000
    path = write(
        tmp_path, "v.json", '{"version":' + "[" * deep + "]" * deep + ',"nodes":[],"frontier":[]}'
    )
    run = run_cli("validate", path)
    assert run.returncode == 1
    assert run.stderr.startswith("version\tnode=-\tid=-\tpath=$.version\t")
    assert "Traceback" not in run.stderr


def test_json_output_with_a_lone_surrogate_id(tmp_path: Path) -> None:
    path = write(tmp_path, "s.json", '{"version":1,"nodes":[],"frontier":["\\ud800"]}')
    run = run_cli("validate", "--json", path)
    assert run.returncode == 1
    assert "Traceback" not in run.stderr
    (violation,) = json.loads(run.stdout)["violations"]
    assert violation["code"] == "frontier_reference"
    assert violation["node_id"] == "\ud800" and violation["path"] == "$.frontier[0]"
