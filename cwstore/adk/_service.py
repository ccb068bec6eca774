"""Google ADK's session service (``google.adk.sessions.BaseSessionService``) on a cwstore
store.

The mapping is pure and lives in :mod:`cwstore.adk._mapping`; this module reads with
the named queries of ``cwstore/adk/queries.sql`` and writes through cwstore's public
seam: :func:`cwstore.prepare_append` and ``append_v1`` in :meth:`~cwstore.AsyncStore.transaction`
(an event and its app and user state changes land together), and
:meth:`~cwstore.AsyncStore.erase`.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, LiteralString, Self

import orjson
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from typing_extensions import override

import cwstore

from ._mapping import (
    APP_PREFIX,
    SESSION_STATE_KEY,
    STATE_KEY_PREFIX,
    USER_PREFIX,
    app_graph,
    decode_event,
    encode_event,
    event_kind,
    event_time,
    fold_state,
    opening_time,
    session_graph,
    session_prefix,
    split_delta,
    split_session_graph,
    state_key,
    user_graph,
    user_prefix,
)

__all__ = ["CwstoreSessionService"]

_Q = cwstore.named_queries("cwstore.adk")
STALE_MESSAGE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)
"""The words of ADK's DatabaseSessionService, which callers match on."""
_MEMO_GRAPHS = 4096
_SHARED_RETRIES = 8


def _q(name: str) -> LiteralString:
    return _Q[name]


@dataclass(frozen=True)
class _Memo:
    """What the service knows of a session graph at one length: its last node (the
    next event's parent) and the head of its key ``state``."""

    incarnation: int
    length: int
    last: str
    state_head: str


def _marker(incarnation: int, length: int) -> str:
    return f"cwstore:{incarnation}:{length}"


def _parse_marker(marker: str | None) -> tuple[int, int] | None:
    if marker is None or not marker.startswith("cwstore:"):
        return None
    _, incarnation, length = marker.split(":")
    return int(incarnation), int(length)


def _merge(
    app: Mapping[str, Any], user: Mapping[str, Any], session: Mapping[str, Any]
) -> dict[str, Any]:
    merged = dict(session)
    merged.update({APP_PREFIX + k: v for k, v in app.items()})
    merged.update({USER_PREFIX + k: v for k, v in user.items()})
    return merged


def _value(payload_text: str) -> Any:
    return orjson.loads(payload_text)["value"]


def _normal_id(session_id: str) -> str:
    return session_id.strip()


