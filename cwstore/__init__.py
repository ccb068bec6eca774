"""cwstore: the PostgreSQL backend where StateWeave agents keep their durable state.

Public names only; everything else is private and may move.
"""

from ._store_base import Cursor, DivergedError, GraphInfo, TailItem
from .errors import (
    ChainConflictError,
    ConflictError,
    DatabaseError,
    Error,
    GraphExistsError,
    InputError,
    LengthConflictError,
    MigrationError,
    PermissionDeniedError,
    StoreTimeoutError,
    UnknownGraphError,
    ValidationError,
    Violation,
)
from .identity import canonical_json, compute_id
from .model import KINDS, AgentState, CausalNode
from .rules import Vocabulary, fold_frontier, validate
from .store import Store, connect_sync
from .store_async import AsyncStore, connect

__version__ = "0.1.0"

__all__ = [
    "KINDS",
    "AgentState",
    "AsyncStore",
    "CausalNode",
    "ChainConflictError",
    "ConflictError",
    "Cursor",
    "DatabaseError",
    "DivergedError",
    "Error",
    "GraphExistsError",
    "GraphInfo",
    "InputError",
    "LengthConflictError",
    "MigrationError",
    "PermissionDeniedError",
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
