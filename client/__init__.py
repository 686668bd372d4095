"""The epochstate Python client and the ``epochstate`` command line."""

from epochstate.client.client import (
    AlignedWith,
    EpochStateClient,
    JobDescription,
    Lookup,
    StoreSchema,
    selector,
)
from epochstate.client.errors import (
    DeadlineExceeded,
    EpochDamaged,
    EpochNotReady,
    EpochRetired,
    EpochStateClientError,
    InvalidArgument,
    NotFound,
    Unavailable,
)

__all__ = [
    "AlignedWith",
    "DeadlineExceeded",
    "EpochDamaged",
    "EpochNotReady",
    "EpochRetired",
    "EpochStateClient",
    "EpochStateClientError",
    "InvalidArgument",
    "JobDescription",
    "Lookup",
    "NotFound",
    "StoreSchema",
    "Unavailable",
    "selector",
]
