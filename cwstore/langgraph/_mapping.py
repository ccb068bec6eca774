"""How a LangGraph thread becomes a cwstore graph: pure planning, no I/O.

One LangGraph thread and checkpoint namespace is one cwstore graph (:func:`graph_name`).
A :meth:`put` becomes one append batch:

- a message of a messages channel (a list of LangChain messages, as ``add_messages``
  keeps it) is one node, written once: ``goal`` for a human message, ``tool_call`` for a
  model message that calls tools, ``answer`` for another model message, ``tool_result``
  for a tool message, ``system`` for a system message, ``inference`` for any other. Each
  message node's parent is the message before it, and the messages of one channel form
  the chain of the key ``lg:msg:<channel>``; a checkpoint names its list as segments of
  such chains (key, first version, last version), so a step that adds one message
  writes one node and never hands the whole list over again;
- every other channel's value is encoded as plain JSON when JSON holds it exactly, else
  as the serializer's typed bytes in base64. A small one (at most :data:`INLINE_BYTES`
  of text) is held inline by the checkpoint's node, written again in each checkpoint
  that holds it; a larger one, when its version changed, is one ``resource`` node of
  the key ``lg:ch:<channel>``, and one whose version did not change is not written
  again: the checkpoint points at the node it already has;
- the checkpoint itself is one small ``verification`` node of the key
  ``lg:cp:<checkpoint_id>`` whose payload holds the checkpoint's fields (ids, versions,
  metadata) and its inline values, and points at the nodes holding its other values (a
  checkpoint stored before values were held inline names them all); its parents are
  the parent checkpoint's node, the nodes the step wrote and, for a step of the loop,
  the parent's pending writes it applied (the head of their chain, when the saver
  knows it).

Branches (a fork from an old checkpoint, ``update_state`` on one, a replay): a key's
chain only ever links a version to the version it replaced in the checkpoint it was
derived from. When that version is no longer its key's head (another branch has moved
the key on), the new version starts a new chain ``<key>@<checkpoint_id>`` (the
checkpoint that forked), with the replaced version as its parent: the true causal edge,
and none to the other branch's versions. A value stored as a node after one held
inline replaced no node: it is a first value, with no parent of its key.

Pending writes (:meth:`put_writes`) are one ``resource`` node per call, in the chain
``lg:w:<checkpoint_id>``, with the checkpoint's node as a parent once it is stored. A
write may arrive before its checkpoint (LangGraph's background saves, even from another
process): it is found by its key either way.

A channel value or pending write longer than 1 MiB of JSON text is stored in parts
(:mod:`cwstore.langgraph._parts`): its node names them, and they are appended first, in
the same transaction.
"""

from __future__ import annotations

import base64
import json
import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, NamedTuple

import orjson
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)
from langgraph.checkpoint.base import WRITES_IDX_MAP
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from cwstore import DatabaseError, InputError, Row

from ._parts import BIG_BYTES, Blob, b64_length, blob_of, make_blob

__all__ = [
    "CP_KIND",
    "CheckpointState",
    "Ref",
    "Segment",
    "checkpoint_key",
    "decode_value",
    "encode_big",
    "encode_value",
    "graph_name",
    "message_kind",
    "thread_prefix",
    "writes_key",
]

CP_KIND = "verification"
"""The kind of a checkpoint's node: no other node of a LangGraph graph has it, so the
graph's checkpoints are listed from the per-kind index."""
_MSG = "lg:msg:"
"""The prefix of message chains' keys."""

_MAX_SAFE = 2**53 - 1


def _escape(thread_id: str) -> str:
    return thread_id.replace("%", "%25").replace(":", "%3A")


def graph_name(thread_id: str, checkpoint_ns: str) -> str:
    """The cwstore graph of a thread's namespace: ``langgraph:<thread>`` for the root
    namespace, ``langgraph:<thread>:<namespace>`` for a subgraph's (``%`` and ``:`` in
    the thread id are escaped, so the name is unambiguous)."""
    base = "langgraph:" + _escape(thread_id)
    return base if not checkpoint_ns else f"{base}:{checkpoint_ns}"


def thread_prefix(thread_id: str) -> str:
    """The root graph's name; a subgraph's name starts with it and a ``:``."""
    return graph_name(thread_id, "")


def checkpoint_key(checkpoint_id: str) -> str:
    return "lg:cp:" + checkpoint_id


def writes_key(checkpoint_id: str) -> str:
    return "lg:w:" + checkpoint_id


