"""What the group znodes hold: job definitions, members and the assignment.

::

    <root>/groups/<group>/jobs/<job>      {"checkpoint", "replicas", "state": "running" | "paused",
                                           "restart_generation", "shards", "partitions": n | null,
                                           "created_at_ms", "updated_at_ms", ...fields of newer versions}
    <root>/groups/<group>/members/<node>  {"address", "version", "joined_at_ms"}
    <root>/groups/<group>/assignment      {"generation", "leader", "updated_at_ms",
                                           "jobs": {"<job>": {"checkpoint", "state", "restart_generation",
                                                    "shards": [{"partitions": [first, last],
                                                                "replicas": [node, ...], "missing": n}]}}}

Payloads are canonical JSON (:func:`~epochstate.core.zookeeper.records.encode`).
Every ``decode`` refuses malformed data with InvalidRecord; every constructor
refuses impossible values with InvalidDefinition (a definition) or InvalidRecord.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from epochstate.core.partition_ranges import LAST_PARTITION as LAST_PARTITION
from epochstate.core.partition_ranges import PartitionRanges
from epochstate.core.zookeeper.errors import InvalidDefinition, InvalidName, InvalidRecord
from epochstate.core.zookeeper.layout import check_name
from epochstate.core.zookeeper.records import encode

JobState = Literal["running", "paused"]
JOB_STATES: tuple[JobState, ...] = ("running", "paused")
_DEFINITION_FIELDS = (
    "checkpoint",
    "replicas",
    "state",
    "restart_generation",
    "shards",
    "partitions",
    "created_at_ms",
    "updated_at_ms",
)


def _count(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidDefinition(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def shard_ranges(shards: int, partitions: int | None) -> tuple[tuple[int, int], ...]:
    """The Spark partitions ``[first, last]`` of each of ``shards`` contiguous shards.

    With ``partitions`` unknown (None) there is one shard, ``[0, LAST_PARTITION]``:
    every partition a key can fall in. Otherwise the ranges split ``partitions``
    (the newest epoch's count) and differ in size by one at most, the larger first
    (as Kafka's range assignor splits partitions); the last shard also takes every
    partition after them, up to ``LAST_PARTITION``, so that the shards cover every
    layout a repartitioned checkpoint had or will have: an epoch of more partitions
    is served, by the last shard, until the group splits the job anew.

    Raises:
        InvalidDefinition: ``shards`` < 1, more than one shard of unknown
            partitions, or more shards than partitions.
    """
    _count(shards, "shards", 1)
    if partitions is None:
        if shards != 1:
            raise InvalidDefinition("a job of several shards must state its number of Spark partitions")
        return ((0, LAST_PARTITION),)
    _count(partitions, "partitions", 1)
    if shards > partitions:
        raise InvalidDefinition(f"{shards} shards cannot split {partitions} partitions")
    size, larger = divmod(partitions, shards)
    ranges, first = [], 0
    for index in range(shards):
        count = size + (1 if index < larger else 0)
        ranges.append((first, first + count - 1))
        first += count
    ranges[-1] = (ranges[-1][0], LAST_PARTITION)
    return tuple(ranges)


@dataclass(frozen=True)
class JobDefinition:
    """A job of the group, as the admin defined it (Kafka Connect's connector config).

    ``replicas`` daemons follow each of its ``shards``; ``state`` "paused" keeps the
    replicas assigned and serving the epochs they hold, without ingesting new ones;
    ``restart_generation`` goes up by one with every restart, which tells each
    replica to re-open the job. ``other`` keeps fields written by newer versions.

    Raises:
        InvalidDefinition: an empty checkpoint, replicas < 1, a state not in
            JOB_STATES, or shards that do not split the partitions.
    """

    checkpoint: str
    replicas: int = 1
    state: JobState = "running"
    restart_generation: int = 0
    shards: int = 1
    partitions: int | None = None
    created_at_ms: int = 0
    updated_at_ms: int = 0
    other: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.checkpoint, str) or not self.checkpoint:
            raise InvalidDefinition(f"checkpoint must be a non-empty URI, got {self.checkpoint!r}")
        _count(self.replicas, "replicas", 1)
        if self.state not in JOB_STATES:
            raise InvalidDefinition(f"state must be one of {JOB_STATES}, got {self.state!r}")
        _count(self.restart_generation, "restart_generation", 0)
        _count(self.created_at_ms, "created_at_ms", 0)
        _count(self.updated_at_ms, "updated_at_ms", 0)
        shard_ranges(self.shards, self.partitions)

    @property
    def ranges(self) -> tuple[tuple[int, int], ...]:
        """Each shard's Spark partitions ``[first, last]`` (:func:`shard_ranges`)."""
        return shard_ranges(self.shards, self.partitions)

    def encode(self) -> bytes:
        return encode({**self.other, **{name: getattr(self, name) for name in _DEFINITION_FIELDS}})

    @classmethod
    def decode(cls, data: bytes | None) -> JobDefinition:
        """The definition in a job znode's data; InvalidRecord if it is not one."""
        record = decode_object(data, "job definition")
        try:
            known = {name: record.pop(name) for name in _DEFINITION_FIELDS if name in record}
            return cls(**known, other=record)
        except (TypeError, InvalidDefinition) as error:
            raise InvalidRecord(f"not a job definition: {error}") from error


@dataclass(frozen=True)
class MemberRecord:
    """A live member of the group: where its gRPC API listens, which version it runs."""

    address: str
    version: str
    joined_at_ms: int

    def encode(self) -> bytes:
        return encode({"address": self.address, "version": self.version, "joined_at_ms": self.joined_at_ms})

    @classmethod
    def decode(cls, data: bytes | None) -> MemberRecord:
        record = decode_object(data, "member record")
        address, version, joined = record.get("address"), record.get("version"), record.get("joined_at_ms")
        if not isinstance(address, str) or not isinstance(version, str) or not _is_count(joined):
            raise InvalidRecord(f"not a member record: {record!r}")
        return cls(address, version, cast(int, joined))


@dataclass(frozen=True)
class ShardAssignment:
    """One shard of a job: its Spark partitions ``[first, last]`` and the nodes that follow it.

    ``replicas`` are distinct nodes, the longest-assigned first. ``missing`` is how
    many replicas the definition asks for beyond those (fewer live members than replicas).
    """

    first: int
    last: int
    replicas: tuple[str, ...]
    missing: int = 0

    def __post_init__(self) -> None:
        if not (_is_count(self.first) and _is_count(self.last) and self.first <= self.last):
            raise InvalidRecord(f"a shard's partitions must be 0 <= first <= last: {self.first, self.last}")
        if not _is_count(self.missing) or len(set(self.replicas)) != len(self.replicas):
            raise InvalidRecord(f"a shard's replicas must be distinct nodes: {self.replicas!r}")
        try:
            for node in self.replicas:
                check_name("node", node)
        except InvalidName as error:
            raise InvalidRecord(str(error)) from None

    def to_json(self) -> dict[str, Any]:
        return {
            "partitions": [self.first, self.last],
            "replicas": list(self.replicas),
            "missing": self.missing,
        }

    @classmethod
    def from_json(cls, value: Any) -> ShardAssignment:
        first, last = value["partitions"]
        replicas = value["replicas"]
        if not isinstance(replicas, list):
            raise TypeError(f"replicas must be a list: {replicas!r}")
        return cls(first, last, tuple(replicas), value.get("missing", 0))


@dataclass(frozen=True)
class JobAssignment:
    """A job as the leader assigned it: what its replicas need to follow it, and its shards."""

    checkpoint: str
    state: JobState
    restart_generation: int
    shards: tuple[ShardAssignment, ...]

    def held_by(self, node: str) -> PartitionRanges | None:
        """The Spark partitions that ``node``'s shards of the job cover (None: every one).

        Raises:
            ValueError: ``node`` follows no shard of the job.
        """
        return PartitionRanges.of((s.first, s.last) for s in self.shards if node in s.replicas)

    @property
    def shortfall(self) -> int:
        """Replicas the definition asks for that no live member could take."""
        return sum(shard.missing for shard in self.shards)

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "state": self.state,
            "restart_generation": self.restart_generation,
            "shards": [shard.to_json() for shard in self.shards],
        }

    @classmethod
    def from_json(cls, value: Any) -> JobAssignment:
        state, generation = value["state"], value["restart_generation"]
        if state not in JOB_STATES or not _is_count(generation) or not isinstance(value["checkpoint"], str):
            raise ValueError(f"not a job assignment: {value!r}")
        shards = tuple(ShardAssignment.from_json(shard) for shard in value["shards"])
        return cls(value["checkpoint"], cast(JobState, state), generation, shards)


@dataclass(frozen=True)
class Assignment:
    """The group's assignment, generation ``generation``, written by member ``leader``."""

    generation: int
    leader: str
    updated_at_ms: int
    jobs: Mapping[str, JobAssignment]

    def assigned(self, node: str) -> dict[str, list[ShardAssignment]]:
        """The shards ``node`` follows, by job (jobs without one of its shards left out)."""
        found: dict[str, list[ShardAssignment]] = {}
        for job, assignment in sorted(self.jobs.items()):
            shards = [shard for shard in assignment.shards if node in shard.replicas]
            if shards:
                found[job] = shards
        return found

    def encode(self) -> bytes:
        jobs = {job: assignment.to_json() for job, assignment in self.jobs.items()}
        return encode(
            {
                "generation": self.generation,
                "leader": self.leader,
                "updated_at_ms": self.updated_at_ms,
                "jobs": jobs,
            }
        )

    @classmethod
    def decode(cls, data: bytes | None) -> Assignment:
        """The assignment in the assignment znode's data; InvalidRecord if it is not one."""
        record = decode_object(data, "assignment")
        try:
            generation, leader, updated = record["generation"], record["leader"], record["updated_at_ms"]
            if not (_is_count(generation) and _is_count(updated) and isinstance(leader, str)):
                raise ValueError(f"generation {generation!r}, leader {leader!r}, updated_at_ms {updated!r}")
            jobs = {
                check_name("job", job): JobAssignment.from_json(value)
                for job, value in record["jobs"].items()
            }
        except (KeyError, TypeError, ValueError, AttributeError, InvalidName) as error:
            raise InvalidRecord(f"not an assignment: {error!r}") from error
        return cls(generation, leader, updated, jobs)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def decode_object(data: bytes | None, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data or b"")
    except ValueError as error:
        raise InvalidRecord(f"{what} is not JSON: {error}") from error
    if not isinstance(value, dict):
        raise InvalidRecord(f"{what} is not a JSON object")
    return value
