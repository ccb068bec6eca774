"""Test support, kept out of the wheel: documents built as the runtime builds them
(:mod:`.documents`), single runtime nodes and their time of writing (:mod:`.nodes`),
the sync store behind async methods (:mod:`.stores`), the
reliability suite's helpers (:mod:`.reliability`), catalog snapshots
(:mod:`.schema_catalog`) and ``cwstore view`` run as a user runs it (:mod:`.view`).

Tests import it as ``support`` (pytest puts ``tests/`` on ``sys.path`` for
``tests/conftest.py``); the benchmarks as ``tests.support``.
"""

from __future__ import annotations

from pathlib import Path

EXAMPLE_FILE = Path(__file__).with_name("stateweave_turn.json")
"""One turn the runtime wrote (its ids computed by the runtime), byte for byte."""

GRAPH_TABLES = [
    "graphs",
    "nodes",
    "edges",
    "frontier_spans",
    "frontier_declarations",
    "key_versions",
    "key_heads",
    "kind_counts",
]
"""cwstore's tables keyed by graph (``graph_id``), ``graphs`` first."""