class CwstoreSessionService(BaseSessionService):
    """ADK sessions, each a cwstore graph (docs/adk.md has the mapping).

    Make it from an open :class:`cwstore.AsyncStore` (the service does not close it)
    or with :meth:`from_dsn` (the service owns the store; :meth:`close` it, or use
    ``async with``).
    """

    def __init__(self, store: cwstore.AsyncStore) -> None:
        self.store = store
        self._owns_store = False
        self._memo: OrderedDict[str, _Memo] = OrderedDict()

    @classmethod
    async def from_dsn(
        cls, dsn: str | None = None, *, setup: bool = False, **connect_args: Any
    ) -> Self:
        """A service on a store of its own (``cwstore.connect(dsn, ...)``);
        ``setup=True`` brings cwstore's schema up to date first, as ``cwstore init``."""
        store = await cwstore.connect(dsn, migrate_schema=setup, **connect_args)
        service = cls(store)
        service._owns_store = True
        return service

    async def close(self) -> None:
        """Close the store when this service made it."""
        if self._owns_store:
            await self.store.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # --- memo ------------------------------------------------------------------------

    def _remember(self, graph: str, memo: _Memo) -> None:
        self._memo[graph] = memo
        self._memo.move_to_end(graph)
        while len(self._memo) > _MEMO_GRAPHS:
            self._memo.popitem(last=False)

    # --- create ----------------------------------------------------------------------

    @override
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        sid = _normal_id(session_id) if session_id is not None else ""
        if not sid:
            sid = str(uuid.uuid4())
        graph = session_graph(app_name, user_id, sid)
        app_delta, user_delta, session_state = split_delta(state or {})
        now = time.time()
        extra, created_at = opening_time(now)
        payload: dict[str, Any] = {
            "adk": "session",
            "app": app_name,
            "user": user_id,
            "id": sid,
            "life": uuid.uuid4().hex,
            "state": session_state,
            **extra,
        }
        opening = {
            "kind": "system",
            "parents": [],
            "payload": payload,
            "createdAt": created_at,
            "resourceKey": SESSION_STATE_KEY,
        }
        opening_id = cwstore.compute_id("system", [], payload, SESSION_STATE_KEY)
        try:
            await self._append_with_shared(
                cwstore.prepare_append(graph, [opening], expected_length=0),
                app_name,
                user_id,
                app_delta,
                user_delta,
                {"session": sid},
            )
        except cwstore.LengthConflictError:
            raise AlreadyExistsError(f"Session with id {sid} already exists.") from None
        app_state, user_state, incarnation = await self._created(graph, app_name, user_id)
        memo = _Memo(incarnation, 1, opening_id, opening_id)
        self._remember(graph, memo)
        session = Session(
            id=sid,
            app_name=app_name,
            user_id=user_id,
            state=_merge(app_state, user_state, session_state),
            last_update_time=now,
        )
        session._storage_update_marker = _marker(memo.incarnation, memo.length)
        return session

    # --- read ------------------------------------------------------------------------

    @override
    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        sid = _normal_id(session_id)
        graph = session_graph(app_name, user_id, sid)
        limit = config.num_recent_events if config else None
        after = config.after_timestamp if config and config.after_timestamp else None
        after_at = None if after is None else datetime.fromtimestamp(after - 1e-6, tz=UTC)
        async with self.store.snapshot() as conn:
            rows = await conn.fetch(
                _q("session"),
                graph,
                app_graph(app_name),
                user_graph(app_name, user_id),
                limit,
                after_at,
            )
        head = next((r for r in rows if r["part"] == "graph"), None)
        if head is None:
            return None
        scopes: dict[str, dict[str, Any]] = {"app": {}, "user": {}}
        versions: list[tuple[int, str, Any]] = []
        events: list[tuple[int, Event]] = []
        for r in rows:
            part = r["part"]
            if part == "state":
                key = str(r["key"]).removeprefix(STATE_KEY_PREFIX)
                scopes[str(r["scope"])][key] = _value(r["payload_text"])
            elif part == "version":
                versions.append((int(r["seq"]), str(r["id"]), _delta_of(r["payload_text"])))
            elif part == "event":
                event = decode_event(r["payload_text"], r["created_at_text"])
                if after is None or event.timestamp >= after:
                    events.append((int(r["seq"]), event))
        events.sort(key=lambda e: e[0])
        versions.sort(key=lambda v: v[0])
        memo = _Memo(
            int(head["incarnation"]), int(head["length"]), str(head["id"]), versions[-1][1]
        )
        self._remember(graph, memo)
        session = Session(
            id=sid,
            app_name=app_name,
            user_id=user_id,
            state=_merge(scopes["app"], scopes["user"], fold_state(v for _, _, v in versions)),
            events=[e for _, e in events],
            last_update_time=event_time(
                head["created_at_text"], orjson.loads(head["payload_text"])
            ),
        )
        session._storage_update_marker = _marker(memo.incarnation, memo.length)
        return session

    @override
    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        prefix = session_prefix(app_name, user_id)
        users = user_prefix(app_name) if user_id is None else user_graph(app_name, user_id)
        app = app_graph(app_name)
        async with self.store.snapshot() as conn:
            rows = await conn.fetch(_q("sessions"), prefix, users, user_id is not None, app)
        states: dict[str, dict[str, Any]] = {}
        versions: dict[str, list[tuple[int, Any]]] = {}
        found: list[tuple[float, str, str, str, int, int]] = []
        for r in rows:
            name = str(r["name"])
            if r["part"] == "state":
                key = str(r["key"]).removeprefix(STATE_KEY_PREFIX)
                states.setdefault(name, {})[key] = _value(r["payload_text"])
            elif r["part"] == "version":
                versions.setdefault(name, []).append((int(r["seq"]), _delta_of(r["payload_text"])))
            else:
                _, user, sid = split_session_graph(name)
                last = orjson.loads(r["payload_text"])
                found.append(
                    (
                        event_time(r["created_at_text"], last),
                        user,
                        sid,
                        name,
                        int(r["incarnation"]),
                        int(r["length"]),
                    )
                )
        found.sort(key=lambda f: (f[0], f[1], f[2]))
        app_state = states.get(app, {})
        sessions = []
        for updated, user, sid, name, incarnation, length in found:
            session = Session(
                id=sid,
                app_name=app_name,
                user_id=user,
                state=_merge(
                    app_state,
                    states.get(user_graph(app_name, user), {}),
                    fold_state(d for _, d in sorted(versions.get(name, []), key=lambda v: v[0])),
                ),
                last_update_time=updated,
            )
            session._storage_update_marker = _marker(incarnation, length)
            sessions.append(session)
        return ListSessionsResponse(sessions=sessions)

    @override
    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        async with self.store.connection() as conn:
            rows = await conn.fetch(_q("scoped_state"), "", user_graph(app_name, user_id))
        return {
            str(r["key"]).removeprefix(STATE_KEY_PREFIX): _value(r["payload_text"]) for r in rows
        }

    # --- delete ----------------------------------------------------------------------

    @override
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Erase the session's graph (cwstore's erasure: every row of it, and an audit
        record without its name or content). Unknown sessions are a no-op. The app's
        and user's state graphs stay."""
        graph = session_graph(app_name, user_id, _normal_id(session_id))
        self._memo.pop(graph, None)
        with contextlib.suppress(cwstore.UnknownGraphError):
            await self.store.erase(graph, reason="adk delete_session")

    # --- append ----------------------------------------------------------------------

    @override
    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        graph = session_graph(session.app_name, session.user_id, session.id)
        memo = await self._memo_for(graph, session)
        app_delta, user_delta, session_delta = split_delta(event.actions.state_delta or {})
        payload, created_at = encode_event(event)
        kind = event_kind(event)
        node: dict[str, Any] = {"kind": kind, "payload": payload, "createdAt": created_at}
        if session_delta:
            parents = sorted({memo.last, memo.state_head})
            node["resourceKey"] = SESSION_STATE_KEY
        else:
            parents = [memo.last]
        node["parents"] = parents
        event_id = cwstore.compute_id(kind, parents, payload, node.get("resourceKey"))
        prepared = cwstore.prepare_append(
            graph, [node], expected_length=memo.length, incarnation=memo.incarnation
        )
        try:
            await self._append_with_shared(
                prepared,
                session.app_name,
                session.user_id,
                app_delta,
                user_delta,
                {"session": session.id, "event": event.id},
            )
        except cwstore.LengthConflictError:
            self._memo.pop(graph, None)
            raise StaleSessionError(STALE_MESSAGE) from None
        except (cwstore.GraphErasedError, cwstore.UnknownGraphError):
            self._memo.pop(graph, None)
            raise SessionNotFoundError(f"Session {session.id} not found.") from None
        length = memo.length + 1
        self._remember(
            graph,
            _Memo(
                memo.incarnation,
                length,
                event_id,
                event_id if session_delta else memo.state_head,
            ),
        )
        session.last_update_time = event.timestamp
        session._storage_update_marker = _marker(memo.incarnation, length)
        return self._commit_event_to_session(session, event)

    async def _memo_for(self, graph: str, session: Session) -> _Memo:
        """What the next append to ``session`` links to, checked against the session
        object: a session loaded at another length is stale (StaleSessionError), one
        whose graph is gone or another life of it is not found (SessionNotFoundError)."""
        marker = _parse_marker(session._storage_update_marker)
        memo = self._memo.get(graph)
        if memo is not None and marker == (memo.incarnation, memo.length):
            return memo
        async with self.store.snapshot() as conn:
            rows = await conn.fetch(_q("session"), graph, "", "", 1, None)
        head = next((r for r in rows if r["part"] == "graph"), None)
        if head is None:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        versions = sorted((int(r["seq"]), str(r["id"])) for r in rows if r["part"] == "version")
        stored = _Memo(
            int(head["incarnation"]), int(head["length"]), str(head["id"]), versions[-1][1]
        )
        if marker is not None:
            if marker[0] != stored.incarnation:
                raise SessionNotFoundError(f"Session {session.id} not found.")
            if marker[1] != stored.length:
                raise StaleSessionError(STALE_MESSAGE)
        else:
            last_id = orjson.loads(head["payload_text"]).get("id") if int(head["seq"]) > 1 else None
            mine = session.events[-1].id if session.events else None
            if last_id != mine:
                raise StaleSessionError(STALE_MESSAGE)
        self._remember(graph, stored)
        return stored

    async def _append_with_shared(
        self,
        prepared: cwstore.PreparedAppend,
        app_name: str,
        user_id: str,
        app_delta: Mapping[str, Any],
        user_delta: Mapping[str, Any],
        source: Mapping[str, str],
    ) -> None:
        """Append ``prepared`` (a session's batch) and the app's and user's state deltas
        to their graphs in one transaction: all land or none. Each shared key's new
        version links to its head, read in the transaction; when a concurrent writer
        moved a head first (a chain conflict) the whole transaction is tried again (the
        session's expected length keeps that from writing its batch twice)."""
        shared = [
            (graph, delta, [state_key(k) for k in delta])
            for graph, delta in (
                (app_graph(app_name), app_delta),
                (user_graph(app_name, user_id), user_delta),
            )
            if delta
        ]
        created_at = opening_time(time.time())[1]
        for attempt in range(_SHARED_RETRIES):
            try:
                async with self.store.transaction() as conn:
                    await _send(conn, prepared)
                    for graph, delta, keys in shared:
                        rows = await conn.fetch(_q("heads"), graph, keys)
                        heads = {str(r["key"]): str(r["id"]) for r in rows}
                        nodes, _ = _state_nodes(delta, [], heads, created_at, source)
                        await _send(conn, cwstore.prepare_append(graph, nodes))
                return
            except cwstore.ChainConflictError:
                if attempt == _SHARED_RETRIES - 1:
                    raise

    async def _created(
        self, graph: str, app_name: str, user_id: str
    ) -> tuple[dict[str, Any], dict[str, Any], int]:
        """A new session's app and user state and its graph's incarnation."""
        async with self.store.snapshot() as conn:
            rows = await conn.fetch(
                _q("session"), graph, app_graph(app_name), user_graph(app_name, user_id), 0, None
            )
        scopes: dict[str, dict[str, Any]] = {"app": {}, "user": {}}
        incarnation = 0
        for r in rows:
            if r["part"] == "graph":
                incarnation = int(r["incarnation"])
            elif r["part"] == "state":
                key = str(r["key"]).removeprefix(STATE_KEY_PREFIX)
                scopes[str(r["scope"])][key] = _value(r["payload_text"])
        return scopes["app"], scopes["user"], incarnation


