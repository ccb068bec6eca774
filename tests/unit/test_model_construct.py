"""CausalNode.from_obj builds what pydantic's model_construct builds, faster: held equal
here for nodes with and without a resource key, so a pydantic upgrade that changes a
model's internals fails this test instead of reads."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from support.documents import GraphBuilder

from cwstore import CausalNode


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
