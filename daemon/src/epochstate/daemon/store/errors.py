"""Errors of the store layer."""

from epochstate.core import reasons
from epochstate.core.errors import EpochStateError


class StoreError(EpochStateError):
    """Root of the store layer's errors."""


class StoreClosed(StoreError):
    pass


class UnknownJob(StoreError):
    pass


class LayoutMismatch(StoreError):
    """The store on disk was written with another layout version than this daemon's."""


class StoreDamaged(StoreError):
    """RocksDB could not read the daemon's own store (a checksum mismatch, an I/O error).

    Never taken for "absent": a read that meets it fails with DATA_LOSS. An operator
    must look at the store's files; deleting the store directory makes the daemon
    re-ingest every retained epoch from the checkpoints.
    """

    reason = reasons.STORE_DAMAGED
