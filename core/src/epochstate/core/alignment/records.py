"""What the subject znodes hold: a subject epoch's ranges, a source's mode, mapping, command and report.

The format itself is defined once, in :mod:`epochstate.core.zookeeper.subject_records`
(the daemon reads it too); these are its values as the sink and source use them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from epochstate.core.alignment.commands import Command, Report
from epochstate.core.alignment.errors import CorruptSubjectRecord
from epochstate.core.alignment.ranges import OffsetRange
from epochstate.core.zookeeper.errors import InvalidRecord
from epochstate.core.zookeeper.subject_records import (
    MODES,
    RETIRED,
    Mode,
    Retired,
    SubjectEpochRecord,
    SubjectSourceRecord,
)

__all__ = ["MODES", "Adopt", "Mode", "SourceRecord", "SubjectEpoch"]

# Whether a mapping entry (source epoch, subject epoch) of a record without a query id is
# one of the reading query's own (its offsets log says its batch j ended at subject epoch k).
Adopt = Callable[[int, int], bool]


@dataclass(frozen=True)
class SubjectEpoch:
    """Subject epoch ``epoch`` of ``topic``: per partition, the offsets that belong to it.

    Registered once by the writing query's commit of batch ``epoch`` and never
    changed: a reader of the epoch reads exactly ``ranges``. Partitions the batch
    wrote nothing to have no range. ``query_id`` is the writing query's stable id
    (None when the writer could not learn it).

    ``end_position`` is where a reader stands once it has read every epoch up to
    this one: per partition, the end of the newest range at or before this epoch
    (the writer passes the previous epoch's end position; this epoch's ranges are
    added to it). The start of epoch ``k + 1`` is the end position of ``k``.
    """

    topic: str
    epoch: int
    ranges: tuple[OffsetRange, ...]
    writer: str
    query_id: str | None
    committed_at_ms: int
    end_position: Mapping[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        partitions = [r.partition for r in self.ranges]
        if len(set(partitions)) != len(partitions):
            raise ValueError(f"epoch {self.epoch} of {self.topic!r} has two ranges of one partition")
        if any(r.topic != self.topic for r in self.ranges):
            raise ValueError(f"epoch {self.epoch} of {self.topic!r} has a range of another topic")
        object.__setattr__(self, "ranges", tuple(sorted(self.ranges, key=lambda r: r.partition)))
        object.__setattr__(self, "end_position", {**self.end_position, **self.end_positions})

    @property
    def end_positions(self) -> dict[int, int]:
        """Partition -> the end offset (exclusive) of this epoch's range, for the partitions written."""
        return {r.partition: r.end for r in self.ranges}

    def encode(self) -> bytes:
        return SubjectEpochRecord(
            {r.partition: (r.start, r.end) for r in self.ranges},
            self.writer,
            self.query_id,
            self.committed_at_ms,
            self.end_position,
        ).encode()

    @classmethod
    def decode(cls, topic: str, epoch: int, data: bytes | None) -> SubjectEpoch:
        """The record in the znode of epoch ``epoch``; CorruptSubjectRecord if it is not one."""
        try:
            record = SubjectEpochRecord.decode(data)
            ranges = tuple(OffsetRange(topic, p, start, end) for p, (start, end) in record.partitions.items())
            return cls(
                topic,
                epoch,
                ranges,
                record.writer,
                record.query_id,
                record.committed_at_ms,
                record.end_position,
            )
        except (InvalidRecord, ValueError) as error:
            raise CorruptSubjectRecord(f"epoch {epoch} of subject {topic!r}: {error}") from error


