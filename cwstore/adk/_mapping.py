"""How an ADK session becomes cwstore graphs: pure rules, no I/O.

Names (:func:`session_graph`, :func:`app_graph`, :func:`user_graph`): every part is
escaped (``%`` as ``%25``, ``:`` as ``%3A``) and joined with ``:`` after a tag that
says which scope the graph holds, so an escaped part never holds a ``:`` and the
name is injective: two different (app, user, session) triples never share a graph,
and an app's, a user's and a session's graph never share a name either.

Nodes of a session's graph, one chain in append order:

- the session opens with one ``system`` node (no parents), payload
  ``{"adk": "session", "app", "user", "id", "life", "state"}`` (``life``: a random id
  of this life of the session; ``state``: its initial session-scoped state);
- an event is one node of the runtime's kind (:func:`event_kind`) whose parent is the
  node before it; its payload is the event as ADK's own JSON
  (``model_dump(mode="json")``) without ``None`` and default values, and without
  ``timestamp`` when ``createdAt`` holds it exactly (:func:`time_text`);
- the session's state is the resource key ``state`` (:data:`SESSION_STATE_KEY`): the
  opening node is its first version and every event whose delta changes
  session-scoped keys is a later version (its payload's ``actions.state_delta`` is the
  change), linked to the version before; the state at any point is the fold of the
  versions up to it (:func:`fold_state`);
- an ``app:`` or ``user:`` key of a delta is one ``resource`` node of the key
  ``state:<key>`` (prefix removed) in the app's or user's graph, payload
  ``{"value": v, "session": id, "event": event id}``, linked to the key's version
  before. ``temp:`` keys are never stored.
"""

from __future__ import annotations

import calendar
import math
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import orjson
from google.adk.events.event import Event
from pydantic_core import to_jsonable_python

__all__ = [
    "APP_PREFIX",
    "SESSION_STATE_KEY",
    "STATE_KEY_PREFIX",
    "TEMP_PREFIX",
    "USER_PREFIX",
    "app_graph",
    "decode_event",
    "encode_event",
    "event_kind",
    "event_time",
    "fold_state",
    "json_safe",
    "opening_time",
    "session_graph",
    "session_part",
    "session_prefix",
    "split_delta",
    "split_session_graph",
    "state_key",
    "time_text",
    "user_graph",
    "user_prefix",
]

APP_PREFIX = "app:"
USER_PREFIX = "user:"
TEMP_PREFIX = "temp:"
STATE_KEY_PREFIX = "state:"
"""In an app's or user's graph, the resource key of a state key ``k`` is ``state:k``."""
SESSION_STATE_KEY = "state"
"""In a session's graph, the resource key whose versions change the session's state."""

_MAX_EPOCH = 253402300800.0
"""Year 10000: ``createdAt`` has four-digit years."""


def _esc(part: str) -> str:
    return part.replace("%", "%25").replace(":", "%3A")


def _unesc(part: str) -> str:
    return part.replace("%3A", ":").replace("%25", "%")


def app_graph(app: str) -> str:
    """The graph of an app's ``app:`` state."""
    return f"adk:app:{_esc(app)}"


def user_graph(app: str, user: str) -> str:
    """The graph of a user's ``user:`` state within an app."""
    return f"adk:user:{_esc(app)}:{_esc(user)}"


def user_prefix(app: str) -> str:
    """What every user graph of ``app`` starts with."""
    return f"adk:user:{_esc(app)}:"


def session_graph(app: str, user: str, session_id: str) -> str:
    """The graph of one session: its events and its session-scoped state."""
    return f"adk:session:{_esc(app)}:{_esc(user)}:{_esc(session_id)}"


def session_prefix(app: str, user: str | None) -> str:
    """What every session graph of ``app`` (of ``user``, when given) starts with."""
    if user is None:
        return f"adk:session:{_esc(app)}:"
    return f"adk:session:{_esc(app)}:{_esc(user)}:"


def split_session_graph(name: str) -> tuple[str, str, str]:
    """(app, user, session id) of a session graph's name."""
    tag, scope, app, user, session_id = name.split(":")
    if (tag, scope) != ("adk", "session"):
        raise ValueError(f"not an ADK session graph: {name!r}")
    return _unesc(app), _unesc(user), _unesc(session_id)


def state_key(key: str) -> str:
    """The resource key holding state key ``key`` (already without its scope prefix)."""
    return STATE_KEY_PREFIX + key


