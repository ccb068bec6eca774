"""A graph that changes hands while a call waits for it is never written or erased by
that call.

Tenant A's graph is erased and made again by tenant B, under the same name (so the
same key), between a call's unlocked read of the graph and its lock
(:class:`support.tenants.ChangingHands`: the call waits on a table lock the test holds,
and the swap commits in that transaction). Every door that names a graph must then
refuse as for a graph erased meanwhile (CW404, ``"erased": true``), and leave B's graph
as B wrote it: the raw SQL functions, both Python clients and the CLI.

On today's main before this change each of these calls wrote A's nodes into B's graph,
or erased B's graph (with an audit record naming tenant B).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support.nodes import node
from support.tenants import (
    TENANT_A,
    TENANT_B,
    ChangingHands,
    Roles,
    in_thread,
    rejoin,
    tenant_roles,
    waiting_on_lock,
)

import cwstore
from cwstore import _jsontext

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("CWSTORE_TEST_CITUS_DSN")),
    reason="the race is held by a table lock on one server; on Citus the rows are locked "
    "on the workers (the checks themselves run in the rest of the contract suite)",
)

REPO = Path(__file__).resolve().parents[2]
APPEND = "SELECT count(*) FROM cwstore.append_v1(%s, %s::json)"
CLIENTS = ["async", "sync"]


@pytest.fixture(scope="module")
def setup(db_dsn: str) -> Iterator[Roles]:
    with tenant_roles(db_dsn) as made:
        yield made


@pytest.fixture
def hands(setup: Roles) -> ChangingHands:
    rejoin(setup)
    return ChangingHands(setup.owner, f"hands-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def empty_hands(setup: Roles) -> ChangingHands:
    rejoin(setup)
    return ChangingHands(setup.owner, f"hands-{uuid.uuid4().hex[:12]}", nodes=0)


def race(
    hands: ChangingHands, usename: str, call: Callable[[], Any]
) -> Any:  # the call's result, or the exception it raised
    """Run ``call`` while the graph changes hands under it."""
    with hands.hold():
        join = in_thread(call)
        hands.wait_for(waiting_on_lock(usename))
        hands.swap()
        return join()


def sql_error(dsn: str, statement: str, *params: Any) -> psycopg.Error | Any:
    """Run ``statement`` in a transaction of its own (rolled back on error); the error
    it raised, or its first row."""
    with psycopg.connect(dsn) as conn:
        try:
            row = conn.execute(statement.encode(), params).fetchone()
        except psycopg.Error as exc:
            return exc
        conn.commit()
        return row


def assert_erased_meanwhile(outcome: Any) -> None:
    assert isinstance(outcome, psycopg.Error), outcome
    assert outcome.sqlstate == "CW404", outcome
    detail = json.loads(outcome.diag.message_detail or "{}")
    assert detail.get("erased") is True, detail


# --- the raw SQL door -------------------------------------------------------------------


def test_append_v1_never_writes_the_new_graph(setup: Roles, hands: ChangingHands) -> None:
    batch = _jsontext.dumps([node("answer", "A's late answer", [hands.a_nodes[0]["id"]])])
    outcome = race(
        hands,
        setup.names["writer_a"],
        lambda: sql_error(
            setup.writer_a,
            "SELECT count(*) FROM cwstore.append_v1(%s, %s::json)",
            hands.name,
            batch,
        ),
    )
    assert_erased_meanwhile(outcome)
    hands.assert_b_untouched()


def test_append_v1_of_a_new_life_never_writes_another_tenants(
    setup: Roles, hands: ChangingHands
) -> None:
    """A batch with no parent in A's life (so no parent check can catch it)."""
    batch = _jsontext.dumps([node("goal", "A's goal, no parents")])
    outcome = race(
        hands,
        setup.names["writer_a"],
        lambda: sql_error(
            setup.writer_a,
            "SELECT count(*) FROM cwstore.append_v1(%s, %s::json)",
            hands.name,
            batch,
        ),
    )
    assert_erased_meanwhile(outcome)
    hands.assert_b_untouched()


