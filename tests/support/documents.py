"""Runtime-faithful AgentState graphs for tests, demos and benchmarks.

:class:`GraphBuilder` appends nodes exactly the way the StateWeave runtime's
``CausalWeave.append`` does (``src/core/causalWeave.ts``)::

    parents = unique(parents if given else the current frontier)
    prev = heads[resource_key]            # the key's head, when the node has a key
    if prev and prev not in parents: parents.append(prev)
    parents.sort()
    id = compute_id(kind, parents, payload, resource_key)
    if id is new: store {id, kind, parents, payload, createdAt, sequence, resourceKey?}
    if advance: frontier -= parents; frontier -= {prev}; frontier += {id}
    if resource_key: heads[resource_key] = id

The frontier moves by the ``advance`` flag, which the node does not record. The
helpers pass the flag as the runtime's agent (``src/agent/agent.ts``) does: semantic
nodes and the first system node with ``advance=False``, everything else with
``advance=True``. Under that habit the builder's frontier equals SPEC section 4's fold
(:func:`cwstore.document.fold_frontier`), except when the first system node is appended
to a non-empty frontier or the same content is appended twice (both move the runtime's
frontier in ways the fold cannot see).

Timestamps come from a deterministic clock: ``createdAt`` of the n-th stored node
(0-based) is ``base_time + n * step_ms`` milliseconds, written as
``Date.prototype.toISOString`` writes it (``2026-12-02T14:38:31.376Z``).

:func:`generate_session` builds a seeded, random, multi-turn session (goals, tool calls
and results, versioned resources, superseded semantic keys, verifications, protocol
errors, branches, and optionally payloads that stress JSON fidelity).
:func:`example_turn` replays one real turn of the runtime node by node. :func:`reseal`
recomputes ids after a test edited a document, so a test can break exactly one rule.

Payloads are copied when a node is stored, so later changes to the caller's objects do
not reach the graph; :meth:`GraphBuilder.state` hands out copies too.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from cwstore import _jsontext
from cwstore.document import BUILTIN_TYPES, KINDS, semantic_resource_key, sort_parents
from cwstore.identity import compute_id

__all__ = [
    "DEFAULT_BASE_TIME",
    "EXAMPLE_FRONTIER",
    "GraphBuilder",
    "example_turn",
    "generate_session",
    "iso_millis",
    "odd_values",
    "reseal",
]

DEFAULT_BASE_TIME = "2026-12-02T14:38:31.376Z"
"""``createdAt`` of the first node a builder stores, unless told otherwise."""

_KIND_SET = frozenset(KINDS)


def iso_millis(moment: datetime) -> str:
    """``moment`` as JavaScript's ``Date.prototype.toISOString`` writes it (UTC, ms).

    A naive ``moment`` is taken to be UTC.
    """
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{moment.microsecond // 1000:03d}Z"


def _parse_time(value: str | datetime) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _copy_json(value: Any) -> Any:
    """A deep copy of a JSON value, iterative so any nesting depth is safe.

    Dicts and lists (tuples become lists) are copied with their member order; scalars
    are shared (they are immutable).
    """
    if not isinstance(value, dict | list | tuple):
        return value
    root: dict[str, Any] | list[Any] = {} if isinstance(value, dict) else []
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:
        src, dst = stack.pop()
        items = src.items() if isinstance(src, dict) else enumerate(src)
        for key, item in items:
            if isinstance(item, dict | list | tuple):
                child: dict[str, Any] | list[Any] = {} if isinstance(item, dict) else []
                stack.append((item, child))
                item = child
            if isinstance(dst, dict):
                dst[key] = item
            else:
                dst.append(item)
    return root


def _copy_node(node: dict[str, Any]) -> dict[str, Any]:
    out = dict(node)
    out["parents"] = list(node["parents"])
    out["payload"] = _copy_json(node["payload"])
    return out


class GraphBuilder:
    """Builds an AgentState graph the way the runtime's ``CausalWeave`` does.

    Parameters
    ----------
    base_time:
        ``createdAt`` of the first stored node (ISO text with a zone, or a datetime).
    step_ms:
        Milliseconds between the ``createdAt`` of consecutive stored nodes.
    """

    def __init__(self, *, base_time: str | datetime = DEFAULT_BASE_TIME, step_ms: int = 1) -> None:
        self._nodes: list[dict[str, Any]] = []
        self._by_id: dict[str, dict[str, Any]] = {}
        self._frontier: dict[str, None] = {}
        self._heads: dict[str, str] = {}
        self._base = _parse_time(base_time)
        self._step = timedelta(milliseconds=step_ms)

    # -- the runtime's primitive ---------------------------------------------------

    def append(
        self,
        kind: str,
        payload: Any,
        parents: Sequence[str] | None = None,
        resource_key: str | None = None,
        advance: bool = True,
        created_at: str | None = None,
    ) -> dict[str, Any]:
        """Append a node as ``CausalWeave.append`` does; return (a copy of) the node.

        Parameters
        ----------
        kind:
            One of the ten kinds.
        payload:
            Any JSON value free of :func:`cwstore._jsontext.problems`; it is copied.
        parents:
            The parents; ``None`` takes the current frontier. The resource key's head
            is added, then the list is made unique and sorted.
        resource_key:
            The node's resource key, or ``None``.
        advance:
            Move the frontier: remove the parents (and the key's previous head), add
            the node. The node does not record this flag.
        created_at:
            ``createdAt`` to store instead of the builder's clock.

        Returns
        -------
        The stored node as the runtime's JSON object. When a node with the same
        identity already exists, that node is returned and nothing is stored (the
        frontier and key head still move, as in the runtime).

        Raises
        ------
        ValueError
            For an unknown kind, an empty resource key, a parent that does not exist,
            or a payload that cannot be hashed faithfully.
        """
        if kind not in _KIND_SET:
            raise ValueError(f"kind {kind!r} is not one of the ten: {', '.join(KINDS)}")
        if resource_key == "":
            raise ValueError("resource_key must be a non-empty string or None")
        found = list(_jsontext.problems(payload))
        if found:
            code, where, message = found[0]
            raise ValueError(f"payload cannot be stored faithfully ({code} at {where}: {message})")
        chosen = list(dict.fromkeys(parents if parents is not None else self._frontier))
        for parent in chosen:
            if parent not in self._by_id:
                raise ValueError(f"parent {parent} does not exist")
        previous = self._heads.get(resource_key) if resource_key else None
        if previous is not None and previous not in chosen:
            chosen.append(previous)
        ordered = sort_parents(chosen)
        node_id = compute_id(kind, ordered, payload, resource_key)
        node = self._by_id.get(node_id)
        if node is None:
            node = {
                "id": node_id,
                "kind": kind,
                "parents": ordered,
                "payload": _copy_json(payload),
                "createdAt": created_at if created_at is not None else self._clock(),
                "sequence": len(self._nodes) + 1,
            }
            if resource_key is not None:
                node["resourceKey"] = resource_key
            self._nodes.append(node)
            self._by_id[node_id] = node
        if advance:
            for parent in ordered:
                self._frontier.pop(parent, None)
            if previous is not None:
                self._frontier.pop(previous, None)
            self._frontier.setdefault(node_id, None)
        if resource_key:
            self._heads[resource_key] = node_id
        return _copy_node(node)

    def _clock(self) -> str:
        return iso_millis(self._base + self._step * len(self._nodes))

    # -- reading -------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def frontier(self) -> list[str]:
        """The active heads, in the order they joined."""
        return list(self._frontier)

    @property
    def heads(self) -> dict[str, str]:
        """Each resource key's head (latest node with that key)."""
        return dict(self._heads)

    @property
    def nodes(self) -> list[dict[str, Any]]:
        """Copies of the stored nodes, in sequence order."""
        return [_copy_node(n) for n in self._nodes]

    def get(self, node_id: str) -> dict[str, Any] | None:
        """A copy of the node with this id, or ``None``."""
        node = self._by_id.get(node_id)
        return _copy_node(node) if node is not None else None

    def latest(self, kind: str) -> str | None:
        """The id of the latest stored node of ``kind``, or ``None``."""
        for node in reversed(self._nodes):
            if node["kind"] == kind:
                return str(node["id"])
        return None

    def context(self, recent: int = 10) -> list[str]:
        """Ids the runtime's prompt compiler always selects, in sequence order.

        The latest system and goal nodes, the frontier, every resource head and the
        last ``recent`` nodes: the runtime passes the compiled ids as the parents of
        tool calls, inferences and answers.
        """
        selected: set[str] = set(self._frontier)
        selected.update(self._heads.values())
        for kind in ("system", "goal"):
            latest = self.latest(kind)
            if latest is not None:
                selected.add(latest)
        selected.update(str(n["id"]) for n in self._nodes[-recent:] if recent > 0)
        return [str(n["id"]) for n in self._nodes if n["id"] in selected]

    def state(self) -> dict[str, Any]:
        """The AgentState v1 document ``{"version": 1, "nodes": [...], "frontier": [...]}``."""
        return {"version": 1, "nodes": self.nodes, "frontier": self.frontier}

    # -- the runtime agent's habits ------------------------------------------------

    def system(self, text: str, *, parents: Sequence[str] | None = None) -> dict[str, Any]:
        """The system contract: the first with ``advance=False``, a changed one with
        ``advance=True``; parents default to the frontier (empty in a new graph)."""
        first = self.latest("system") is None
        return self.append("system", text, parents, advance=not first)

    def goal(self, text: Any, *, parents: Sequence[str] | None = None) -> dict[str, Any]:
        """A user task (the runtime writes text; any JSON payload is accepted); parents
        default to the latest system node plus the frontier."""
        if parents is None:
            system = self.latest("system")
            parents = list(dict.fromkeys([*([system] if system else []), *self._frontier]))
        return self.append("goal", text, parents)

    def inference(self, text: Any, *, parents: Sequence[str] | None = None) -> dict[str, Any]:
        """Model output that was not an action (text, or ``{"unsupportedFinal": ...}``)."""
        return self.append("inference", text, parents)

    def tool_call(
        self,
        name: str,
        args: Any,
        *,
        raw: str | None = None,
        parents: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """``{"name", "args", "raw"}``; ``raw`` defaults to ``TOOL_CALL {"name","args"}``."""
        if raw is None:
            raw = "TOOL_CALL " + _jsontext.dumps({"name": name, "args": args})
        return self.append("tool_call", {"name": name, "args": args, "raw": raw}, parents)

    def tool_result(
        self, tool: str, result: Any, *, parents: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """``{"tool", "result"}`` (the runtime's parent is the call)."""
        return self.append("tool_result", {"tool": tool, "result": result}, parents)

    def resource(
        self,
        path: str,
        payload: Any,
        *,
        parents: Sequence[str] | None = None,
        advance: bool = True,
    ) -> dict[str, Any]:
        """A version of the resource keyed by ``path`` (linked to the key's head)."""
        return self.append("resource", payload, parents, resource_key=path, advance=advance)

    def semantic(
        self,
        semantic_type: str,
        key: str,
        content: Any,
        *,
        parents: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Semantic memory ``{"type", "key", "content"}`` under ``semantic:<type>:<key>``,
        appended with ``advance=False`` as the runtime does."""
        payload = {"type": semantic_type, "key": key, "content": content}
        return self.append(
            "semantic",
            payload,
            parents,
            resource_key=semantic_resource_key(semantic_type, key),
            advance=False,
        )

    def verification(
        self,
        method: str,
        *,
        parents: Sequence[str] | None = None,
        resource_key: str | None = None,
        advance: bool = True,
        **fields: Any,
    ) -> dict[str, Any]:
        """A verification record ``{"method": method, **fields}``."""
        return self.append(
            "verification", {"method": method, **fields}, parents, resource_key, advance
        )

    def answer(self, text: str, *, parents: Sequence[str] | None = None) -> dict[str, Any]:
        """The accepted final answer."""
        return self.append("answer", text, parents)

    def protocol_error(
        self, detail: Any, *, parents: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """An invalid or unsupported action (the runtime's parent is the inference)."""
        return self.append("protocol_error", detail, parents)


# -- editing documents in tests ------------------------------------------------------


def _utf16(s: str) -> bytes:
    return s.encode("utf-16-be", "surrogatepass")


def _identity(node: dict[str, Any]) -> str | None:
    """The node's identity, or None when its fields cannot be hashed."""
    kind, parents, rkey = node.get("kind"), node.get("parents"), node.get("resourceKey")
    if not isinstance(kind, str) or not isinstance(parents, list) or "payload" not in node:
        return None
    if not all(isinstance(p, str) for p in parents):
        return None
    if rkey is not None and not isinstance(rkey, str):
        return None
    if rkey is not None and _jsontext._bad_string(rkey):
        return None
    if any(True for _ in _jsontext.problems(node["payload"])):
        return None
    return compute_id(kind, parents, node["payload"], rkey)


def reseal(
    state: dict[str, Any],
    *,
    keep_ids: Iterable[int] = (),
    keep_parent_order: Iterable[int] = (),
) -> dict[str, str]:
    """Recompute every node's id in place after an edit; patch parents and frontier.

    Walks the nodes in order: maps each parent through the ids renamed so far, sorts
    the parents (not de-duplicating them) unless the node's index is in
    ``keep_parent_order``, and recomputes the id from the content as it now stands
    (the parents as listed) unless the index is in ``keep_ids``. Nodes that cannot be
    hashed (not an object, wrong field types, payload problems) keep their id. Finally
    the frontier is mapped through the renamed ids.

    Returns the map of old id to new id. Two nodes that share an id before the call
    share one entry, so reseal a document before duplicating ids in it.
    """
    keep_id = set(keep_ids)
    keep_order = set(keep_parent_order)
    renamed: dict[str, str] = {}
    nodes = state.get("nodes")
    if isinstance(nodes, list):
        for i, node in enumerate(nodes):
            if not isinstance(node, dict):
                continue
            parents = node.get("parents")
            if isinstance(parents, list):
                mapped = [renamed.get(p, p) if isinstance(p, str) else p for p in parents]
                if i not in keep_order and all(isinstance(p, str) for p in mapped):
                    mapped = sorted(mapped, key=_utf16)
                node["parents"] = mapped
            old = node.get("id")
            if i in keep_id or not isinstance(old, str):
                continue
            new = _identity(node)
            if new is not None and new != old:
                renamed[old] = new
                node["id"] = new
    frontier = state.get("frontier")
    if isinstance(frontier, list):
        state["frontier"] = [renamed.get(f, f) if isinstance(f, str) else f for f in frontier]
    return renamed


# -- generated sessions ----------------------------------------------------------------


def _nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for level in range(depth):
        value = {"level": level, "next": value} if level % 2 else [value]
    return value


def odd_values() -> list[Any]:
    """JSON values that stress fidelity: U+0000, astral characters, key order that
    differs between code point and ICU collation, 1e21, ±(2**53-1), 40-level nesting,
    integer-like keys (in JavaScript's property order), 0.1, 5e-324 and friends.
    Every value is storable (free of :func:`cwstore._jsontext.problems`)."""
    return [
        "nul\u0000inside and at the end\u0000",
        "astral \U0001f600 \U0001d11e \U0010ffff and BMP edge \uffff",
        {
            "b": 1,
            "C": 2,
            "a": 3,
            "apiKeyRef": 4,
            "api_key_ref": 5,
            "Zeta": 6,
            "-x": 7,
            "_y": 8,
            ".z": 9,
            "\u00e9clair": 10,
            "e\u0301clair": 11,
            "B": 12,
            "": 13,
        },
        # JavaScript lists integer-like keys first, ascending, whatever the insertion
        # order: the runtime can only write them this way.
        {
            "2": "two",
            "10": "ten",
            "4294967294": "largest index",
            "a": "a",
            "01": "zero-one",
            "4294967295": "not an index",
            "-1": "minus one",
            "1.5": "one and a half",
        },
        1e21,
        2**53 - 1,
        -(2**53 - 1),
        10**20,
        _nested(40, "bottom"),
        [0.1, 5e-324, 1e-7, 1.7976931348623157e308, -2.5e-5, 123456.789, 0.000001, 1e-6],
        {"line\u2028sep": "para\u2029sep", "ctl": "\u0001\u001f\u007f", "quote": '"\\/'},
        {"mixed": [None, True, False, 0, -0.5, "", [], {}]},
    ]


_SYSTEM_PROMPT = (
    "You are a StateWeave agent.\nTools: read_file, write_file, edit_file, bash_command."
    "\nSemantic types: memory, preference, wisdom, artifact"
)


def _hex(rng: random.Random) -> str:
    return f"{rng.getrandbits(256):064x}"


def generate_session(
    seed: int,
    turns: int,
    *,
    branches: bool = True,
    keys: int = 3,
    semantic_keys: int = 3,
    odd_payloads: bool = False,
    semantic_types: Sequence[str] = BUILTIN_TYPES,
    base_time: str | datetime = DEFAULT_BASE_TIME,
) -> dict[str, Any]:
    """A seeded, random, multi-turn AgentState that passes :func:`cwstore.document.validate`.

    Each turn appends a goal (parents: the latest system node and the frontier), one to
    four model iterations (tool calls with results, verifications, file resources on
    ``keys`` paths, semantic memory on ``semantic_keys`` keys, or invalid outputs with
    protocol errors), then an answer with semantic nodes. Some turns change the system
    prompt. With ``branches``, some iterations take only part of the frontier as
    parents, so the frontier holds several heads until a later node joins them. With
    ``odd_payloads``, tool arguments, results and semantic content carry
    :func:`odd_values`.

    Semantic types are drawn from ``semantic_types`` (default: the built-in four, so
    the state also validates under :meth:`cwstore.document.Vocabulary.builtin`). The
    returned frontier equals :func:`cwstore.document.fold_frontier` of the nodes. The same
    arguments always give the same document.

    Raises
    ------
    ValueError
        For negative counts or an empty ``semantic_types``.
    """
    if turns < 0 or keys < 0 or semantic_keys < 0:
        raise ValueError("turns, keys and semantic_keys must not be negative")
    if not semantic_types:
        raise ValueError("semantic_types must not be empty")
    rng = random.Random(seed)
    b = GraphBuilder(base_time=base_time)
    paths = [f"src/module_{i}.ts" for i in range(keys)]
    memory = [
        (semantic_types[i % len(semantic_types)], f"topic.{i}/note-{i}")
        for i in range(semantic_keys)
    ]
    odd = odd_values()
    written: set[str] = set()
    content_of: dict[str, str] = {}

    def extra() -> Any:
        return rng.choice(odd) if odd_payloads and rng.random() < 0.6 else None

    def add(obj: dict[str, Any], name: str) -> dict[str, Any]:
        value = extra()
        if value is not None:
            obj[name] = value
        return obj

    def parents_for_step() -> list[str]:
        """The compiled context, or with ``branches`` sometimes only part of it."""
        context = b.context()
        frontier = b.frontier
        if branches and frontier and rng.random() < 0.3:
            dropped = set(rng.sample(frontier, rng.randint(1, len(frontier))))
            part = [i for i in context if i not in dropped]
            goal = b.latest("goal")
            if goal is not None and goal not in part:
                part.append(goal)
            if part and dropped:
                return part
        return context

    def remember(parent: str, turn: int, step: int) -> None:
        for _ in range(rng.choice((0, 0, 1, 1, 2))):
            if not memory:
                return
            stype, skey = rng.choice(memory)
            content: Any = f"turn {turn} step {step}: fact {rng.randint(0, 10**6)}"
            if rng.random() < 0.3:
                content = {"summary": content, "confidence": rng.choice((0.5, 0.75, 1))}
            value = extra()
            if value is not None:
                content = {"note": content, "odd": value}
            check_new(b.semantic(stype, skey, content, parents=[parent]))

    def check_new(node: dict[str, Any]) -> dict[str, Any]:
        if node["sequence"] != len(b):
            raise RuntimeError("generate_session appended the same content twice")
        return node

    check_new(b.system(_SYSTEM_PROMPT))
    for turn in range(turns):
        if turn and rng.random() < 0.15:
            check_new(b.system(f"{_SYSTEM_PROMPT}\nRevision {turn}."))
        check_new(b.goal(f"Turn {turn}: task {rng.randint(0, 10**9)}"))
        for step in range(rng.randint(1, 4)):
            parents = parents_for_step()
            roll = rng.random()
            if roll < 0.12:
                inf = check_new(
                    b.inference(f"I will think about turn {turn} step {step}.", parents=parents)
                )
                check_new(
                    b.protocol_error(
                        "Planning prose is not an action. Return exactly one TOOL_CALL JSON "
                        "object or one FINAL response.",
                        parents=[inf["id"]],
                    )
                )
                continue
            if roll < 0.18:
                inf = check_new(
                    b.inference({"unsupportedFinal": f"Done with turn {turn}."}, parents=parents)
                )
                check_new(
                    b.protocol_error(
                        "Final is unsupported. Still required: verification. Continue with one "
                        "TOOL_CALL.",
                        parents=[inf["id"]],
                    )
                )
                continue
            name = rng.choice(("read_file", "write_file", "edit_file", "bash_command"))
            if not paths and name != "bash_command":
                name = "bash_command"
            path = rng.choice(paths) if paths else ""
            failed = rng.random() < 0.1
            digest = _hex(rng)
            args: dict[str, Any]
            result: dict[str, Any]
            if name == "write_file":
                text = f"export const value{turn}_{step} = {rng.randint(0, 9999)};\n"
                args = add({"file_path": path, "content": text}, "meta")
                result = {
                    "path": path,
                    "file_path": path,
                    "bytes": len(text),
                    "content_hash": digest,
                    "ok": True,
                }
            elif name == "edit_file":
                args = add({"file_path": path, "old_string": "value", "new_string": "v"}, "meta")
                result = {
                    "path": path,
                    "file_path": path,
                    "bytes": rng.randint(1, 999),
                    "content_hash": digest,
                    "ok": True,
                }
            elif name == "read_file":
                args = add({"file_path": path}, "meta")
                result = {
                    "path": path,
                    "file_path": path,
                    "offset": 0,
                    "limit": 500,
                    "content": content_of.get(path, ""),
                    "content_hash": digest,
                }
            else:
                target = rng.choice(paths) if paths else "index.js"
                args = add({"command": rng.choice((f"node --check {target}", "npm test"))}, "meta")
                result = {"exitCode": 0, "stdout": "", "stderr": ""}
            if failed:
                result = {"error": "EACCES: permission denied", "ok": False}
            add(result, "extra")
            call = check_new(b.tool_call(name, args, parents=parents))
            res = check_new(b.tool_result(name, result, parents=[call["id"]]))
            remember(res["id"], turn, step)
            if not failed:
                if name == "read_file" and path in written:
                    check_new(b.verification("post_mutation_read", path=path, parents=[res["id"]]))
                elif name == "bash_command" and args["command"].startswith("node --check"):
                    check_new(
                        b.verification("syntax_check", command=args["command"], parents=[res["id"]])
                    )
            if name != "bash_command":
                payload: dict[str, Any] = {"path": path, "operation": name}
                if "content_hash" in result:
                    payload["contentHash"] = result["content_hash"]
                if "bytes" in result:
                    payload["bytes"] = result["bytes"]
                payload["succeeded"] = not failed
                check_new(b.resource(path, payload, parents=[res["id"]]))
                if name in ("write_file", "edit_file") and not failed:
                    written.add(path)
                    content_of[path] = str(args.get("content", content_of.get(path, "")))
        answer = check_new(
            b.answer(f"Turn {turn} is done: {rng.randint(0, 10**6)}.", parents=parents_for_step())
        )
        remember(answer["id"], turn, -1)
    return b.state()


# -- one real turn of the runtime ----------------------------------------------------

EXAMPLE_FRONTIER = ("cw_6d0d15b277b2afce06bbec28",)
"""The frontier the runtime wrote for :func:`example_turn` (its answer node)."""

_HASH = "dd75320a2b92c1b521e0ad4da2488bcb7d853b2572b39c182e3c592e77f8a1e2"
_CONFIG = "src/config.js"


def example_turn() -> dict[str, Any]:
    """The document the runtime wrote for one turn, rebuilt node by node.

    The runtime (``Agent.run``: create ``src/config.js``, read it back, check its
    syntax, answer, remember three semantic values) wrote this state; here every node is
    appended with the runtime's kind, payload, parents, key, ``advance`` flag and
    ``createdAt``, so the result equals the runtime's JSON, ids included (the runtime
    computed them; :data:`EXAMPLE_FRONTIER` is its frontier). 16 nodes: a system node,
    a goal, three tool calls with results, two versions of one file resource, two
    verifications, an answer and three semantic nodes (one written before the answer
    with ``advance=False``).
    """
    b = GraphBuilder()

    def at(ms: int) -> str:
        return f"2026-12-02T14:38:31.{ms:03d}Z"

    def add(
        kind: str,
        payload: Any,
        parents: list[str],
        ms: int,
        *,
        key: str | None = None,
        advance: bool = True,
    ) -> str:
        node = b.append(kind, payload, parents, key, advance, created_at=at(ms))
        return str(node["id"])

    system = add("system", _SYSTEM_PROMPT, [], 376, advance=False)
    goal = add(
        "goal",
        "Create src/config.js exporting the default port 8080 and check it parses.",
        [system],
        383,
    )
    write_args = {"file_path": _CONFIG, "content": "export const port = 8080;\n"}
    call1 = add(
        "tool_call",
        {
            "name": "write_file",
            "args": write_args,
            "raw": "TOOL_CALL " + _jsontext.dumps({"name": "write_file", "args": write_args}),
        },
        [system, goal],
        383,
    )
    result1 = add(
        "tool_result",
        {
            "tool": "write_file",
            "result": {
                "path": _CONFIG,
                "file_path": _CONFIG,
                "bytes": 26,
                "content_hash": _HASH,
                "ok": True,
            },
        },
        [call1],
        385,
    )
    resource1 = add(
        "resource",
        {
            "path": _CONFIG,
            "operation": "write_file",
            "contentHash": _HASH,
            "bytes": 26,
            "succeeded": True,
        },
        [result1],
        386,
        key=_CONFIG,
    )
    port = "The service listens on port 8080 (src/config.js)."
    call2 = add(
        "tool_call",
        {
            "name": "read_file",
            "args": {"file_path": _CONFIG},
            "raw": "TOOL_CALL "
            + _jsontext.dumps(
                {
                    "name": "read_file",
                    "args": {"file_path": _CONFIG},
                    "state": [{"type": "memory", "key": "config.port", "content": port}],
                }
            ),
        },
        [system, goal, call1, result1, resource1],
        386,
    )
    result2 = add(
        "tool_result",
        {
            "tool": "read_file",
            "result": {
                "path": _CONFIG,
                "file_path": _CONFIG,
                "offset": 0,
                "limit": 500,
                "content": "export const port = 8080;\n",
                "content_hash": _HASH,
            },
        },
        [call2],
        386,
    )
    memory = add(
        "semantic",
        {"type": "memory", "key": "config.port", "content": port},
        [result2],
        387,
        key="semantic:memory:config.port",
        advance=False,
    )
    check1 = add("verification", {"method": "post_mutation_read", "path": _CONFIG}, [result2], 387)
    resource2 = add(
        "resource",
        {"path": _CONFIG, "operation": "read_file", "contentHash": _HASH, "succeeded": True},
        [result2],
        388,
        key=_CONFIG,
    )
    command = "node --check src/config.js"
    call3 = add(
        "tool_call",
        {
            "name": "bash_command",
            "args": {"command": command},
            "raw": "TOOL_CALL "
            + _jsontext.dumps({"name": "bash_command", "args": {"command": command}}),
        },
        [system, goal, call1, result1, resource1, call2, result2, memory, check1, resource2],
        388,
    )
    result3 = add(
        "tool_result",
        {"tool": "bash_command", "result": {"exitCode": 0, "stdout": "", "stderr": ""}},
        [call3],
        528,
    )
    check2 = add("verification", {"method": "syntax_check", "command": command}, [result3], 528)
    answer = add(
        "answer",
        "Created src/config.js with `port = 8080`; `node --check` passes.",
        [
            system,
            goal,
            result1,
            resource1,
            call2,
            result2,
            memory,
            check1,
            resource2,
            call3,
            result3,
            check2,
        ],
        528,
    )
    add(
        "semantic",
        {
            "type": "artifact",
            "key": _CONFIG,
            "content": {"path": _CONFIG, "summary": "default port config"},
        },
        [answer],
        529,
        key=f"semantic:artifact:{_CONFIG}",
        advance=False,
    )
    add(
        "semantic",
        {"type": "preference", "key": "code-style", "content": "ES modules, named exports"},
        [answer],
        529,
        key="semantic:preference:code-style",
        advance=False,
    )
    return b.state()
