"""CausalNode.from_obj and nodes_from_objs build what pydantic's model_construct
builds: held equal here for nodes with and without a resource key, so a pydantic
upgrade that changes a model's internals fails this test instead of reads."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from support.documents import GraphBuilder

from cwstore import CausalNode
from cwstore.document import nodes_from_objs


def _objs() -> list[dict[str, Any]]:
    b = GraphBuilder()
    b.system("s")
    b.goal("g")
    b.resource("src/a.py", {"text": "x"})
    b.semantic("fact", "k", {"v": [1, 2.5, None]})
    return [dict(n) for n in b.nodes]


@pytest.mark.parametrize("obj", _objs(), ids=lambda o: o["kind"])
def test_from_obj_equals_model_construct(obj: dict[str, Any]) -> None:
    fast = CausalNode.from_obj(obj)
    slow = CausalNode.model_construct(
        id=obj["id"],
        kind=obj["kind"],
        parents=tuple(obj["parents"]),
        payload=obj["payload"],
        created_at=obj["createdAt"],
        sequence=int(obj["sequence"]),
        **({"resource_key": obj["resourceKey"]} if "resourceKey" in obj else {}),
    )
    assert fast == slow
    assert fast.__dict__ == slow.__dict__
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.__pydantic_extra__ == slow.__pydantic_extra__
    assert fast.__pydantic_private__ == slow.__pydantic_private__
    assert fast.to_obj() == obj
    assert fast.model_dump() == slow.model_dump()
    assert fast.model_dump_json() == slow.model_dump_json()
    with pytest.raises(pydantic.ValidationError):  # frozen, like any CausalNode
        fast.id = "x"


def test_nodes_from_objs_equals_from_obj() -> None:
    objs = _objs()
    many = nodes_from_objs(objs)
    assert isinstance(many, tuple)
    for built, obj in zip(many, objs, strict=True):
        one = CausalNode.from_obj(obj)
        assert built == one
        assert built.__dict__ == one.__dict__
        assert built.model_fields_set == one.model_fields_set
        assert built.payload is obj["payload"]  # the parsed payload, not a copy
        assert built.to_obj() == obj
    keyed = [n for n in many if n.resource_key is not None]
    assert keyed and all("resource_key" in n.model_fields_set for n in keyed)