def test_begin_import_v1_never_takes_the_new_graph(
    setup: Roles, empty_hands: ChangingHands
) -> None:
    outcome = race(
        empty_hands,
        setup.names["writer_a"],
        lambda: sql_error(setup.writer_a, "SELECT cwstore.begin_import_v1(%s)", empty_hands.name),
    )
    assert_erased_meanwhile(outcome)
    empty_hands.assert_b_untouched()


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT cwstore.import_rows_v1(%s, ARRAY[1]::bigint[], ARRAY[%s], ARRAY['goal'],"
        " ARRAY['{}'], ARRAY[%s], ARRAY[%s], ARRAY[NULL]::text[])",
        "SELECT cwstore.declare_frontier_v1(%s, ARRAY[]::text[])",
    ],
    ids=["import_rows_v1", "declare_frontier_v1"],
)
def test_a_door_by_graph_id_never_takes_the_new_graph(
    setup: Roles, empty_hands: ChangingHands, statement: str
) -> None:
    a = node("goal", "A's imported secret")
    params: tuple[Any, ...] = (empty_hands.graph_id,)
    if "import_rows_v1" in statement:
        params += (a["id"], _jsontext.dumps(a["payload"]), a["createdAt"])
    outcome = race(
        empty_hands,
        setup.names["writer_a"],
        lambda: sql_error(setup.writer_a, statement, *params),
    )
    assert_erased_meanwhile(outcome)
    held = empty_hands.assert_b_untouched()
    with psycopg.connect(setup.owner) as conn:
        declared = conn.execute(
            "SELECT count(*) FROM cwstore.frontier_declarations WHERE graph_id = %s",
            (held.graph_id,),
        ).fetchone()
    assert declared == (0,)


def test_erase_graph_v1_never_erases_the_new_graph(setup: Roles, hands: ChangingHands) -> None:
    outcome = race(
        hands,
        setup.names["admin_a"],
        lambda: sql_error(setup.admin_a, "SELECT cwstore.erase_graph_v1(%s)", hands.name),
    )
    assert_erased_meanwhile(outcome)
    hands.assert_b_untouched()


def test_erase_tenant_v1_never_erases_another_tenants_graph(
    setup: Roles, hands: ChangingHands
) -> None:
    """Tenant A's admin erases tenant A: the graph listed was A's, and is B's by the time
    it is locked: only the life listed may be erased."""
    outcome = race(
        hands,
        setup.names["admin_a"],
        lambda: sql_error(
            setup.admin_a,
            "SELECT count(*) FROM cwstore.erase_tenant_v1(%s, 'tenant A leaves', 10000)",
            TENANT_A,
        ),
    )
    assert not isinstance(outcome, psycopg.Error), outcome
    hands.assert_b_untouched()


def test_an_append_naming_a_life_writes_that_life_or_nothing(
    setup: Roles, hands: ChangingHands
) -> None:
    later = node("answer", "to the first life", [hands.a_nodes[0]["id"]])
    with psycopg.connect(setup.owner, autocommit=True) as conn:
        appended = conn.execute(
            "SELECT seq, incarnation FROM cwstore.append_v1(%s, %s::json, NULL, NULL, %s)",
            (hands.name, _jsontext.dumps([later]), hands.a_incarnation),
        ).fetchall()
    assert appended == [(2, hands.a_incarnation)]
    stale = hands.a_incarnation + 1
    for name in (hands.name, f"never-{uuid.uuid4().hex}"):  # another life, and no graph
        outcome = sql_error(
            setup.owner,
            "SELECT count(*) FROM cwstore.append_v1(%s, %s::json, NULL, NULL, %s)",
            name,
            _jsontext.dumps([node("goal", "nowhere")]),
            stale,
        )
        assert_erased_meanwhile(outcome)
    with psycopg.connect(setup.owner, autocommit=True) as conn:
        made = conn.execute("SELECT count(*) FROM cwstore.graphs WHERE name LIKE 'never-%'")
        assert made.fetchone() == (0,)


# --- the Python clients ------------------------------------------------------------------


def connect(dsn: str, client: str) -> Any:
    """A store for ``dsn``: the sync one, or the async one driven from a new event loop
    (the race runs each call in a thread of its own)."""
    if client == "sync":
        return cwstore.connect_sync(dsn, min_size=1, max_size=2)
    return _AsyncInThread(dsn)