def is_plain_json(value: Any, depth: int = 0) -> bool:
    """Whether JSON holds ``value`` exactly, so it comes back equal and of the same
    types (no tuples, no integral floats, which JSON would read back as ints; no
    integers JavaScript cannot hold, no NaN, no lone surrogates; no subclasses, such as
    a ``str`` or ``int`` enum, which JSON would read back as the plain value)."""
    if depth > 100:
        return False
    kind = type(value)
    if value is None or kind is bool:
        return True
    if kind is str:
        return _no_surrogates(value)
    if kind is int:
        return bool(-_MAX_SAFE <= value <= _MAX_SAFE)
    if kind is float:
        return math.isfinite(value) and not value.is_integer()
    if type(value) is list:
        return all(is_plain_json(v, depth + 1) for v in value)
    if type(value) is dict:
        return all(
            type(k) is str and _no_surrogates(k) and is_plain_json(v, depth + 1)
            for k, v in value.items()
        )
    return False


def checked_text(what: str, value: Any) -> str:
    """``value`` as text (``str()`` of it, as LangGraph's savers take ids), refused with
    :class:`~cwstore.InputError` naming ``what`` when it holds U+0000 or a lone
    surrogate, which PostgreSQL text cannot."""
    text = str(value)
    if "\x00" in text or not _no_surrogates(text):
        raise InputError(f"{what} cannot hold U+0000 or a lone surrogate: {text!r}")
    return text


