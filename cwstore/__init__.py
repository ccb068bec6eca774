"""cwstore: the PostgreSQL backend where StateWeave agents keep their durable state.

Public names only; everything else is private and may move.
"""

from ._rows import node_from_row
from ._sql import named_queries
from .appending import PreparedAppend, prepare_append
from .document import (
    KINDS,
    AgentState,
    CausalNode,
    NodeLike,
    StateLike,
    Vocabulary,
    fold_frontier,
    validate,
)
from .drivers._protocol import AsyncConnection, AsyncListener, Connection, Listener, Row
from .errors import (
    AppendOnlyError,
    ChainConflictError,
    ConflictError,
    DatabaseError,
    DivergedError,
    Error,
    GraphErasedError,
    GraphExistsError,
    InputError,
    LengthConflictError,
    MigrationError,
    PermissionDeniedError,
    SchemaNotReadyError,
    StoreTimeoutError,
    UnknownGraphError,
    ValidationError,
    Violation,
)
from .identity import canonical_json, compute_id
from .results import (
    Cursor,
    ErasedGraph,
    ErasedIdleGraph,
    ErasedItem,
    FrontierHead,
    GraphInfo,
    IdleGraph,
    KeyVersion,
    MemoryEntry,
    NodeRef,
    Projection,
    ResourceHead,
    TailItem,
)
from .store import Store, connect_sync
from .store_async import AsyncStore, connect

__version__ = "0.1.0"

__all__ = [
    "KINDS",
    "AgentState",
    "AppendOnlyError",
    "AsyncConnection",
    "AsyncListener",
    "AsyncStore",
    "CausalNode",
    "ChainConflictError",
    "ConflictError",
    "Connection",
    "Cursor",
    "DatabaseError",
    "DivergedError",
    "ErasedGraph",
    "ErasedIdleGraph",
    "ErasedItem",
    "Error",
    "FrontierHead",
    "GraphErasedError",
    "GraphExistsError",
    "GraphInfo",
    "IdleGraph",
    "InputError",
    "KeyVersion",
    "LengthConflictError",
    "Listener",
    "MemoryEntry",
    "MigrationError",
    "NodeLike",
    "NodeRef",
    "PermissionDeniedError",
    "PreparedAppend",
    "Projection",
    "ResourceHead",
    "Row",
    "SchemaNotReadyError",
    "StateLike",
    "Store",
    "StoreTimeoutError",
    "TailItem",
    "UnknownGraphError",
    "ValidationError",
    "Violation",
    "Vocabulary",
    "__version__",
    "canonical_json",
    "compute_id",
    "connect",
    "connect_sync",
    "fold_frontier",
    "named_queries",
    "node_from_row",
    "prepare_append",
    "validate",
]
