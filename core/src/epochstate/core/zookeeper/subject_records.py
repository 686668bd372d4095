"""What the subject znodes hold: the one definition of their format.

The aligned Kafka sink and source (``epochstate.spark_plugin.alignment``) write
these records; the daemon reads them to resolve "the epoch of job A aligned with
epoch m of job B". Both use this module, so the daemon never imports the Spark
plugin. Where the znodes live: :class:`epochstate.core.zookeeper.layout.Layout`.

::

    <root>/subjects/<topic>/epochs/<k>      {"partitions": {"<p>": [start, end]}, "writer": job,
                                             "query_id": id | null, "committed_at_ms": ms,
                                             "end_position": {"<p>": offset}}
    <root>/subjects/<topic>/sources/<job>   {"mode": "aligned" | "unaligned",
                                             "mapping": {"<source epoch>": k}, "updated_at_ms": ms,
                                             "retired": {"source_epoch": j, "subject_epoch": k} (optional),
                                             "query_id": id (the reading query's; absent in records
                                                         written before it existed),
                                             ...fields of others (a coordinator), kept as they are}

Payloads are canonical JSON (:func:`encode`): the same record always has the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from epochstate.core.zookeeper.errors import InvalidRecord
from epochstate.core.zookeeper.records import encode

Mode = Literal["aligned", "unaligned"]
MODES: tuple[Mode, ...] = ("aligned", "unaligned")


@dataclass(frozen=True)
class SubjectEpochRecord:
    """Subject epoch k: per partition the offsets ``[start, end)`` batch k of the writer wrote.

    Written once by the writing query's commit of its batch k, never changed.
    ``query_id`` is the writing query's stable id (None if the writer could not learn it).
    """

    partitions: Mapping[int, tuple[int, int]]
    writer: str
    query_id: str | None
    committed_at_ms: int
    # Per partition, where a reader stands once it has read every epoch up to this one
    # (the start of epoch k + 1 is the end position of k). Empty in records written
    # before it existed.
    end_position: Mapping[int, int] = field(default_factory=dict)

    def encode(self) -> bytes:
        return encode(
            {
                "partitions": {str(p): [start, end] for p, (start, end) in sorted(self.partitions.items())},
                "writer": self.writer,
                "query_id": self.query_id,
                "committed_at_ms": self.committed_at_ms,
                "end_position": {str(p): o for p, o in sorted(self.end_position.items())},
            }
        )

    @classmethod
    def decode(cls, data: bytes | None) -> SubjectEpochRecord:
        """The record in an epoch znode's data; InvalidRecord if it is not one."""
        record = _object(data)
        try:
            partitions = {
                int(p): (int(bounds[0]), int(bounds[1])) for p, bounds in record["partitions"].items()
            }
            if len(record["partitions"]) != len(partitions):
                raise ValueError("a partition is named twice")
            query_id = record.get("query_id")
            return cls(
                partitions=partitions,
                writer=str(record["writer"]),
                query_id=None if query_id is None else str(query_id),
                committed_at_ms=int(record["committed_at_ms"]),
                end_position={int(p): int(o) for p, o in record.get("end_position", {}).items()},
            )
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as error:
            raise InvalidRecord(f"not a subject epoch record: {error!r}") from error

    def written_by(self, job: str, query_id: str | None) -> bool:
        """Whether ``job`` (with stable query id ``query_id``, if known) wrote this epoch.

        Names must match; so must query ids when both are known, so that a new
        query under an old name (a fresh checkpoint) is not taken for the writer.
        """
        if self.writer != job:
            return False
        return self.query_id is None or query_id is None or self.query_id == query_id


RETIRED = "retired"
QUERY_ID = "query_id"


@dataclass(frozen=True)
class Retired:
    """What the subject's retention removed from a source's mapping (see ``alignment.retention``).

    Every mapping entry whose source epoch is below ``source_epoch`` or whose subject
    epoch is below ``subject_epoch`` was deleted, and so were the subject epochs
    below ``subject_epoch``: an alignment through them can no longer be resolved.
    """

    source_epoch: int
    subject_epoch: int

    def to_json(self) -> dict[str, int]:
        return {"source_epoch": self.source_epoch, "subject_epoch": self.subject_epoch}

    @classmethod
    def from_json(cls, value: Any) -> Retired | None:
        """The bounds in ``value``; None when it holds none (InvalidRecord if malformed)."""
        if value is None:
            return None
        try:
            return cls(int(value["source_epoch"]), int(value["subject_epoch"]))
        except (KeyError, TypeError, ValueError) as error:
            raise InvalidRecord(f"not retired bounds: {value!r}") from error


@dataclass(frozen=True)
class SubjectSourceRecord:
    """A job reading a subject: its mode, and which subject epoch each of its epochs read.

    ``mapping`` is source epoch (the reading query's batch id) -> subject epoch.
    It holds only the newest entries (the reader's mapping retention). Each
    source epoch read exactly one subject epoch, and no two read the same one.
    Fields of others (a coordinator's command and state) are kept in ``other``.

    ``query_id`` is the stable Spark id of the query whose batch ids the mapping's
    source epochs are: a source of another query (the reading job's checkpoint
    was recreated, its batch ids restart at 0) replaces the mapping, never merges
    into it. None in records written before the field existed (and by sources
    that could not learn their query id): their mapping is read as it always was.
    """

    mode: Mode
    mapping: Mapping[int, int] = field(default_factory=dict)
    updated_at_ms: int = 0
    other: Mapping[str, Any] = field(default_factory=dict)
    query_id: str | None = None

    def encode(self) -> bytes:
        record: dict[str, Any] = {
            **self.other,
            "mode": self.mode,
            "mapping": {str(source): subject for source, subject in sorted(self.mapping.items())},
            "updated_at_ms": self.updated_at_ms,
        }
        if self.query_id is not None:  # absent, not null: records without it stay as they were
            record[QUERY_ID] = self.query_id
        return encode(record)

    @classmethod
    def decode(cls, data: bytes | None) -> SubjectSourceRecord:
        """The record in a source znode's data; InvalidRecord if it is not one."""
        record = _object(data)
        try:
            mode = record.pop("mode")
            if mode not in MODES:
                raise ValueError(f"mode {mode!r} is none of {MODES}")
            mapping = {int(source): int(subject) for source, subject in record.pop("mapping", {}).items()}
            updated = int(record.pop("updated_at_ms", 0))
            query_id = record.pop(QUERY_ID, None)
            if query_id is not None and not isinstance(query_id, str):
                raise TypeError(f"query_id {query_id!r} is not a string")
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise InvalidRecord(f"not a subject source record: {error!r}") from error
        return cls(cast(Mode, mode), mapping, updated, record, query_id)

    @property
    def retired(self) -> Retired | None:
        """What the subject's retention removed from the mapping; None if it removed nothing yet."""
        return Retired.from_json(self.other.get(RETIRED))

    def source_epoch_of(self, subject_epoch: int) -> int | None:
        """The source epoch that read ``subject_epoch``, if the mapping holds it."""
        return next((s for s, k in self.mapping.items() if k == subject_epoch), None)


def _object(data: bytes | None) -> dict[str, Any]:
    try:
        value = json.loads(data or b"")
    except ValueError as error:
        raise InvalidRecord(f"not JSON: {error}") from error
    if not isinstance(value, dict):
        raise InvalidRecord("not a JSON object")
    return value
