"""What the store records about jobs, stores and epochs (small frozen value types)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from epochstate.core.partition_ranges import PartitionRanges


@dataclass(frozen=True, slots=True)
class JobDescriptor:
    """A followed job. ``job_id`` is local to this store and never reused.

    ``partitions``: the Spark partitions the job's data here covers (None: all of
    them). Data of other partitions is never written under this descriptor, so a
    read of a key of another partition must be refused, never answered "absent".
    """

    name: str
    job_id: int
    checkpoint: str
    query_id: str
    provider: str = "hdfs"
    partitions: PartitionRanges | None = None

    def to_json(self) -> bytes:
        fields = {
            "name": self.name,
            "job_id": self.job_id,
            "checkpoint": self.checkpoint,
            "query_id": self.query_id,
            "provider": self.provider,
        }
        if self.partitions is not None:  # absent: the whole job (as layout 2 wrote every job)
            fields["partitions"] = self.partitions.to_json()
        return json.dumps(fields, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> JobDescriptor:
        fields = json.loads(raw)
        ranges = fields.pop("partitions", None)
        held = None if ranges is None else PartitionRanges.of((first, last) for first, last in ranges)
        return cls(**fields, partitions=held)


@dataclass(frozen=True, slots=True)
class StoreDescriptor:
    """One named store of one stateful operator of a job, with its first shape.

    Schemas are Spark's JSON forms (``DataType.json``) of the key and value structs.
    The schemas and ``num_partitions`` are the shape the store was first seen with, in
    force from ``first_epoch`` until the first of the store's later :class:`StoreShape`
    records.
    """

    store_id: int
    job: str
    operator_id: int
    operator_name: str
    store_name: str
    num_partitions: int
    key_schema_json: str
    value_schema_json: str
    # A transformWithState state variable's kind (value, list, map, timers); "" otherwise.
    kind: str = ""
    first_epoch: int = 0

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> StoreDescriptor:
        return cls(**json.loads(raw))

    @property
    def first_shape(self) -> StoreShape:
        return StoreShape(self.first_epoch, self.key_schema_json, self.value_schema_json, self.num_partitions)


@dataclass(frozen=True, slots=True)
class StoreShape:
    """What a store's state looks like from ``first_epoch`` on, until the next shape's
    first epoch: its key and value schemas (Spark JSON) and the number of Spark
    partitions its rows are spread over (Spark 4.2+ repartitions state offline, so a
    checkpoint's partition count changes at an epoch). Written with the epoch that
    introduces it; every read, route and shard plan of an epoch uses that epoch's shape.

    ``absent``: the store is not part of the query from ``first_epoch`` on (a
    transformWithState state variable its run no longer declares); reads of it there
    are refused. Its schemas are those of the shape before.
    """

    first_epoch: int
    key_schema_json: str
    value_schema_json: str
    num_partitions: int
    absent: bool = False

    def to_json(self) -> bytes:
        fields = asdict(self)
        if not self.absent:  # as layout 4 wrote every shape before stores could be absent
            del fields["absent"]
        return json.dumps(fields, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes, earlier_partitions: int) -> StoreShape:
        """A recorded shape; one recorded before shapes named their partition count (a
        schema change only, layout 3) has the count of the shape before it."""
        fields = json.loads(raw)
        fields.setdefault("num_partitions", earlier_partitions)
        fields.setdefault("absent", False)
        return cls(**fields)

    def same_schemas(self, other: StoreShape) -> bool:
        return (self.key_schema_json, self.value_schema_json) == (
            other.key_schema_json,
            other.value_schema_json,
        )

    def same_shape(self, other: StoreShape) -> bool:
        return (
            self.same_schemas(other)
            and self.num_partitions == other.num_partitions
            and self.absent == other.absent
        )


@dataclass(frozen=True, slots=True)
class SourceRange:
    """Where one source of the job stood at the start and end of an epoch."""

    source: str
    start_offset_json: str | None
    end_offset_json: str | None


@dataclass(frozen=True, slots=True)
class EpochRecord:
    """A committed and ingested epoch of a job."""

    epoch: int
    committed_at_ms: int
    ingested_at_ms: int
    watermark_ms: int
    sources: tuple[SourceRange, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> EpochRecord:
        obj = json.loads(raw)
        obj["sources"] = tuple(SourceRange(**s) for s in obj.get("sources", ()))
        return cls(**obj)


@dataclass(frozen=True, slots=True)
class DroppedJob:
    """A job dropped from the store (its checkpoint now holds another query): what it was."""

    name: str
    query_id: str
    newest: int
    oldest: int
    dropped_at_ms: int

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> DroppedJob:
        return cls(**json.loads(raw))


@dataclass(frozen=True, slots=True)
class JobProgress:
    """The queryable epoch range of a job: ``[oldest, newest]``; -1 when empty."""

    newest: int
    oldest: int

    @property
    def empty(self) -> bool:
        return self.newest < 0


@dataclass(frozen=True, slots=True)
class IngestNotes:
    """What ingest knows of a job beyond its ingested epochs, for readers in other
    processes: the newest epoch seen committed in its checkpoint (-1: none) and the
    epochs ingest could not read yet, with why (an exact read of one is refused)."""

    committed: int = -1
    problems: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> bytes:
        problems = {str(epoch): reason for epoch, reason in sorted(self.problems.items())}
        return json.dumps({"committed": self.committed, "problems": problems}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> IngestNotes:
        fields = json.loads(raw)
        return cls(int(fields["committed"]), {int(e): str(r) for e, r in fields["problems"].items()})
