"""What the subject znodes hold: a subject epoch's ranges, a source's mode and mapping.

The format itself is defined once, in :mod:`epochstate.daemon.registry.subject_records`
(the daemon reads it too); these are its values as the sink and source use them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from epochstate.daemon.registry.errors import InvalidRecord
from epochstate.daemon.registry.subject_records import MODES, Mode, SubjectEpochRecord, SubjectSourceRecord
from epochstate.spark_plugin.alignment.errors import CorruptSubjectRecord
from epochstate.spark_plugin.kafka.ranges import OffsetRange

__all__ = ["MODES", "Mode", "SourceRecord", "SubjectEpoch"]


@dataclass(frozen=True)
class SubjectEpoch:
    """Subject epoch ``epoch`` of ``topic``: per partition, the offsets that belong to it.

    Registered once by the writing query's commit of batch ``epoch`` and never
    changed: a reader of the epoch reads exactly ``ranges``. Partitions the batch
    wrote nothing to have no range. ``query_id`` is the writing query's stable id
    (None when the writer could not learn it).
    """

    topic: str
    epoch: int
    ranges: tuple[OffsetRange, ...]
    writer: str
    query_id: str | None
    committed_at_ms: int

    def __post_init__(self) -> None:
        partitions = [r.partition for r in self.ranges]
        if len(set(partitions)) != len(partitions):
            raise ValueError(f"epoch {self.epoch} of {self.topic!r} has two ranges of one partition")
        if any(r.topic != self.topic for r in self.ranges):
            raise ValueError(f"epoch {self.epoch} of {self.topic!r} has a range of another topic")
        object.__setattr__(self, "ranges", tuple(sorted(self.ranges, key=lambda r: r.partition)))

    @property
    def end_positions(self) -> dict[int, int]:
        """Partition -> the end offset (exclusive) of its range, for the partitions written."""
        return {r.partition: r.end for r in self.ranges}

    def encode(self) -> bytes:
        return SubjectEpochRecord(
            {r.partition: (r.start, r.end) for r in self.ranges},
            self.writer,
            self.query_id,
            self.committed_at_ms,
        ).encode()

    @classmethod
    def decode(cls, topic: str, epoch: int, data: bytes | None) -> SubjectEpoch:
        """The record in the znode of epoch ``epoch``; CorruptSubjectRecord if it is not one."""
        try:
            record = SubjectEpochRecord.decode(data)
            ranges = tuple(OffsetRange(topic, p, start, end) for p, (start, end) in record.partitions.items())
            return cls(topic, epoch, ranges, record.writer, record.query_id, record.committed_at_ms)
        except (InvalidRecord, ValueError) as error:
            raise CorruptSubjectRecord(f"epoch {epoch} of subject {topic!r}: {error}") from error


@dataclass(frozen=True)
class SourceRecord:
    """A job reading a subject: its mode and which subject epoch each of its epochs read.

    ``mapping`` is source epoch (the reading query's batch id) -> subject epoch,
    bounded to the newest entries. Fields this module does not know (a
    coordinator's command and state) are kept as they are in ``other``.
    """

    mode: Mode
    mapping: Mapping[int, int] = field(default_factory=dict)
    updated_at_ms: int = 0
    other: Mapping[str, Any] = field(default_factory=dict)

    def with_entries(self, entries: Iterable[tuple[int, int]], keep: int, now_ms: int) -> SourceRecord:
        """This record with ``entries`` added, keeping the ``keep`` newest source epochs."""
        mapping = {**self.mapping, **dict(entries)}
        newest = sorted(mapping)[-keep:] if keep > 0 else []
        return SourceRecord(self.mode, {e: mapping[e] for e in newest}, now_ms, self.other)

    def with_mode(self, mode: Mode, now_ms: int) -> SourceRecord:
        return SourceRecord(mode, self.mapping, now_ms, self.other)

    def encode(self) -> bytes:
        return SubjectSourceRecord(self.mode, self.mapping, self.updated_at_ms, self.other).encode()

    @classmethod
    def decode(cls, topic: str, job: str, data: bytes | None) -> SourceRecord:
        """The record in the znode of source ``job``; CorruptSubjectRecord if it is not one."""
        try:
            record = SubjectSourceRecord.decode(data)
        except InvalidRecord as error:
            raise CorruptSubjectRecord(f"source {job!r} of subject {topic!r}: {error}") from error
        return cls(record.mode, record.mapping, record.updated_at_ms, record.other)