@dataclass(frozen=True)
class SourceRecord:
    """A job reading a subject: its mode, which subject epoch each of its epochs read, the protocol.

    ``mode`` is how the source's newest batch read the subject. ``mapping`` is
    source epoch (the reading query's batch id) -> subject epoch, bounded to the
    newest entries. ``command`` is the coordinator's newest command and
    ``report`` the source's newest report (``commands``). Fields this module
    does not know are kept as they are in ``other``.

    ``query_id`` is the reading query whose batch ids the mapping holds (None in
    records written before it existed). The mapping, report and retired source
    epochs belong to that query alone: a source of another query starts afresh
    (:meth:`for_query`), so batch ids of two queries never meet in one mapping.
    """

    mode: Mode
    mapping: Mapping[int, int] = field(default_factory=dict)
    updated_at_ms: int = 0
    other: Mapping[str, Any] = field(default_factory=dict)
    command: Command | None = None
    report: Report | None = None
    query_id: str | None = None

    @property
    def live_command(self) -> Command | None:
        """The newest command if it is addressed to this record's query; None otherwise.

        A command issued before the reading job's checkpoint was recreated names
        the old query: the new query's source does not carry it out, and the
        coordinator takes it as void (it issues the next one).
        """
        command = self.command
        return command if command is not None and command.query_id == self.query_id else None

    def for_query(self, query_id: str | None, now_ms: int, adopt: Adopt | None = None) -> SourceRecord:
        """This record as the source of query ``query_id`` must see it.

        Itself when it is that query's record, or when ``query_id`` is None (a
        source that could not learn its query id goes on as before). Otherwise
        the record of another query: a fresh start with no mapping, no report and
        no retired source epochs (the subject epochs retired stay retired); the
        coordinator's command stays but is no longer live. A record without a
        query id (written before the field existed) keeps the mapping entries
        ``adopt`` confirms as the query's own, and then its retired bounds.
        """
        if query_id is None or query_id == self.query_id:
            return self
        mapping: dict[int, int] = {}
        if self.query_id is None and adopt is not None:
            mapping = {j: k for j, k in self.mapping.items() if adopt(j, k)}
        other = dict(self.other)
        if other.get(RETIRED) is not None and not mapping:
            try:
                retired = Retired.from_json(other[RETIRED])
            except InvalidRecord as error:
                raise CorruptSubjectRecord(f"a source record's retired bounds: {error}") from error
            if retired is not None:
                other[RETIRED] = Retired(0, retired.subject_epoch).to_json()
        return replace(
            self, mapping=mapping, other=other, report=None, query_id=query_id, updated_at_ms=now_ms
        )

    def with_entries(
        self,
        entries: Iterable[tuple[int, int]],
        keep: int,
        now_ms: int,
        query_id: str | None = None,
        adopt: Adopt | None = None,
    ) -> SourceRecord:
        """This record with query ``query_id``'s ``entries`` added, keeping the ``keep`` newest source epochs.

        The entries of another query are replaced, never merged (:meth:`for_query`).
        """
        base = self.for_query(query_id, now_ms, adopt)
        mapping = {**base.mapping, **dict(entries)}
        newest = sorted(mapping)[-keep:] if keep > 0 else []
        return replace(base, mapping={e: mapping[e] for e in newest}, updated_at_ms=now_ms)

    def with_mode(self, mode: Mode, now_ms: int) -> SourceRecord:
        return replace(self, mode=mode, updated_at_ms=now_ms)

    def encode(self) -> bytes:
        other: dict[str, Any] = dict(self.other)
        if self.command is not None:
            other["command"] = self.command.to_json()
        if self.report is not None:
            other["report"] = self.report.to_json()
        return SubjectSourceRecord(self.mode, self.mapping, self.updated_at_ms, other, self.query_id).encode()

    @classmethod
    def decode(cls, topic: str, job: str, data: bytes | None) -> SourceRecord:
        """The record in the znode of source ``job``; CorruptSubjectRecord if it is not one."""
        try:
            record = SubjectSourceRecord.decode(data)
            other = dict(record.other)
            command = other.pop("command", None)
            report = other.pop("report", None)
            return cls(
                record.mode,
                dict(record.mapping),
                record.updated_at_ms,
                other,
                None if command is None else Command.from_json(command),
                None if report is None else Report.from_json(report),
                record.query_id,
            )
        except (InvalidRecord, KeyError, TypeError, ValueError, AttributeError) as error:
            raise CorruptSubjectRecord(f"source {job!r} of subject {topic!r}: {error}") from error
