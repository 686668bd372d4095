"""What the query planned for this source so far: its offsets in the query's offsets log.

PySpark 4.0 asks a Python stream reader for its latest offset without telling it
where the next batch starts (there is no admission control for Python sources),
and a restarted query gets a new reader. The source therefore reads its own end
offsets from ``<checkpoint>/offsets/<batch>``, which Spark writes before it runs
a batch and never changes.
"""

from __future__ import annotations

from epochstate.core.checkpoint.errors import SourceError
from epochstate.core.checkpoint.log import QueryLog
from epochstate.spark_plugin.alignment.errors import CheckpointMismatch, InvalidOption
from epochstate.spark_plugin.alignment.offsets import SubjectOffset

# Parsed entries kept; Spark keeps 100 by default, a lookup needs the newest few.
_CACHED_ENTRIES = 64


class PlannedOffsets:
    """This source's end offsets, batch by batch, in the offsets log under ``checkpoint``.

    The query must have exactly one source of ``subject``. Reads the filesystem
    afresh on every call (an entry, once parsed, is cached: entries never change).
    """

    def __init__(self, checkpoint: str, subject: str) -> None:
        try:
            self._checkpoint = QueryLog(checkpoint)
        except SourceError as error:
            raise InvalidOption(f"checkpointLocation {checkpoint!r}: {error}") from error
        self.subject = subject
        self._entries: dict[int, SubjectOffset] = {}

    @property
    def location(self) -> str:
        return str(self._checkpoint.root)

    def query_id(self) -> str | None:
        """The query's stable id (the checkpoint's ``metadata``, written before the query plans
        anything); None when it cannot be read, and the source record then carries none."""
        try:
            return self._checkpoint.query_id()
        except SourceError:
            return None

    def read(self, batch: int, subject_epoch: int) -> bool:
        """Whether this query's batch ``batch`` is planned and ends aligned at ``subject_epoch``
        (an ``Adopt``: confirms a mapping entry recorded without a query id as this query's)."""
        try:
            return self.offset(batch).epoch == subject_epoch
        except CheckpointMismatch:
            return False

    def newest(self) -> tuple[int, SubjectOffset] | None:
        """The newest planned batch and this source's end offset in it; None before the first.

        Raises:
            CheckpointMismatch: the newest entry has no offset of this subject.
        """
        batches = self._checkpoint.planned_epochs()
        if not batches:
            return None
        return batches[-1], self.offset(batches[-1])

    def offset(self, batch: int) -> SubjectOffset:
        """This source's end offset in planned batch ``batch``.

        Raises:
            CheckpointMismatch: the entry is missing or has no offset of this subject.
        """
        cached = self._entries.get(batch)
        if cached is not None:
            return cached
        try:
            lines = self._checkpoint.epoch_log(batch).source_offsets
        except SourceError as error:
            raise CheckpointMismatch(f"{self.location}: {error}") from error
        offsets = [offset for line in lines if (offset := SubjectOffset.parse(line, self.subject))]
        if len(offsets) != 1:
            raise CheckpointMismatch(
                f"{self.location}/offsets/{batch} has {len(offsets)} offsets of subject {self.subject!r}, "
                "not one: the option checkpointLocation must name the query's own checkpoint, and "
                "a query may read a subject through one source only"
            )
        if len(self._entries) >= _CACHED_ENTRIES:
            self._entries.pop(min(self._entries))
        self._entries[batch] = offsets[0]
        return offsets[0]

    def first_batch_ending_at(self, end: SubjectOffset) -> int:
        """The oldest planned batch of the newest run of batches that end at ``end``.

        Several batches end at the same offset when another source of the query
        made Spark plan batches in which this one had nothing new; the first of
        them is the one that read up to ``end``.

        Raises:
            CheckpointMismatch: no planned batch ends at ``end``.
        """
        found: int | None = None
        for batch in reversed(self._checkpoint.planned_epochs()):
            if self.offset(batch) == end:
                found = batch
            elif found is not None:
                break
        if found is None:
            raise CheckpointMismatch(
                f"{self.location}: no planned batch ends at {end.to_json()}; the option "
                "checkpointLocation must name the query's own checkpoint"
            )
        return found
