"""The epochstate Python client library: epoch-pinned reads with typed results and errors."""

from epochstate.client.client import (
    AlignedWith,
    EpochStateClient,
    JobDescription,
    Lookup,
    StoreSchema,
    selector,
)
from epochstate.client.errors import (
    CommandRefused,
    DeadlineExceeded,
    EpochDamaged,
    EpochNotReady,
    EpochRetired,
    EpochStateClientError,
    FailedPrecondition,
    InvalidArgument,
    NoSuchEpoch,
    NotFound,
    NoZooKeeper,
    Unavailable,
)

__all__ = [
    "AlignedWith",
    "CommandRefused",
    "DeadlineExceeded",
    "EpochDamaged",
    "EpochNotReady",
    "EpochRetired",
    "EpochStateClient",
    "EpochStateClientError",
    "FailedPrecondition",
    "InvalidArgument",
    "JobDescription",
    "Lookup",
    "NoSuchEpoch",
    "NoZooKeeper",
    "NotFound",
    "StoreSchema",
    "Unavailable",
    "selector",
]