def _no_surrogates(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def stores_json(serde: SerializerProtocol) -> bool:
    """Whether values JSON holds exactly are stored as plain JSON (readable by SQL):
    only with LangGraph's ``JsonPlusSerializer`` (the default). Any other serializer,
    an ``EncryptedSerializer`` above all, is given every value."""
    return isinstance(serde, JsonPlusSerializer)


def as_primitive(value: Any) -> Any:
    """A channel value as LangGraph's PostgreSQL saver reads it back: an instance of a
    subclass of ``str``, ``int`` or ``float`` (a ``str`` or ``int`` enum) is stored there
    inline as JSON, so it comes back as the plain value; anything else as it is."""
    kind = type(value)
    if kind in (str, int, float, bool) or not isinstance(value, str | int | float):
        return value
    return json.loads(json.dumps(value))


def encode_value(serde: SerializerProtocol, value: Any) -> dict[str, Any]:
    """A value as payload members: ``{"json": v}`` when JSON holds it exactly and the
    serializer allows it (:func:`stores_json`), else ``{"serde": type, "b64": data}``
    (the serializer's typed bytes)."""
    if is_plain_json(value) and stores_json(serde):
        return {"json": value}
    kind, data = serde.dumps_typed(value)
    return {"serde": kind, "b64": base64.b64encode(data).decode("ascii")}


def encode_big(serde: SerializerProtocol, value: Any) -> tuple[dict[str, Any], Blob | None]:
    """A value as payload members, as :func:`encode_value` gives them when they are at
    most :data:`~cwstore.langgraph._parts.BIG_BYTES` of text; else members that name
    its parts, and the parts (see :mod:`cwstore.langgraph._parts`)."""
    members, blob, _ = encode_sized(serde, value)
    return members, blob


def encode_sized(serde: SerializerProtocol, value: Any) -> tuple[dict[str, Any], Blob | None, int]:
    """What :func:`encode_big` gives, and the length in bytes of the value's text in
    the members (its JSON text, or the base64 of the serializer's bytes)."""
    if is_plain_json(value) and stores_json(serde):
        # Not orjson: for a long string it reserves about 12 bytes a character.
        text = dumps(value).encode("utf-8")
        if len(text) <= BIG_BYTES:
            return {"json": value}, None, len(text)
        blob = make_blob(("text", "json"), text)
        size = len(text)
    else:
        kind, data = serde.dumps_typed(value)
        size = b64_length(len(data))
        if size <= BIG_BYTES:
            return {"serde": kind, "b64": base64.b64encode(data).decode("ascii")}, None, size
        blob = make_blob(("serde", kind), data)
    return blob.ref(), blob, size


def decode_value(
    serde: SerializerProtocol,
    payload: Mapping[str, Any],
    datas: Mapping[str, bytes] | None = None,
) -> Any:
    """The value :func:`encode_value` (or :func:`encode_big`) encoded; a value stored
    in parts from its bytes in ``datas``, by parts key."""
    if "json" in payload:
        return payload["json"]
    if "parts" in payload:
        data = (datas or {})[payload["parts"][0]]
        if "text" in payload:  # not orjson: it takes about 13 bytes a character of a string
            return json.loads(data)
        return serde.loads_typed((payload["serde"], data))
    return serde.loads_typed((payload["serde"], base64.b64decode(payload["b64"])))


def part_refs(payload: Mapping[str, Any]) -> list[list[Any]]:
    """The parts (``[key, count, bytes]``) a value node's payload, or a writes node's,
    names."""
    if "parts" in payload:
        return [payload["parts"]]
    return [v["parts"] for _, _, v in payload.get("writes", ()) if "parts" in v]


def writes_blobs(
    payload: Mapping[str, Any], datas: Mapping[str, bytes]
) -> tuple[dict[str, Any], list[Blob]]:
    """A writes node's payload read back (its values' bytes in ``datas``) as it is
    written again: the payload, each value stored in parts named anew, and the parts."""
    blobs: list[Blob] = []
    writes = []
    for idx, channel, value in payload["writes"]:
        if "parts" in value:
            blob = blob_of(value, datas)
            blobs.append(blob)
            value = blob.ref()
        writes.append([idx, channel, value])
    return {**payload, "writes": writes}, blobs


def message_kind(message: BaseMessage) -> str:
    """The cwstore kind of a LangChain message (see the module's docstring)."""
    if isinstance(message, HumanMessage):
        return "goal"
    if isinstance(message, AIMessage):
        return "tool_call" if message.tool_calls else "answer"
    if isinstance(message, ToolMessage):
        return "tool_result"
    if isinstance(message, SystemMessage):
        return "system"
    return "inference"


def is_message_list(value: Any) -> bool:
    return (
        type(value) is list
        and bool(value)
        and all(map(isinstance, value, repeat(BaseMessage, len(value))))
    )


def message_payload(
    serde: SerializerProtocol, channel: str, message: BaseMessage
) -> dict[str, Any]:
    """A message's node payload: LangChain's own dict of it (readable JSON) when that
    round-trips exactly, else the serializer's bytes."""
    if not stores_json(serde):
        return {"channel": channel, **encode_value(serde, message)}
    as_dict = message_to_dict(message)
    if is_plain_json(as_dict):
        try:
            back = message_from_dict(as_dict)
        except Exception:  # a message class LangChain cannot rebuild from its dict
            back = None
        if back == message and type(back) is type(message):
            return {"channel": channel, "message": as_dict}
    return {"channel": channel, **encode_value(serde, message)}


@dataclass(frozen=True)
class _Plain:
    """A message class whose instances :func:`message_from_dict` may build directly."""

    cls: type[BaseMessage]
    fields: frozenset[str]
    extra: dict[str, Any] | None


def _plain(cls: type[BaseMessage]) -> _Plain | None:
    """``cls`` when pydantic's ``model_construct`` would only store the fields given
    (no aliases, no post-init, not a root model), else ``None``."""
    fields = cls.model_fields
    if (
        cls.__pydantic_post_init__
        or cls.__pydantic_root_model__
        or any(f.alias is not None or f.validation_alias is not None for f in fields.values())
    ):
        return None
    extra: dict[str, Any] | None = {} if cls.model_config.get("extra") == "allow" else None
    return _Plain(cls, frozenset(fields), extra)


_PLAIN = {
    name: plain
    for name, cls in (
        ("human", HumanMessage),
        ("ai", AIMessage),
        ("system", SystemMessage),
        ("tool", ToolMessage),
    )
    if (plain := _plain(cls)) is not None
}
_new = object.__new__
_set = object.__setattr__


def _plain_for(as_dict: Mapping[str, Any]) -> _Plain | None:
    """The class of the message ``as_dict`` holds when :func:`_construct` may build it:
    a human, AI, system or tool message whose data holds exactly its class's fields."""
    plain = _PLAIN.get(as_dict.get("type", ""))
    data = as_dict.get("data")
    if plain is None or type(data) is not dict or data.keys() != plain.fields:
        return None
    return plain


def _construct(plain: _Plain, data: dict[str, Any]) -> BaseMessage:
    """The message of class ``plain`` whose fields are ``data`` (taken as its own), built
    as pydantic's ``model_construct`` builds it."""
    message = _new(plain.cls)
    _set(message, "__dict__", data)
    _set(message, "__pydantic_fields_set__", set(data))
    _set(message, "__pydantic_extra__", None if plain.extra is None else {})
    _set(message, "__pydantic_private__", None)
    return message


def message_from_dict(as_dict: Mapping[str, Any]) -> BaseMessage:
    """The message LangChain's ``messages_from_dict`` rebuilds from ``message_to_dict``'s
    dict, without validating it again when it can: a human, AI, system or tool message
    whose dict holds exactly its class's fields is built as pydantic's
    ``model_construct`` builds it (a stored message was dumped from a valid one, and
    :func:`message_payload` stores a dict only when this function gives the message
    back equal). Any other dict goes through ``messages_from_dict``. The message takes
    ``as_dict["data"]`` as its own: the caller must not use that dict again."""
    plain = _plain_for(as_dict)
    if plain is None:
        return messages_from_dict([dict(as_dict)])[0]
    return _construct(plain, as_dict["data"])


def message_from_payload(serde: SerializerProtocol, payload: Mapping[str, Any]) -> Any:
    if "message" in payload:
        return message_from_dict(payload["message"])
    return decode_value(serde, payload)


def message_bytes(text: str) -> int:
    """About how much memory a message whose node payload is ``text`` takes, parsed or
    as an object, in bytes."""
    return 3 * len(text) + 200


def _copy(value: Any) -> Any:
    """A copy of a JSON value, its dicts and lists new all the way down."""
    if type(value) is dict:
        return {k: _copy(v) for k, v in value.items()}
    if type(value) is list:
        return [_copy(v) for v in value]
    return value


class MessageMaker:
    """Makes the value a message node's payload (its JSON text) holds, a new one each
    call (a caller may change what it is given): the first from the parsed text, later
    ones, for a plain message (see :func:`message_from_dict`), from a copy of its fields
    parsed once more and kept. ``size`` is about what it holds in memory, in bytes."""

    __slots__ = ("_data", "_made", "_nested", "_payload", "_plain", "_serde", "_text", "size")

    def __init__(self, serde: SerializerProtocol, text: str) -> None:
        self._serde = serde
        self._text = text
        self._made = False
        self._payload: dict[str, Any] | None = None
        self._plain: _Plain | None = None
        self._data: dict[str, Any] = {}
        self._nested: tuple[str, ...] = ()
        self.size = message_bytes(text)

    def _keep(self, payload: dict[str, Any]) -> None:
        message = payload.get("message")
        if type(message) is dict and (plain := _plain_for(message)) is not None:
            self._plain = plain
            self._data = message["data"]
            self._nested = tuple(k for k, v in self._data.items() if type(v) in (dict, list))
        self._payload = payload
        self._text = ""

    def __call__(self) -> Any:
        if self._payload is None:
            payload = orjson.loads(self._text)
            if not self._made:
                self._made = True
                return message_from_payload(self._serde, payload)
            self._keep(payload)
        plain = self._plain
        if plain is None:
            return message_from_payload(self._serde, _copy(self._payload))
        data = self._data.copy()
        for key in self._nested:
            value = data[key]
            data[key] = _copy(value) if value else type(value)()
        return _construct(plain, data)


class Ref(NamedTuple):
    """A channel value held by one node: its id, its key and its version in the key's
    chain. (A named tuple: a read builds one per message.)"""

    node_id: str
    key: str
    version: int


@dataclass(frozen=True)
class Segment:
    """Versions ``first..last`` of a message chain ``key``."""

    key: str
    first: int
    last: int

    def as_json(self) -> list[Any]:
        return [self.key, self.first, self.last]


def _extend_segments(out: list[Segment], refs: Iterable[Ref]) -> list[Segment]:
    """``out`` followed by the versions ``refs`` name, runs of one key merged."""
    for ref in refs:
        last = out[-1] if out else None
        if last is not None and last.key == ref.key and last.last + 1 == ref.version:
            out[-1] = Segment(last.key, last.first, ref.version)
        else:
            out.append(Segment(ref.key, ref.version, ref.version))
    return out


@dataclass
class MessageList:
    """A messages channel's value in one checkpoint: the messages, their nodes (with
    key and version), and the segments that name them."""

    messages: list[Any]
    refs: list[Ref]
    _segments: list[Segment] | None = field(default=None, repr=False, compare=False)
    size: int = field(default=0, compare=False)
    """About how much memory the messages take, in bytes (see :func:`message_bytes`)."""

    def segments(self) -> list[Segment]:
        """The segments, computed once."""
        if self._segments is None:
            self._segments = _extend_segments([], self.refs)
        return self._segments

    def followed_by(
        self, messages: list[Any], keep: int, refs: Sequence[Ref], added: int
    ) -> MessageList:
        """The list ``messages``: this list's first ``keep`` messages, then those of
        ``refs`` (taking about ``added`` bytes). When it keeps all of this list, its
        segments extend this list's, so a put that adds a message costs the same at any
        length."""
        segments = None
        size = self.size
        if keep == len(self.refs):
            segments = _extend_segments(list(self.segments()), refs)
        elif self.refs:
            size = size * keep // len(self.refs)
        return MessageList(messages, [*self.refs[:keep], *refs], segments, size + added)


@dataclass
class CheckpointState:
    """What a put needs to know of the parent checkpoint: its node, the node holding
    each of its channel values stored apart, the channels whose value its node holds
    inline (a put stores the value its checkpoint gives again, as LangGraph's
    PostgreSQL saver does, so the state does not hold it), and its message lists."""

    node_id: str | None
    values: dict[str, Ref] = field(default_factory=dict)
    messages: dict[str, MessageList] = field(default_factory=dict)
    inline: set[str] = field(default_factory=set)

    def size(self) -> int:
        """About how much memory the state takes, in bytes: its messages, refs and
        inline channels' names."""
        refs = (
            len(self.values) + len(self.inline) + sum(len(m.refs) for m in self.messages.values())
        )
        return 200 + 120 * refs + sum(m.size for m in self.messages.values())


def same_message(a: Any, b: Any) -> bool:
    return a is b or (type(a) is type(b) and a == b)


def common_prefix(old: Sequence[Any], new: Sequence[Any]) -> int:
    n = min(len(old), len(new))
    if all(map(operator.is_, old[:n], new[:n])):  # the usual case: the same objects
        return n
    for i in range(n):
        if not same_message(old[i], new[i]):
            return i
    return n


def is_special_write(idx: int) -> bool:
    return idx < 0


def write_index(channel: str, position: int) -> int:
    return WRITES_IDX_MAP.get(channel, position)


def fold_writes(batches: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str, int, Any]]:
    """The pending writes of a checkpoint from its write nodes' payloads, oldest first:
    ``(task_path, task_id, channel, idx, encoded value)`` in LangGraph's order (task
    path, task id, index). A write given again keeps its first value, except the
    special channels (errors, interrupts, ...), whose last value wins, as in LangGraph's
    PostgreSQL saver."""
    found: dict[tuple[str, int], tuple[str, str, str, int, Any]] = {}
    for batch in batches:
        task, path = batch["task"], batch.get("path", "")
        for idx, channel, value in batch["writes"]:
            k = (task, idx)
            if k not in found or is_special_write(idx):
                found[k] = (path, task, channel, idx, value)
    return sorted(found.values(), key=lambda w: (w[0], w[1], w[3]))