class _AsyncInThread:
    """An :class:`cwstore.AsyncStore` whose calls each run to completion in a new event
    loop of the calling thread (opened and closed per call)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def __getattr__(self, name: str) -> Callable[..., Any]:
        import asyncio

        async def call(*args: Any, **kwargs: Any) -> Any:
            store = await cwstore.connect(self.dsn, min_size=1, max_size=2)
            try:
                return await getattr(store, name)(*args, **kwargs)
            finally:
                await store.close()

        return lambda *args, **kwargs: asyncio.run(call(*args, **kwargs))

    def close(self) -> None:
        pass


@pytest.mark.parametrize("client", CLIENTS)
def test_store_append_gets_graph_erased(setup: Roles, hands: ChangingHands, client: str) -> None:
    store = connect(setup.writer_a, client)
    try:
        outcome = race(
            hands,
            setup.names["writer_a"],
            lambda: store.append(hands.name, [{"kind": "goal", "parents": [], "payload": "A"}]),
        )
    finally:
        store.close()
    assert isinstance(outcome, cwstore.GraphErasedError), outcome
    hands.assert_b_untouched()


@pytest.mark.parametrize("client", CLIENTS)
def test_store_import_gets_graph_erased(
    setup: Roles, empty_hands: ChangingHands, client: str
) -> None:
    state = {
        "version": 1,
        "nodes": [{**node("goal", "A's imported secret"), "sequence": 1}],
        "frontier": [],
    }
    store = connect(setup.writer_a, client)
    try:
        outcome = race(
            empty_hands,
            setup.names["writer_a"],
            lambda: store.import_state(empty_hands.name, state),
        )
    finally:
        store.close()
    assert isinstance(outcome, cwstore.GraphErasedError), outcome
    empty_hands.assert_b_untouched()


@pytest.mark.parametrize("client", CLIENTS)
def test_store_erase_never_erases_the_new_graph(
    setup: Roles, hands: ChangingHands, client: str
) -> None:
    store = connect(setup.admin_a, client)
    try:
        outcome = race(hands, setup.names["admin_a"], lambda: store.erase(hands.name))
    finally:
        store.close()
    assert isinstance(outcome, cwstore.GraphErasedError), outcome
    hands.assert_b_untouched()


@pytest.mark.parametrize("client", CLIENTS)
def test_store_erase_tenant_never_erases_another_tenants_graph(
    setup: Roles, hands: ChangingHands, client: str
) -> None:
    store = connect(setup.admin_a, client)
    try:
        outcome = race(
            hands, setup.names["admin_a"], lambda: store.erase_tenant(TENANT_A, batch=10000)
        )
    finally:
        store.close()
    assert not isinstance(outcome, BaseException), outcome
    assert hands.name not in [e.graph for e in outcome]
    hands.assert_b_untouched()


async def test_save_never_lands_on_a_later_life_of_the_same_length(store: Any, db_dsn: str) -> None:
    """docs/erasure.md's old "across lives" gap: a store remembers a graph of n nodes;
    the graph is erased and made again, with n nodes of its own; the store's next save
    appends nodes that name no node of the old life. It must not land on the new life."""
    name = f"lives-{uuid.uuid4().hex[:12]}"
    first = node("goal", f"{name} first life")
    state: dict[str, Any] = {
        "version": 1,
        "nodes": [{**first, "sequence": 1}],
        "frontier": [first["id"]],
    }
    await store.save(name, state)
    other = node("goal", f"{name} second life")
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("SELECT cwstore.erase_graph_v1(%s)", (name,))
        conn.execute(
            "SELECT count(*) FROM cwstore.append_v1(%s, %s::json)",
            (name, _jsontext.dumps([other])),
        )
    unrelated = node("goal", f"{name} an unrelated goal of the first life's state")
    state["nodes"].append({**unrelated, "sequence": 2})
    state["frontier"] = [first["id"], unrelated["id"]]
    with pytest.raises(cwstore.DivergedError):
        await store.save(name, state)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        ids = conn.execute(
            "SELECT n.id FROM cwstore.nodes n JOIN cwstore.graphs g USING (graph_id)"
            " WHERE g.name = %s ORDER BY n.seq",
            (name,),
        ).fetchall()
    assert [r[0] for r in ids] == [other["id"]]


# --- the command line --------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("CWSTORE_DSN", None)
    return subprocess.run(
        [sys.executable, "-m", "cwstore", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_cli_import_gets_graph_erased(
    setup: Roles, empty_hands: ChangingHands, tmp_path: Path
) -> None:
    doc = tmp_path / "state.json"
    doc.write_text(
        _jsontext.dumps(
            {
                "version": 1,
                "nodes": [{**node("goal", "A's imported secret"), "sequence": 1}],
                "frontier": [],
            }
        )
    )
    outcome = race(
        empty_hands,
        setup.names["writer_a"],
        lambda: cli("import", str(doc), "--graph", empty_hands.name, "--dsn", setup.writer_a),
    )
    assert outcome.returncode != 0, outcome.stdout
    assert "erased" in outcome.stderr and "Traceback" not in outcome.stderr, outcome.stderr
    empty_hands.assert_b_untouched()


def test_cli_erase_never_erases_the_new_graph(setup: Roles, hands: ChangingHands) -> None:
    outcome = race(
        hands,
        setup.names["admin_a"],
        lambda: cli("erase", "--graph", hands.name, "--yes", "--dsn", setup.admin_a),
    )
    assert outcome.returncode != 0, outcome.stdout
    assert "erased" in outcome.stderr and "Traceback" not in outcome.stderr, outcome.stderr
    hands.assert_b_untouched()


def test_cli_erase_tenant_never_erases_another_tenants_graph(
    setup: Roles, hands: ChangingHands
) -> None:
    outcome = race(
        hands,
        setup.names["admin_a"],
        lambda: cli("erase", "--tenant", TENANT_A, "--yes", "--dsn", setup.admin_a),
    )
    assert outcome.returncode == 0, outcome.stderr
    assert "Traceback" not in outcome.stderr
    held = hands.assert_b_untouched()
    assert held.tenant == TENANT_B
