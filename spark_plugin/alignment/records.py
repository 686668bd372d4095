"""What the subject znodes hold: a subject epoch's ranges, a source's mode, mapping, command and report.

Payloads are canonical JSON (the registry's ``encode``): the same record always
has the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from epochstate.daemon.registry.records import encode
from epochstate.spark_plugin.alignment.commands import Command, Report
from epochstate.spark_plugin.alignment.errors import CorruptSubjectRecord
from epochstate.spark_plugin.kafka.ranges import OffsetRange

Mode = Literal["aligned", "unaligned"]
MODES: tuple[Mode, ...] = ("aligned", "unaligned")


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
        return encode(
            {
                "partitions": {str(r.partition): [r.start, r.end] for r in self.ranges},
                "writer": self.writer,
                "query_id": self.query_id,
                "committed_at_ms": self.committed_at_ms,
                "end_position": {str(p): o for p, o in sorted(self.end_position.items())},
            }
        )

    @classmethod
    def decode(cls, topic: str, epoch: int, data: bytes | None) -> SubjectEpoch:
        """The record in the znode of epoch ``epoch``; CorruptSubjectRecord if it is not one."""
        record = _object(data, f"epoch {epoch} of subject {topic!r}")
        try:
            ranges = tuple(
                OffsetRange(topic, int(partition), int(bounds[0]), int(bounds[1]))
                for partition, bounds in record["partitions"].items()
            )
            query_id = record.get("query_id")
            return cls(
                topic=topic,
                epoch=epoch,
                ranges=ranges,
                writer=str(record["writer"]),
                query_id=None if query_id is None else str(query_id),
                committed_at_ms=int(record["committed_at_ms"]),
                end_position={int(p): int(o) for p, o in record.get("end_position", {}).items()},
            )
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as error:
            raise CorruptSubjectRecord(f"epoch {epoch} of subject {topic!r}: {error!r}") from error


@dataclass(frozen=True)
class SourceRecord:
    """A job reading a subject: its mode, which subject epoch each of its epochs read, the protocol.

    ``mode`` is how the source's newest batch read the subject. ``mapping`` is
    source epoch (the reading query's batch id) -> subject epoch, bounded to the
    newest entries. ``command`` is the coordinator's newest command and
    ``report`` the source's newest report (``commands``). Fields this module
    does not know are kept as they are in ``other``.
    """

    mode: Mode
    mapping: Mapping[int, int] = field(default_factory=dict)
    updated_at_ms: int = 0
    other: Mapping[str, Any] = field(default_factory=dict)
    command: Command | None = None
    report: Report | None = None

    def with_entries(self, entries: Iterable[tuple[int, int]], keep: int, now_ms: int) -> SourceRecord:
        """This record with ``entries`` added, keeping the ``keep`` newest source epochs."""
        mapping = {**self.mapping, **dict(entries)}
        newest = sorted(mapping)[-keep:] if keep > 0 else []
        return replace(self, mapping={e: mapping[e] for e in newest}, updated_at_ms=now_ms)

    def with_mode(self, mode: Mode, now_ms: int) -> SourceRecord:
        return replace(self, mode=mode, updated_at_ms=now_ms)

    def encode(self) -> bytes:
        fields: dict[str, Any] = {
            **self.other,
            "mode": self.mode,
            "mapping": {str(source): subject for source, subject in sorted(self.mapping.items())},
            "updated_at_ms": self.updated_at_ms,
        }
        if self.command is not None:
            fields["command"] = self.command.to_json()
        if self.report is not None:
            fields["report"] = self.report.to_json()
        return encode(fields)

    @classmethod
    def decode(cls, topic: str, job: str, data: bytes | None) -> SourceRecord:
        """The record in the znode of source ``job``; CorruptSubjectRecord if it is not one."""
        record = _object(data, f"source {job!r} of subject {topic!r}")
        try:
            mode = record.pop("mode")
            if mode not in MODES:
                raise ValueError(f"mode {mode!r} is none of {MODES}")
            mapping = {int(source): int(subject) for source, subject in record.pop("mapping", {}).items()}
            updated = int(record.pop("updated_at_ms", 0))
            command = record.pop("command", None)
            report = record.pop("report", None)
            return cls(
                cast(Mode, mode),
                mapping,
                updated,
                record,
                None if command is None else Command.from_json(command),
                None if report is None else Report.from_json(report),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise CorruptSubjectRecord(f"source {job!r} of subject {topic!r}: {error!r}") from error


def _object(data: bytes | None, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data or b"")
    except ValueError as error:
        raise CorruptSubjectRecord(f"{what}: not JSON: {error}") from error
    if not isinstance(value, dict):
        raise CorruptSubjectRecord(f"{what}: not a JSON object")
    return value