def writes_node(
    checkpoint_id: str, payload: Any, heads: Heads, blobs: Sequence[Blob] = ()
) -> tuple[dict[str, Any], tuple[str, int]]:
    """The node of one :meth:`put_writes` call for the checkpoint ``checkpoint_id`` and
    the new head of its key: its parents are the key's head and the checkpoint's node
    (when ``heads`` names them), and the last part of each value stored in parts."""
    from cwstore import compute_id

    key = writes_key(checkpoint_id)
    head, cp_head = heads.get(key), heads.get(checkpoint_key(checkpoint_id))
    parents = sorted({h[0] for h in (head, cp_head) if h is not None} | {b.ids[-1] for b in blobs})
    node_id = compute_id("resource", parents, payload, key)
    node = {
        "id": node_id,
        "kind": "resource",
        "parents": parents,
        "payload": payload,
        "resourceKey": key,
    }
    return node, (node_id, head[1] + 1 if head else 1)


def contains(doc: Any, pattern: Any) -> bool:
    """Whether ``doc`` contains ``pattern`` as PostgreSQL's ``jsonb @>`` decides it for
    their JSON (LangGraph's PostgreSQL saver filters metadata so): an object contains
    the members of another it contains, an array every element another's element
    contains (a tuple is an array), a scalar one equal to it (numbers by value, ``True``
    not ``1``); at the top, an array also contains a scalar it holds."""
    return _contains(doc, pattern, top=True)


