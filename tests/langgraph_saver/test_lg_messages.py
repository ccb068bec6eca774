"""A stored message is rebuilt without validating it again (the saver's read path):
held equal here to what LangChain's ``messages_from_dict`` rebuilds and to the message
stored, pydantic's internals included, over the shapes agents write; any other dict
goes through ``messages_from_dict``. A LangChain or pydantic upgrade that changes what a
message holds fails here instead of in reads."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from cwstore.langgraph._mapping import message_from_dict, message_payload

_MESSAGES: list[BaseMessage] = [
    HumanMessage("hello"),
    HumanMessage("hi", id="m-1", name="ann"),
    HumanMessage(
        [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}]
    ),
    HumanMessage("with kwargs", additional_kwargs={"k": [1, 2.5, None], "n": {"a": "b"}}),
    AIMessage("plain answer", id="a-1"),
    AIMessage(
        "",
        tool_calls=[
            {"name": "add", "args": {"a": 1, "b": 2}, "id": "call-1"},
            {"name": "get", "args": {}, "id": "call-2", "type": "tool_call"},
        ],
        usage_metadata={
            "input_tokens": 10,
            "output_tokens": 5,
            "total_tokens": 15,
            "input_token_details": {"cache_read": 3},
        },
        response_metadata={"model_name": "m", "finish_reason": "tool_calls"},
        id="a-2",
    ),
    AIMessage(
        [{"type": "text", "text": "part"}],
        invalid_tool_calls=[
            {"name": "f", "args": "{bad", "id": "c", "error": "oops", "type": "invalid_tool_call"}
        ],
        name="bot",
    ),
    AIMessage("legacy", additional_kwargs={"function_call": {"name": "f", "arguments": "{}"}}),
    ToolMessage("3", tool_call_id="call-1", name="add", id="t-1"),
    ToolMessage("failed", tool_call_id="call-2", status="error", artifact={"raw": [1, 2]}),
    SystemMessage("you are terse"),
    SystemMessage([{"type": "text", "text": "rules"}], name="sys", id="s-1"),
    AIMessageChunk(content="chunk", id="c-1"),
    ChatMessage(content="hey", role="critic"),
    FunctionMessage(content="out", name="f"),
    RemoveMessage(id="m-1"),
]


def _equal(a: BaseMessage, b: BaseMessage) -> None:
    assert type(a) is type(b)
    assert a == b
    assert a.__dict__ == b.__dict__
    assert a.model_dump() == b.model_dump()
    assert message_to_dict(a) == message_to_dict(b)


def _same(a: BaseMessage, b: BaseMessage) -> None:
    """Equal, and the same to pydantic (the fields given, extra and private state)."""
    _equal(a, b)
    assert a.model_fields_set == b.model_fields_set
    assert a.__pydantic_extra__ == b.__pydantic_extra__
    assert a.__pydantic_private__ == b.__pydantic_private__


@pytest.mark.parametrize("message", _MESSAGES, ids=lambda m: type(m).__name__)
def test_rebuilt_equals_messages_from_dict_and_the_original(message: BaseMessage) -> None:
    as_dict = message_to_dict(message)
    fast = message_from_dict(as_dict)
    _same(fast, messages_from_dict([as_dict])[0])
    _equal(fast, message)


@pytest.mark.parametrize(
    "message",
    [m for m in _MESSAGES if m.type in ("human", "ai", "system", "tool")],
    ids=lambda m: type(m).__name__,
)
def test_the_four_common_types_are_built_without_validation(
    message: BaseMessage, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_dict = message_to_dict(message)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("validated again")

    slow = messages_from_dict([as_dict])[0]
    monkeypatch.setattr(type(message), "__init__", refuse)
    _same(message_from_dict(as_dict), slow)


def test_a_dict_without_every_field_goes_through_messages_from_dict() -> None:
    as_dict = message_to_dict(AIMessage("x", id="a"))
    del as_dict["data"]["usage_metadata"]
    _same(message_from_dict(as_dict), messages_from_dict([as_dict])[0])


# A tuple content is what does not come back equal; pydantic warns when it dumps one.
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
def test_a_message_is_stored_as_its_dict_only_when_it_comes_back_equal() -> None:
    serde = JsonPlusSerializer()
    stored = message_payload(serde, "messages", AIMessage("x", id="a"))
    assert stored["message"] == message_to_dict(AIMessage("x", id="a"))
    odd = AIMessage.model_construct(content=("a", "tuple"))  # JSON gives back a list
    assert "message" not in message_payload(serde, "messages", odd)
