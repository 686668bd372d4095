"""The group records (core/zookeeper/group_records.py): round trips, and malformed data refused."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochstate.core.partition_ranges import PartitionRanges
from epochstate.core.zookeeper.errors import InvalidDefinition, InvalidRecord
from epochstate.core.zookeeper.group_records import (
    LAST_PARTITION,
    Assignment,
    JobAssignment,
    JobDefinition,
    MemberRecord,
    ShardAssignment,
    shard_ranges,
)
from epochstate.core.zookeeper.layout import Layout


def test_group_paths() -> None:
    layout = Layout("/es")
    assert layout.group_job("main", "orders") == "/es/groups/main/jobs/orders"
    assert layout.group_member("main", "node-a") == "/es/groups/main/members/node-a"
    assert layout.group_election("main") == "/es/groups/main/election"
    assert layout.group_assignment("main") == "/es/groups/main/assignment"


@settings(deadline=None)
@given(st.integers(1, 64), st.integers(1, 1000))
def test_shards_split_the_partitions_into_near_equal_ranges(shards: int, partitions: int) -> None:
    if shards > partitions:
        with pytest.raises(InvalidDefinition):
            shard_ranges(shards, partitions)
        return
    ranges = shard_ranges(shards, partitions)
    assert ranges[0][0] == 0 and ranges[-1][1] == LAST_PARTITION  # the last takes any partition after
    ranges = (*ranges[:-1], (ranges[-1][0], partitions - 1))
    assert all(left[1] + 1 == right[0] for left, right in itertools.pairwise(ranges))
    sizes = [last - first + 1 for first, last in ranges]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_a_definition_round_trips_and_keeps_fields_it_does_not_know() -> None:
    definition = JobDefinition("s3a://b/orders", 3, "paused", 2, 4, 10, 5, 6)
    assert JobDefinition.decode(definition.encode()) == definition
    newer = json.dumps({**json.loads(definition.encode()), "options": {"x": "1"}}).encode()
    decoded = JobDefinition.decode(newer)
    assert (
        decoded.other == {"options": {"x": "1"}} and decoded.encode() == JobDefinition.decode(newer).encode()
    )
    assert JobDefinition("file:///c").ranges == ((0, LAST_PARTITION),)


@pytest.mark.parametrize(
    "data",
    [
        None,
        b"",
        b"[]",
        b"not json",
        b'{"replicas": 1}',
        b'{"checkpoint": "", "replicas": 1}',
        b'{"checkpoint": "c", "replicas": 0}',
        b'{"checkpoint": "c", "replicas": true}',
        b'{"checkpoint": "c", "replicas": "2"}',
        b'{"checkpoint": "c", "state": "stopped"}',
        b'{"checkpoint": "c", "restart_generation": -1}',
        b'{"checkpoint": "c", "shards": 2}',
        b'{"checkpoint": "c", "shards": 3, "partitions": 2}',
        b'{"checkpoint": 7}',
    ],
)
def test_malformed_definitions_are_refused(data: bytes | None) -> None:
    with pytest.raises(InvalidRecord):
        JobDefinition.decode(data)


def test_member_records() -> None:
    member = MemberRecord("10.0.0.7:7070", "0.1.0", 5)
    assert MemberRecord.decode(member.encode()) == member
    for data in (
        b"{}",
        b'{"address": 1, "version": "v", "joined_at_ms": 1}',
        b'{"address": "a", "version": "v"}',
    ):
        with pytest.raises(InvalidRecord):
            MemberRecord.decode(data)


def _assignment() -> Assignment:
    shards = (ShardAssignment(0, 2, ("a", "b")), ShardAssignment(3, 4, ("c",), missing=1))
    return Assignment(7, "a", 123, {"orders": JobAssignment("s3a://b/o", "running", 1, shards)})


def test_an_assignment_round_trips_and_answers_who_follows_what() -> None:
    assignment = _assignment()
    assert Assignment.decode(assignment.encode()) == assignment
    assert assignment.encode() == Assignment.decode(assignment.encode()).encode()  # canonical bytes
    assert assignment.assigned("a") == {"orders": [assignment.jobs["orders"].shards[0]]}
    assert assignment.assigned("z") == {}
    assert assignment.jobs["orders"].shortfall == 1


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r.pop("generation"),
        lambda r: r.update(generation=-1),
        lambda r: r.update(leader=None),
        lambda r: r.update(jobs=[]),
        lambda r: r["jobs"].update({"a/b": r["jobs"]["orders"]}),
        lambda r: r["jobs"]["orders"].update(state="stopped"),
        lambda r: r["jobs"]["orders"].update(restart_generation="1"),
        lambda r: r["jobs"]["orders"]["shards"][0].update(partitions=[2, 1]),
        lambda r: r["jobs"]["orders"]["shards"][0].update(partitions=[0]),
        lambda r: r["jobs"]["orders"]["shards"][0].update(replicas=["a", "a"]),
        lambda r: r["jobs"]["orders"]["shards"][0].update(replicas="a"),
        lambda r: r["jobs"]["orders"]["shards"][0].update(replicas=["a/b"]),
        lambda r: r["jobs"]["orders"]["shards"][0].update(missing=-1),
    ],
)
def test_malformed_assignments_are_refused(change: object) -> None:
    record = json.loads(_assignment().encode())
    change(record)  # type: ignore[operator]
    with pytest.raises(InvalidRecord):
        Assignment.decode(json.dumps(record).encode())


def test_a_node_holds_the_partitions_of_its_shards_merged() -> None:
    shards = (
        ShardAssignment(0, 1, ("n1", "n2")),
        ShardAssignment(2, 3, ("n2", "n3")),
        ShardAssignment(4, 5, ("n1",)),
    )
    job = JobAssignment("file:///c", "running", 0, shards)
    n1, n2, n3 = (job.held_by(node) for node in ("n1", "n2", "n3"))
    assert n1 is not None and n1.ranges == ((0, 1), (4, 5)) and str(n1) == "0-1, 4-5"
    assert n2 is not None and n2.ranges == ((0, 3),) and n2.covers_all(4) and not n2.covers_all(6)
    assert n3 is not None and n3.partitions(6) == (2, 3) and not n3.covers(1)
    with pytest.raises(ValueError, match="no range"):
        job.held_by("n4")
    whole = JobAssignment("file:///c", "running", 0, (ShardAssignment(0, LAST_PARTITION, ("n1",)),))
    assert whole.held_by("n1") is None  # every partition: the whole job
    assert PartitionRanges.of([(0, 0), (1, 1)]) == PartitionRanges.of([(0, 1)])