def _contains(doc: Any, pattern: Any, *, top: bool = False) -> bool:
    if isinstance(pattern, dict):
        return isinstance(doc, dict) and all(
            k in doc and _contains(doc[k], v) for k, v in pattern.items()
        )
    if isinstance(pattern, list | tuple):
        return isinstance(doc, list | tuple) and all(
            any(_contains(d, p) for d in doc) for p in pattern
        )
    if isinstance(doc, list | tuple):
        return top and any(
            _contains(d, pattern) for d in doc if not isinstance(d, list | tuple | dict)
        )
    if isinstance(doc, dict):
        return False
    if isinstance(pattern, bool) or isinstance(doc, bool):
        return type(doc) is type(pattern) and doc == pattern
    if isinstance(pattern, int | float) and isinstance(doc, int | float):
        return doc == pattern
    return type(doc) is type(pattern) and bool(doc == pattern)


DELTA_METADATA = ("counters_since_delta_snapshot", "delta_writes_versioned")
"""Metadata keys a thread using a ``DeltaChannel`` leaves in its checkpoints."""


def uses_delta_channel(metadata: Mapping[str, Any]) -> bool:
    """Whether a checkpoint's metadata shows its thread uses a ``DeltaChannel`` (whose
    value is rebuilt from older checkpoints' writes, so ``keep_latest`` cannot prune
    it), as LangGraph's PostgreSQL saver decides."""
    return any(k in metadata for k in DELTA_METADATA)


