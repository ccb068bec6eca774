"""The oracle of the causal walks (ancestors, descendants, path): a breadth-first
search over a graph's parent links, in Python."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence


def depths(parents: Mapping[str, Sequence[str]], start: str, up: bool) -> dict[str, int]:
    """Minimal depth of every ancestor (``up``) or descendant of ``start``, in the graph
    whose nodes' parents ``parents`` gives by node id."""
    children: dict[str, list[str]] = {}
    for node, ps in parents.items():
        for p in ps:
            children.setdefault(p, []).append(node)
    depth = {start: 0}
    queue = deque([start])
    while queue:
        cur = queue.popleft()
        for other in parents[cur] if up else children.get(cur, []):
            if other not in depth:
                depth[other] = depth[cur] + 1
                queue.append(other)
    del depth[start]
    return depth
