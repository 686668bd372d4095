"""Errors of the sources layer: the checkpoint's (from the core) and the state files'.

Every message names the file (and where useful the byte offset) so an operator
can find the checkpoint file at fault.
"""

from __future__ import annotations

from epochstate.core.checkpoint.errors import (
    CorruptCheckpointFile,
    MissingCheckpointFile,
    SourceError,
    UnsupportedCheckpoint,
)

__all__ = [
    "CorruptCheckpointFile",
    "CorruptRow",
    "CorruptStateFile",
    "MissingCheckpointFile",
    "MissingStateFile",
    "SourceError",
    "UnsupportedCheckpoint",
]


class CorruptStateFile(SourceError):
    """A state file (delta/snapshot) fails its checksum, is truncated or malformed."""


class CorruptRow(CorruptStateFile):
    """An UnsafeRow's bytes do not fit the schema it is decoded with."""


class MissingStateFile(SourceError):
    """A state file needed to rebuild a store version does not exist (purged or never written)."""