def dumps(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def message_makers(serde: SerializerProtocol, texts: Mapping[str, str]) -> dict[str, MessageMaker]:
    """The makers of message nodes by id, given their payloads' JSON text by id (a
    put's :attr:`PutPlan.texts`)."""
    return {node_id: MessageMaker(serde, text) for node_id, text in texts.items()}


Heads = Mapping[str, tuple[str, int] | None]
"""A key's head (node id, version), ``None`` when the key has no version yet."""


def _base_key(prefix: str, channel: str) -> str:
    return f"{prefix}{channel}"


def _root_key(key: str) -> str:
    return key.split("@", 1)[0]


INLINE_BYTES = 512
"""A channel value (not a message list) whose text in the payload (its JSON text, or the
base64 of the serializer's bytes) is at most this many bytes is stored inline in the
checkpoint's node, not as a node of its own. A node has a fixed cost on the server
(checks, derived rows) that checking a few hundred bytes more of the checkpoint's
payload does not approach; LangGraph's small channels (``branch:to:<node>``, the input
of ``__start__``, a task's input) are mostly written once and consumed at the next
step, so they are seldom carried. A value carried unchanged is copied into each
checkpoint (as LangGraph's PostgreSQL saver copies its inline values), which the bound
keeps small."""


@dataclass
class PutPlan:
    """The append batch of one put, and the state the checkpoint holds after it.

    Built in two steps: :meth:`keys` names the keys whose heads the plan needs (the
    caller reads those it does not know), then :meth:`build` makes the nodes.
    """

    serde: SerializerProtocol
    checkpoint: Mapping[str, Any]
    metadata: Mapping[str, Any]
    new_versions: Mapping[str, Any]
    parent_id: str | None
    parent: CheckpointState
    nodes: list[dict[str, Any]] = field(default_factory=list)
    state: CheckpointState = field(default_factory=lambda: CheckpointState(None))
    written: dict[str, tuple[str, int]] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    """The JSON text of each new message node's payload, by id."""
    blobs: list[Blob] = field(default_factory=list)
    """The values stored in parts: their part nodes go before :attr:`nodes`."""
    inline: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The members of each value the checkpoint's node holds inline, by channel."""
    _encoded: dict[str, tuple[dict[str, Any], Blob | None, int]] | None = field(
        default=None, init=False, repr=False
    )

    @property
    def checkpoint_id(self) -> str:
        return str(self.checkpoint["id"])

    def _channels(self) -> list[tuple[str, Any, bool]]:
        """(channel, value, changed) for every channel the checkpoint holds."""
        values = self.checkpoint["channel_values"]
        versions = self.checkpoint.get("channel_versions", {})
        names = [c for c in values if c in versions or c in self.new_versions]
        return [(c, values[c], c in self.new_versions) for c in names]

    def _encode(self) -> dict[str, tuple[dict[str, Any], Blob | None, int]]:
        """The channel values (not message lists) the put stores, encoded once (see
        :func:`encode_sized`): each changed or first value, and each value the parent
        held inline (stored inline again, as the checkpoint gives it)."""
        if self._encoded is None:
            self._encoded = {
                channel: encode_sized(self.serde, as_primitive(value))
                for channel, value, changed in self._channels()
                if not is_message_list(value) and (changed or channel not in self.parent.values)
            }
        return self._encoded

    @staticmethod
    def _is_inline(encoded: tuple[dict[str, Any], Blob | None, int]) -> bool:
        return encoded[1] is None and encoded[2] <= INLINE_BYTES

    def keys(self) -> set[str]:
        """The keys the plan may extend: their heads decide between extending a chain
        and starting a branch."""
        out = {checkpoint_key(self.checkpoint_id)}
        encoded = self._encode()
        for channel, value, _ in self._channels():
            if is_message_list(value):
                old = self.parent.messages.get(channel)
                out.add(old.refs[-1].key if old and old.refs else _base_key(_MSG, channel))
            elif channel in encoded and not self._is_inline(encoded[channel]):
                ref = self.parent.values.get(channel)
                out.add(ref.key if ref else _base_key("lg:ch:", channel))
        return out

    def _next(self, heads: Heads, prev: Ref | None, base: str) -> tuple[str, int, list[str]]:
        """The key, version and parents of a new version that replaces ``prev`` (the
        version in the parent checkpoint; ``None`` for a first value, or one the
        parent held inline)."""
        if prev is not None:
            if heads.get(prev.key) == (prev.node_id, prev.version):
                return prev.key, prev.version + 1, [prev.node_id]
            return f"{_root_key(prev.key)}@{self.checkpoint_id}", 1, [prev.node_id]
        if heads.get(base) is None:
            return base, 1, []
        return f"{base}@{self.checkpoint_id}", 1, []

    def _node(self, kind: str, parents: list[str], payload: Any, key: str, version: int) -> str:
        from cwstore import compute_id

        parents = sorted(set(parents))
        node_id = compute_id(kind, parents, payload, key)
        self.nodes.append(
            {
                "id": node_id,
                "kind": kind,
                "parents": parents,
                "payload": payload,
                "resourceKey": key,
            }
        )
        self.written[key] = (node_id, version)
        return node_id

    def build(self, heads: Heads) -> None:
        """Make the batch: new values, new messages, then the checkpoint node."""
        tips: list[str] = []
        encoded = self._encode()
        versions = self.checkpoint.get("channel_versions", {})
        for channel, value, _ in self._channels():
            if is_message_list(value):
                self._messages(heads, channel, value, tips)
            elif channel not in encoded:
                self.state.values[channel] = self.parent.values[channel]
            elif self._is_inline(encoded[channel]):
                self.inline[channel] = {"version": versions.get(channel), **encoded[channel][0]}
                self.state.inline.add(channel)
            else:
                key, version, parents = self._next(
                    heads, self.parent.values.get(channel), _base_key("lg:ch:", channel)
                )
                members, blob, _ = encoded[channel]
                payload = {"channel": channel, "version": versions.get(channel), **members}
                if blob is not None:
                    self.blobs.append(blob)
                    parents = [*parents, blob.ids[-1]]
                node_id = self._node("resource", parents, payload, key, version)
                self.state.values[channel] = Ref(node_id, key, version)
                tips.append(node_id)
        self._checkpoint_node(heads, tips)

    def _messages(self, heads: Heads, channel: str, value: list[Any], tips: list[str]) -> None:
        old = self.parent.messages.get(channel) or MessageList([], [])
        keep = common_prefix(old.messages, value)
        refs: list[Ref] = []
        added = 0
        if keep < len(value):
            prev = old.refs[keep - 1] if keep else None
            key, version, parents = self._next(heads, prev, _base_key(_MSG, channel))
            for message in value[keep:]:
                payload = message_payload(self.serde, channel, message)
                node_id = self._node(message_kind(message), parents, payload, key, version)
                text = self.texts[node_id] = dumps(payload)
                added += message_bytes(text)
                refs.append(Ref(node_id, key, version))
                parents, version = [node_id], version + 1
            tips.append(refs[-1].node_id)
        self.state.messages[channel] = old.followed_by(list(value), keep, refs, added)

    def _checkpoint_node(self, heads: Heads, tips: list[str]) -> None:
        key = checkpoint_key(self.checkpoint_id)
        parents = list(tips)
        if self.parent.node_id is not None:
            parents.append(self.parent.node_id)
        if self.parent_id is not None and self.metadata.get("source") == "loop":
            # A step of the loop applied the parent's pending writes (the last batch the
            # saver knows of): with them as parents, the graph's own frontier after the
            # put is this node, as the put declares it.
            writes = heads.get(writes_key(self.parent_id))
            if writes is not None:
                parents.append(writes[0])
        head = heads.get(key)
        if head is not None:  # the same checkpoint put again: a new version of it
            parents.append(head[0])
        rest = {k: v for k, v in self.checkpoint.items() if k not in ("id", "ts", "channel_values")}
        payload = {
            "checkpoint_id": self.checkpoint_id,
            "parent_checkpoint_id": self.parent_id,
            "ts": self.checkpoint.get("ts"),
            "metadata": encode_value(self.serde, dict(self.metadata)),
            "checkpoint": encode_value(self.serde, rest),
            "values": {c: r.node_id for c, r in self.state.values.items()},
            "inline": self.inline,
            "messages": {
                c: [s.as_json() for s in m.segments()] for c, m in self.state.messages.items()
            },
        }
        version = head[1] + 1 if head else 1
        self.state.node_id = self._node(CP_KIND, parents, payload, key, version)


@dataclass
class Loaded:
    """A stored checkpoint read back: the sequence of its node, the node's payload, its
    values, the state a put from it starts with, and its write batches as stored."""

    seq: int
    payload: dict[str, Any]
    channel_values: dict[str, Any]
    state: CheckpointState
    write_batches: list[dict[str, Any]]
    datas: dict[str, bytes] = field(default_factory=dict)
    """The bytes of its values stored in parts, by parts key."""


def missing_runs(
    stored: Sequence[Stored], known: Mapping[str, Any]
) -> tuple[list[str], list[str], list[int]]:
    """The runs of the checkpoints' message nodes not in ``known``, for the query
    ``payloads``: for each, its key, its first node's id and its length (of runs from
    the same node, the longest: it holds the others)."""
    runs: dict[tuple[str, str], int] = {}

    def end(key: str, start: str | None, count: int) -> None:
        if start is not None:
            runs[key, start] = max(runs.get((key, start), 0), count)

    for item in stored:
        for _, key, _, _, ids in item.segments():
            start: str | None = None
            count = 0
            for node_id in ids:
                if node_id in known:
                    end(key, start, count)
                    start = None
                elif start is None:
                    start, count = node_id, 1
                else:
                    count += 1
            end(key, start, count)
    return [k for k, _ in runs], [i for _, i in runs], list(runs.values())


@dataclass
class Stored:
    """A stored checkpoint as its rows name it, its messages' payloads not read yet:
    the sequence and id of its node, the node's payload, its value nodes (ref and
    payload text), its pending writes' payload texts (oldest first) and the ids of its
    message nodes, every segment's in order."""

    seq: int
    node_id: str
    payload: dict[str, Any]
    values: list[tuple[Ref, str]]
    writes: list[str]
    message_ids: list[str]
    _nodes: list[Any] | None = field(default=None, repr=False, compare=False)

    def nodes(self) -> list[Any]:
        """The payloads of its value nodes, then of its writes nodes, parsed once."""
        if self._nodes is None:
            # One parse for all: about half the time of one parse each.
            texts = [t for _, t in self.values] + self.writes
            self._nodes = orjson.loads("[" + ",".join(texts) + "]")
        return self._nodes

    def part_refs(self) -> list[list[Any]]:
        """The parts (``[key, count, bytes]``) its values and writes name."""
        return [ref for node in self.nodes() for ref in part_refs(node)]

    def segments(self) -> list[tuple[str, str, int, int, list[str]]]:
        """Each segment of each messages channel, in order: channel, key, first and
        last version, node ids."""
        out = []
        at = 0
        for channel, segs in self.payload["messages"].items():
            for key, first, last in segs:
                out.append(
                    (channel, key, first, last, self.message_ids[at : at + last - first + 1])
                )
                at += last - first + 1
        return out


def read_checkpoints(rows: Sequence[Row]) -> list[Stored]:
    """The checkpoints the rows of the ``checkpoints`` query name (columns ``seq``,
    ``part``, ``key``, ``version``, ``last``, ``id``, ``payload_text``), in any order:
    newest first."""
    groups: dict[int, list[Row]] = {}
    for row in rows:
        groups.setdefault(row["seq"], []).append(row)
    return [_read_checkpoint(seq, groups[seq]) for seq in sorted(groups, reverse=True)]


def _read_checkpoint(seq: int, rows: Sequence[Row]) -> Stored:
    """One checkpoint from its rows (see the ``checkpoints`` query): its node's payload
    names its values and its message segments, each segment's row the ids of its nodes."""
    (head,) = [row for row in rows if row["part"] == -1]
    payload = orjson.loads(head["payload_text"])
    values = [
        (Ref(row["id"], row["key"], row["version"]), row["payload_text"])
        for row in rows
        if row["part"] == 0
    ]
    writes = sorted((row for row in rows if row["part"] == 2), key=lambda row: row["version"])
    segments = {
        (row["key"], row["version"], row["last"]): row["id"] for row in rows if row["part"] == 1
    }
    message_ids: list[str] = []
    for segs in payload["messages"].values():
        for key, first, last in segs:
            text = segments.get((key, first, last))
            ids = text.split(",") if text else []
            if len(ids) != last - first + 1:
                raise DatabaseError(
                    f"checkpoint node {head['id']}: {len(ids)} nodes read of versions "
                    f"{first}..{last} of {key}"
                )
            message_ids += ids
    return Stored(
        seq, head["id"], payload, values, [row["payload_text"] for row in writes], message_ids
    )


def load_checkpoint(
    serde: SerializerProtocol,
    stored: Stored,
    messages: Mapping[str, MessageMaker],
    datas: Mapping[str, bytes] | None = None,
) -> Loaded:
    """A checkpoint read back, each of its messages made by ``messages`` (by node id:
    every one of ``stored.message_ids``), each value stored in parts from its bytes in
    ``datas`` (by parts key: every one :meth:`Stored.part_refs` names)."""
    nodes = stored.nodes()
    kept = {ref[0]: (datas or {})[ref[0]] for ref in stored.part_refs()}
    state = CheckpointState(stored.node_id)
    channel_values: dict[str, Any] = {}
    by_id = {ref.node_id: (ref, node) for (ref, _), node in zip(stored.values, nodes, strict=False)}
    for channel, nid in stored.payload["values"].items():
        ref, node = by_id[nid]
        channel_values[channel] = decode_value(serde, node, kept)
        state.values[channel] = ref
    for channel, members in stored.payload.get("inline", {}).items():
        channel_values[channel] = decode_value(serde, members)
        state.inline.add(channel)
    for channel in stored.payload["messages"]:
        state.messages[channel] = MessageList([], [])
    for channel, key, first, last, ids in stored.segments():
        lst = state.messages[channel]
        lst.messages += [messages[node_id]() for node_id in ids]
        lst.size += sum(messages[node_id].size for node_id in ids)
        lst.refs += map(Ref, ids, repeat(key), range(first, last + 1))
    for channel, lst in state.messages.items():
        channel_values[channel] = list(lst.messages)
    return Loaded(
        stored.seq, stored.payload, channel_values, state, nodes[len(stored.values) :], kept
    )
