"""Workloads for the benchmarks: a fast generator of realistic sessions, and the
agent-session steps shared by cwstore and LangGraph.

:func:`generate_nodes` builds an AgentState of any length in one pass (linear time:
``tests.support.documents.generate_session`` recomputes the prompt context on every step, which
is quadratic at a million nodes). The shape follows the runtime agent's habits: a
system contract, then turns of goal -> tool call -> tool result -> file resource
version (a chain per path) -> semantic memory (a chain per key) -> verification ->
answer, with parallel tool calls now and then so the frontier holds several heads. Every
node has one to three parents, and the document passes ``cwstore.validate``; its
frontier is SPEC section 4's fold of its nodes.

:func:`agent_steps` gives the steps of an agent session as plain messages, which the
LangGraph side turns into LangChain messages and the cwstore side into nodes, so both
stores hold the same content.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from cwstore import compute_id
from cwstore._jsontext import dumps

BASE_TIME = datetime(2026, 12, 2, 14, 38, 31, 376000, tzinfo=UTC)

SYSTEM_PROMPT = (
    "You are a careful coding agent. Work in small verified steps. Reply with exactly one "
    "TOOL_CALL JSON object or one FINAL response."
)
_TOOLS = ("read_file", "write_file", "edit_file", "bash_command")


def _vocabulary(size: int = 4000) -> tuple[str, ...]:
    """Pseudo-words and code tokens: text that compresses about as well as real tool
    output does (a tiny vocabulary would let TOAST compression flatter the stores)."""
    rng = random.Random(1)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(size)]
    for i in range(0, size, 7):
        words[i] = (
            rng.choice(("const ", "return ", "if (", "await ", "// "))
            + words[i]
            + (rng.choice(("();", " = 0;", ") {", ".json()", f"[{rng.randint(0, 99)}]")))
        )
    return tuple(words)


_WORDS = _vocabulary()


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)) + f" {rng.getrandbits(32):08x}"


@dataclass
class Doc:
    """Appends nodes the way the runtime does, tracking the fold frontier."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    frontier: dict[str, None] = field(default_factory=dict)
    heads: dict[str, str] = field(default_factory=dict)

    def add(self, kind: str, payload: Any, parents: list[str], key: str | None = None) -> str:
        chosen = list(dict.fromkeys(parents))
        if key is not None:
            head = self.heads.get(key)
            if head is not None and head not in chosen:
                chosen.append(head)
        chosen.sort()  # ids are ASCII: code point order is the runtime's order
        node_id = compute_id(kind, chosen, payload, key)
        seq = len(self.nodes) + 1
        node: dict[str, Any] = {
            "id": node_id,
            "kind": kind,
            "parents": chosen,
            "payload": payload,
            "createdAt": _iso(BASE_TIME + timedelta(milliseconds=seq)),
            "sequence": seq,
        }
        if key is not None:
            node["resourceKey"] = key
            self.heads[key] = node_id
        self.nodes.append(node)
        if not (kind == "semantic" or (kind == "system" and not chosen)):
            for p in chosen:
                self.frontier.pop(p, None)
            self.frontier[node_id] = None
        return node_id


