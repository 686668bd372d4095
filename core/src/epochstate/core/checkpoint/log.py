"""A streaming query's checkpoint logs, read-only: its metadata, offset log and commit log.

Layout this module relies on::

    <root>/metadata                    {"id": "<query id>"}
    <root>/offsets/<epoch>             planned epoch (see epochlog)
    <root>/commits/<epoch>             exists iff the epoch committed (see commitlog)

Names starting with ``.`` (checksums, temporary files) or containing ``.tmp`` are
never read as log entries. Every call reads afresh, so new epochs show up as Spark
writes them; nothing is written.
"""

from __future__ import annotations

from pathlib import Path

from epochstate.core import jsontext
from epochstate.core.checkpoint.commitlog import CommitEntry, parse_commit_entry
from epochstate.core.checkpoint.epochlog import EpochLog, SourceRange, parse_epoch_log
from epochstate.core.checkpoint.errors import (
    CorruptCheckpointFile,
    MissingCheckpointFile,
    UnsupportedCheckpoint,
)
from epochstate.core.storage.errors import UnsupportedLocation
from epochstate.core.storage.location import Location, open_location


def numeric_entries(directory: Location) -> list[int]:
    """The sorted integer names of ``directory``'s entries (none if it does not exist)."""
    names = directory.names()
    return sorted(int(n) for n in names if n.isdigit() and n.isascii())


class QueryLog:
    """The logs of one checkpoint location: which epochs were planned and committed,
    and what each read. Shared by the daemon (which serves the epochs) and the
    aligned source and sink (which plan them)."""

    def __init__(self, root: Location | Path | str) -> None:
        try:
            self.root = open_location(root)
        except UnsupportedLocation as error:
            raise UnsupportedCheckpoint(str(error)) from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.root)!r})"

    def _read_text(self, path: Location) -> str:
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise MissingCheckpointFile(f"{path}: does not exist") from None
        except UnicodeDecodeError as err:
            raise CorruptCheckpointFile(f"{path}: not UTF-8: {err}") from err

    # Query and epochs.

    def query_id(self) -> str:
        """Spark's stable id of the query (survives restarts).

        Raises:
            MissingCheckpointFile, CorruptCheckpointFile: no or a malformed ``metadata``.
        """
        path = self.root / "metadata"
        try:
            query_id = jsontext.loads(self._read_text(path))["id"]
        except (ValueError, KeyError, TypeError) as err:
            raise CorruptCheckpointFile(f"{path}: no query id: {err!r}") from err
        return str(query_id)

    def committed_epochs(self) -> list[int]:
        """The committed epochs, ascending (old ones disappear as Spark purges its log)."""
        return numeric_entries(self.root / "commits")

    def latest_committed(self) -> int | None:
        """The newest committed epoch, ``None`` before the first commit."""
        epochs = self.committed_epochs()
        return epochs[-1] if epochs else None

    def is_committed(self, epoch: int) -> bool:
        """Whether ``commits/<epoch>`` exists. Once true, stays true until purged."""
        return (self.root / "commits" / str(epoch)).is_file()

    def commit_time_ms(self, epoch: int) -> int:
        """When the epoch committed: the modification time of ``commits/<epoch>``, in ms.

        Raises:
            MissingCheckpointFile: the epoch is not committed (or was purged).
        """
        path = self.root / "commits" / str(epoch)
        try:
            return path.stat().st_mtime_ns // 1_000_000
        except FileNotFoundError:
            raise MissingCheckpointFile(f"{path}: epoch {epoch} is not committed") from None

    def commit_entry(self, epoch: int) -> CommitEntry:
        """The commit log entry of ``epoch`` (see :mod:`commitlog`); it never changes.

        Raises:
            MissingCheckpointFile: the epoch is not committed (or was purged).
            CorruptCheckpointFile, UnsupportedCheckpoint: see :func:`parse_commit_entry`.
        """
        path = self.root / "commits" / str(epoch)
        return parse_commit_entry(epoch, self._read_text(path), str(path))

    def planned_epochs(self) -> list[int]:
        """The epochs with an offset log entry (committed or not), ascending."""
        return numeric_entries(self.root / "offsets")

    def epoch_log(self, epoch: int) -> EpochLog:
        """The offset log entry of ``epoch``. It may exist before the epoch commits;
        callers that serve state must check :meth:`is_committed`.

        Raises:
            MissingCheckpointFile: no entry (not planned yet, or purged).
            CorruptCheckpointFile, UnsupportedCheckpoint: see :func:`parse_epoch_log`.
        """
        path = self.root / "offsets" / str(epoch)
        return parse_epoch_log(epoch, self._read_text(path), str(path))

    def source_positions(self, epoch: int) -> tuple[SourceRange, ...]:
        """Per source, the offsets the epoch read: start = the previous epoch's end
        offsets (``None`` for epoch 0), end = this epoch's.

        Raises:
            MissingCheckpointFile: this or the previous entry does not exist.
            CorruptCheckpointFile: the two entries disagree on the number of sources.
        """
        end = self.epoch_log(epoch).source_offsets
        if epoch == 0:
            return tuple(SourceRange(None, e) for e in end)
        start = self.epoch_log(epoch - 1).source_offsets
        if len(start) != len(end):
            raise CorruptCheckpointFile(
                f"{self.root}: epochs {epoch - 1} and {epoch} have {len(start)} and {len(end)} sources"
            )
        return tuple(SourceRange(s, e) for s, e in zip(start, end, strict=True))
