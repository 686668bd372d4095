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
    DataLoss,
    DeadlineExceeded,
    EpochDamaged,
    EpochNotReady,
    EpochRetired,
    EpochStateClientError,
    FailedPrecondition,
    InvalidArgument,
    JobNotFound,
    NoSuchEpoch,
    NotFound,
    NoZooKeeper,
    StoreNotFound,
    Unavailable,
)
from epochstate.client.structs import AmbiguousField, Struct

__all__ = [
    "AlignedWith",
    "AmbiguousField",
    "CommandRefused",
    "DataLoss",
    "DeadlineExceeded",
    "EpochDamaged",
    "EpochNotReady",
    "EpochRetired",
    "EpochStateClient",
    "EpochStateClientError",
    "FailedPrecondition",
    "InvalidArgument",
    "JobDescription",
    "JobNotFound",
    "Lookup",
    "NoSuchEpoch",
    "NoZooKeeper",
    "NotFound",
    "StoreNotFound",
    "StoreSchema",
    "Struct",
    "Unavailable",
    "selector",
]
