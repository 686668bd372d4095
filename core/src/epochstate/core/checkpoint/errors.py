"""Errors of reading a query's checkpoint: one root, one line per kind of failure.

Every message names the file (and where useful the byte offset) so an operator
can find the checkpoint file at fault.
"""

from __future__ import annotations

from epochstate.core.errors import EpochStateError


class SourceError(EpochStateError):
    """Root of the errors raised while reading a Spark checkpoint."""


class CorruptCheckpointFile(SourceError):
    """A log, metadata or schema file of the checkpoint is malformed."""


class MissingCheckpointFile(SourceError):
    """A log entry, metadata or schema file of the checkpoint does not exist."""


class UnsupportedCheckpoint(SourceError):
    """The checkpoint uses a feature this reader does not handle (provider, codec, format)."""
