"""Errors of the filesystem layer."""

from __future__ import annotations

from epochstate.core.errors import EpochStateError


class StorageError(EpochStateError):
    """Root of the filesystem layer's errors."""


class UnsupportedLocation(StorageError):
    """A location this layer cannot open: an unknown scheme, or one whose fsspec
    implementation is not installed (the message names the extra)."""


class StorageUnavailable(StorageError):
    """The storage did not answer (connection, timeout, throttling, server errors)
    after every retry. Says nothing about the file: try again later."""


class UnreadableFile(StorageError):
    """The storage answers but refuses this file (permissions, a malformed object):
    retrying will not help. Ingest treats it as damage to the epoch that needs it."""