def generate_nodes(count: int, seed: int = 7, *, paths: int = 50, memory_keys: int = 40) -> dict:
    """A valid AgentState of exactly ``count`` nodes (``count`` >= 1), deterministic by seed.

    ``paths`` file resources and ``memory_keys`` semantic keys are versioned over the
    session, so resource chains grow long (about ``count / 8 / paths`` versions each).
    """
    rng = random.Random(seed)
    d = Doc()
    system = d.add("system", SYSTEM_PROMPT, [])
    turn = 0
    memory = [
        (("memory", "preference", "wisdom", "artifact")[i % 4], f"topic.{i}/note-{i}")
        for i in range(memory_keys)
    ]
    while len(d.nodes) < count:
        turn += 1
        if turn % 97 == 0:
            system = d.add("system", f"{SYSTEM_PROMPT}\nRevision {turn}.", [system])
        goal = d.add("goal", f"Turn {turn}: {_text(rng, 12)}", [system, *list(d.frontier)[:2]])
        tails = [goal]
        for step in range(rng.randint(1, 4)):
            if len(d.nodes) >= count:
                break
            parallel = rng.random() < 0.15
            lanes = 2 if parallel else 1
            new_tails = []
            for lane in range(lanes):
                if len(d.nodes) >= count:
                    break
                tool = rng.choice(_TOOLS)
                path = f"src/module_{rng.randrange(paths)}.ts"
                args: dict[str, Any] = {"file_path": path}
                if tool in ("write_file", "edit_file"):
                    args["content"] = _text(rng, rng.randint(10, 40))
                elif tool == "bash_command":
                    args = {"command": f"node --check {path}"}
                args["step"] = f"{turn}.{step}.{lane}"  # the same call twice is one node
                call_parents = [goal, *tails] if lane == 0 else [goal]
                call = d.add(
                    "tool_call",
                    {
                        "name": tool,
                        "args": args,
                        "raw": "TOOL_CALL " + dumps({"name": tool, "args": args}),
                    },
                    call_parents,
                )
                if len(d.nodes) >= count:
                    break
                result = d.add(
                    "tool_result",
                    {
                        "tool": tool,
                        "result": {
                            "path": path,
                            "ok": True,
                            "bytes": rng.randint(10, 9999),
                            "content_hash": f"{rng.getrandbits(256):064x}",
                            "content": _text(rng, rng.randint(5, 60)),
                        },
                    },
                    [call],
                )
                tail = result
                if tool != "bash_command" and len(d.nodes) < count:
                    tail = d.add(
                        "resource",
                        {
                            "path": path,
                            "operation": tool,
                            "contentHash": f"{turn}-{step}-{lane}",
                            "succeeded": True,
                        },
                        [result],
                        key=path,
                    )
                if rng.random() < 0.3 and len(d.nodes) < count:
                    stype, skey = rng.choice(memory)
                    d.add(
                        "semantic",
                        {
                            "type": stype,
                            "key": skey,
                            "content": f"turn {turn} step {step}: {_text(rng, 8)}",
                        },
                        [tail],
                        key=f"semantic:{stype}:{skey}",
                    )
                if tool == "bash_command" and rng.random() < 0.5 and len(d.nodes) < count:
                    tail = d.add(
                        "verification",
                        {"method": "syntax_check", "command": args["command"], "ok": True},
                        [tail],
                    )
                new_tails.append(tail)
            tails = new_tails or tails
        if len(d.nodes) < count:
            d.add("answer", f"Turn {turn} is done: {_text(rng, 10)}", [goal, *tails][:3])
    return {"version": 1, "nodes": d.nodes, "frontier": list(d.frontier)}


# --- the agent session shared with LangGraph ------------------------------------------


@dataclass(frozen=True)
class Message:
    """One message of an agent step: ``role`` is user, assistant or tool."""

    role: str
    text: str
    tool: str | None = None
    args: dict[str, Any] | None = None
    call_id: str | None = None


def agent_steps(steps: int, seed: int = 11) -> list[list[Message]]:
    """The new messages of each step of a coding-agent session.

    Every step is one model turn: a tool call with its arguments and the tool's result
    (a file excerpt or command output, 0.3-0.8 KB); every tenth step starts with a new
    user goal and ends with the assistant's answer. The state grows every step.
    """
    rng = random.Random(seed)
    out: list[list[Message]] = []
    for i in range(steps):
        msgs: list[Message] = []
        if i % 10 == 0:
            msgs.append(Message("user", f"Task {i // 10}: {_text(rng, 30)}"))
        tool = rng.choice(_TOOLS)
        path = f"src/module_{rng.randrange(20)}.ts"
        args: dict[str, Any] = (
            {"command": f"npm test -- {path}"} if tool == "bash_command" else {"file_path": path}
        )
        if tool in ("write_file", "edit_file"):
            args["content"] = _text(rng, rng.randint(20, 60))
        call_id = f"call_{i:05d}"
        msgs.append(Message("assistant", f"Step {i}: {_text(rng, 15)}", tool, args, call_id))
        msgs.append(Message("tool", _text(rng, rng.randint(40, 110)), tool, None, call_id))
        if i % 10 == 9:
            msgs.append(Message("assistant", f"Done with task {i // 10}: {_text(rng, 25)}"))
        out.append(msgs)
    return out
