"""Google ADK sessions on cwstore: :class:`CwstoreSessionService`, a
``google.adk.sessions.BaseSessionService`` whose sessions are cwstore graphs
(docs/adk.md). Needs the ``adk`` extra (``google-adk``)."""

from ._service import CwstoreSessionService

__all__ = ["CwstoreSessionService"]
