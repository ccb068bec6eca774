"""cwstore: the PostgreSQL backend where StateWeave agents keep their durable state.

Public names only; everything else is private and may move.
"""

from ._store_base import Cursor, GraphInfo, NodeLike, StateLike, TailItem
from .errors import (
    AppendOnlyError,
    ChainConflictError,
    ConflictError,
    DatabaseError,
    DivergedError,
    Error,
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
from .model import KINDS, AgentState, CausalNode
from .projection import FrontierHead, KeyVersion, MemoryEntry, NodeRef, Projection, ResourceHead
from .rules import Vocabulary, fold_frontier, validate
from .store import Store, connect_sync
from .store_async import AsyncStore, connect

__version__ = "0.1.0"

__all__ = [
    "KINDS",
    "AgentState",
    "AppendOnlyError",
    "AsyncStore",
    "CausalNode",
    "ChainConflictError",
    "ConflictError",
    "Cursor",
    "DatabaseError",
    "DivergedError",
    "Error",
    "FrontierHead",
    "GraphExistsError",
    "GraphInfo",
    "InputError",
    "KeyVersion",
    "LengthConflictError",
    "MemoryEntry",
    "MigrationError",
    "NodeLike",
    "NodeRef",
    "PermissionDeniedError",
    "Projection",
    "ResourceHead",
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
    "validate",
]
