"""The OpenAI Agents SDK's sessions on cwstore (the ``openai-agents`` extra).

Each session is a cwstore graph: every ``add_items`` batch one node of the kind of its
last item, ``pop_item`` and ``clear_session`` nodes that retract, never delete
(docs/openai-agents.md). :class:`CwstoreSession` runs on an :class:`~cwstore.AsyncStore`.
"""

from ._session import CwstoreSession

__all__ = ["CwstoreSession"]