def json_safe(value: Any) -> Any:
    """A state value as JSON: rich values (datetimes, models) as pydantic writes them,
    anything JSON cannot hold (a callable) as its ``str``, as ADK's database service
    stores it."""
    return to_jsonable_python(value, fallback=str)


def split_delta(delta: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(app, user, session) parts of a state delta, scope prefixes removed from the
    first two, ``temp:`` keys dropped, values made JSON-safe."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in delta.items():
        if key.startswith(APP_PREFIX):
            app[key.removeprefix(APP_PREFIX)] = json_safe(value)
        elif key.startswith(USER_PREFIX):
            user[key.removeprefix(USER_PREFIX)] = json_safe(value)
        elif not key.startswith(TEMP_PREFIX):
            session[key] = json_safe(value)
    return app, user, session


def time_text(ts: float) -> str | None:
    """``createdAt`` text holding the float ``ts`` exactly: the UTC second, then the
    digits after the point of ``repr(ts)`` (the shortest text that reads back as the
    same float). ``None`` when there is none (negative, past year 9999, not finite):
    the event keeps its ``timestamp`` in the payload then."""
    if not math.isfinite(ts) or ts < 0 or ts >= _MAX_EPOCH:
        return None
    text = repr(float(ts))
    if "e" in text or "." not in text:
        return None
    whole, frac = text.split(".")
    second = datetime.fromtimestamp(int(whole), tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{second}.{frac}Z"


def _time_of_text(text: str) -> float:
    second, _, frac = text.rstrip("Z").partition(".")
    whole = calendar.timegm(time.strptime(second, "%Y-%m-%dT%H:%M:%S"))
    return float(f"{whole}.{frac or '0'}")


def _fallback_created_at(ts: float) -> str:
    clamped = min(max(ts, 0.0), _MAX_EPOCH - 1) if math.isfinite(ts) else 0.0
    return datetime.fromtimestamp(clamped, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_time(created_at: str, payload: Mapping[str, Any]) -> float:
    """The exact timestamp of a stored event (or opening node)."""
    ts = payload.get("timestamp")
    if isinstance(ts, int | float):
        return float(ts)
    return _time_of_text(created_at)


def event_kind(event: Event) -> str:
    """The runtime's kind for an event: ``protocol_error`` (an error code),
    ``tool_call`` (function calls), ``tool_result`` (function responses), ``goal``
    (the user's), ``answer`` (a final response with content), ``inference`` (any
    other)."""
    if event.error_code:
        return "protocol_error"
    if event.get_function_calls():
        return "tool_call"
    if event.get_function_responses():
        return "tool_result"
    if event.author == "user":
        return "goal"
    if event.content is not None and event.is_final_response():
        return "answer"
    return "inference"


def encode_event(event: Event) -> tuple[dict[str, Any], str]:
    """(payload, createdAt) of an event's node. The state delta's values are made
    JSON-safe (:func:`json_safe`), ``None`` values kept."""
    payload: dict[str, Any] = event.model_dump(
        mode="json", exclude_none=True, exclude_defaults=True, fallback=str
    )
    delta = event.actions.state_delta
    if delta:
        payload.setdefault("actions", {})["state_delta"] = {
            k: json_safe(v) for k, v in delta.items()
        }
    created_at = time_text(event.timestamp)
    if created_at is None:
        payload["timestamp"] = event.timestamp
        created_at = _fallback_created_at(event.timestamp)
    else:
        payload.pop("timestamp", None)
    return payload, created_at


def session_part(delta: Mapping[str, Any]) -> dict[str, Any]:
    """The session-scoped keys of a stored delta (no ``app:``, ``user:``, ``temp:``)."""
    return {
        k: v for k, v in delta.items() if not k.startswith((APP_PREFIX, USER_PREFIX, TEMP_PREFIX))
    }


def fold_state(deltas: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The session-scoped state after the versions of the ``state`` key, oldest first
    (the opening node's initial state, then each event's delta): the last value of each
    key wins, a ``None`` value included."""
    state: dict[str, Any] = {}
    for delta in deltas:
        state.update(session_part(delta))
    return state


def opening_time(ts: float) -> tuple[dict[str, Any], str]:
    """(extra payload fields, createdAt) of a session's opening node at ``ts``."""
    created_at = time_text(ts)
    if created_at is None:
        return {"timestamp": ts}, _fallback_created_at(ts)
    return {}, created_at


def decode_event(payload_text: str, created_at: str) -> Event:
    """The event a node holds, as it was appended."""
    payload = orjson.loads(payload_text)
    payload["timestamp"] = event_time(created_at, payload)
    return Event.model_validate(payload)
