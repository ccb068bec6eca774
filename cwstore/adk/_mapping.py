"""How an ADK session becomes cwstore graphs: pure rules, no I/O.

Names (:func:`session_graph`, :func:`app_graph`, :func:`user_graph`): every part is
escaped (``%`` as ``%25``, ``:`` as ``%3A``) and joined with ``:`` after a tag that
says which scope the graph holds, so an escaped part never holds a ``:`` and the
name is injective: two different (app, user, session) triples never share a graph,
and an app's, a user's and a session's graph never share a name either.

Nodes:

- a session opens with one ``system`` node (no parents), payload
  ``{"adk": "session", "app", "user", "id"}``;
- an event is one node of the runtime's kind (:func:`event_kind`) whose parents are
  the previous event (or the opening node) and the state nodes written with it; its
  payload is the event as ADK's own JSON (``model_dump(mode="json")``) without
  ``None`` and default values, and without ``timestamp`` when ``createdAt`` holds it
  exactly (:func:`time_text`);
- a state delta is one ``resource`` node per changed key, key ``state:<key>``
  (``app:``/``user:`` prefixes removed in the app's and user's graphs), payload
  ``{"value": v}`` in the session's graph (its parent is the event that set it) and
  ``{"value": v, "session": id, "event": event id}`` in the app's and user's graphs.
  ``temp:`` keys are never stored.
"""

from __future__ import annotations

import calendar
import math
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson
from google.adk.events.event import Event
from pydantic_core import to_jsonable_python

__all__ = [
    "APP_PREFIX",
    "STATE_KEY_PREFIX",
    "TEMP_PREFIX",
    "USER_PREFIX",
    "app_graph",
    "decode_event",
    "encode_event",
    "event_kind",
    "event_time",
    "json_safe",
    "opening_time",
    "session_graph",
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
"""The resource key of a state key ``k`` is ``state:k``."""

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
    """(payload, createdAt) of an event's node."""
    payload: dict[str, Any] = event.model_dump(
        mode="json", exclude_none=True, exclude_defaults=True, fallback=str
    )
    created_at = time_text(event.timestamp)
    if created_at is None:
        payload["timestamp"] = event.timestamp
        created_at = _fallback_created_at(event.timestamp)
    else:
        payload.pop("timestamp", None)
    return payload, created_at


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