async def _send(conn: cwstore.AsyncConnection, prepared: cwstore.PreparedAppend) -> None:
    """``prepared`` through ``append_v1`` on ``conn``; a refused batch's violations
    indexed by batch position, as the store's own append raises them."""
    try:
        await conn.fetch(_q("append"), *prepared.args)
    except cwstore.ValidationError as exc:
        raise prepared.renumbered(exc) from exc


def _delta_of(text: str | None) -> Any:
    return {} if text is None else orjson.loads(text)


def _state_nodes(
    delta: Mapping[str, Any],
    parents: Sequence[str],
    heads: Mapping[str, str],
    created_at: str,
    source: Mapping[str, str] | None,
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """One ``resource`` node per key of ``delta`` (ids computed), linked to
    ``parents`` and to the key's head; and the keys' new heads."""
    nodes: list[dict[str, Any]] = []
    new_heads: dict[str, str] = {}
    for key, value in delta.items():
        rkey = state_key(key)
        links = sorted({*parents, *([heads[rkey]] if rkey in heads else [])})
        payload = {"value": value, **(source or {})}
        node_id = cwstore.compute_id("resource", links, payload, rkey)
        nodes.append(
            {
                "id": node_id,
                "kind": "resource",
                "parents": links,
                "payload": payload,
                "createdAt": created_at,
                "resourceKey": rkey,
            }
        )
        new_heads[rkey] = node_id
    return nodes, new_heads
