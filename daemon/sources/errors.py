"""Errors of the sources layer: one root, one line per kind of failure.

Every message names the file (and where useful the byte offset) so an operator
can find the checkpoint file at fault.
"""

from __future__ import annotations

from epochstate.daemon.errors import EpochStateError


class SourceError(EpochStateError):
    """Root of the errors raised while reading a Spark checkpoint."""


class CorruptStateFile(SourceError):
    """A state file (delta/snapshot) fails its checksum, is truncated or malformed."""


class CorruptRow(CorruptStateFile):
    """An UnsafeRow's bytes do not fit the schema it is decoded with."""


class MissingStateFile(SourceError):
    """A state file needed to rebuild a store version does not exist (purged or never written)."""


class CorruptCheckpointFile(SourceError):
    """A log, metadata or schema file of the checkpoint is malformed."""


class MissingCheckpointFile(SourceError):
    """A log entry, metadata or schema file of the checkpoint does not exist."""


class UnsupportedCheckpoint(SourceError):
    """The checkpoint uses a feature this reader does not handle (provider, codec, format)."""
