"""The assignor's guarantees (daemon/group/assignor.py), as properties over random groups."""

from __future__ import annotations

import math

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from epochstate.core.partition_ranges import LAST_PARTITION
from epochstate.core.zookeeper.group_records import JobAssignment, JobDefinition
from epochstate.daemon.group.assignor import assign, moved_replicas, replicas_per_node

NODES = [f"node-{i}" for i in range(8)]
members_st = st.sets(st.sampled_from(NODES), max_size=len(NODES))


@st.composite
def definitions_st(draw: st.DrawFn) -> dict[str, JobDefinition]:
    jobs = draw(st.sets(st.sampled_from([f"job-{i}" for i in range(8)]), max_size=8))
    found = {}
    for job in sorted(jobs):
        shards = draw(st.integers(1, 4))
        partitions = draw(st.integers(shards, 12)) if shards > 1 else draw(st.none() | st.integers(1, 12))
        found[job] = JobDefinition(
            f"s3a://bucket/{job}",
            replicas=draw(st.integers(1, 4)),
            state=draw(st.sampled_from(["running", "paused"])),
            shards=shards,
            partitions=partitions,
        )
    return found


@st.composite
def history_st(draw: st.DrawFn) -> tuple[dict[str, JobAssignment], dict[str, JobDefinition], set[str]]:
    """An assignment reached through a few membership and definition changes, its
    definitions and its members."""
    definitions, members = draw(definitions_st()), draw(members_st)
    jobs = assign({}, members, definitions)
    for _ in range(draw(st.integers(0, 3))):
        definitions, members = draw(st.just(definitions) | definitions_st()), draw(members_st)
        jobs = assign(jobs, members, definitions)
    return jobs, definitions, members


def _pairs(jobs: dict[str, JobAssignment]) -> set[tuple[str, int, str]]:
    return {
        (job, shard.first, node) for job, a in jobs.items() for shard in a.shards for node in shard.replicas
    }


def _total(jobs: dict[str, JobAssignment]) -> int:
    return sum(len(shard.replicas) for a in jobs.values() for shard in a.shards)


@settings(max_examples=200, deadline=None)
@given(history_st())
def test_every_shard_has_its_replicas_on_distinct_live_members(
    history: tuple[dict[str, JobAssignment], dict[str, JobDefinition], set[str]],
) -> None:
    jobs, definitions, members = history
    assert set(jobs) == set(definitions)  # paused jobs included
    for job, definition in definitions.items():
        assignment = jobs[job]
        assert (assignment.checkpoint, assignment.state) == (definition.checkpoint, definition.state)
        assert [(s.first, s.last) for s in assignment.shards] == list(definition.ranges)
        for shard in assignment.shards:
            assert len(set(shard.replicas)) == len(shard.replicas) == min(definition.replicas, len(members))
            assert set(shard.replicas) <= members
            assert shard.missing == definition.replicas - len(shard.replicas)  # the shortfall, reported


def _balanced(jobs: dict[str, JobAssignment], members: set[str]) -> bool:
    load = replicas_per_node(jobs, members)
    return not load or max(load.values()) - min(load.values()) <= 1


@settings(max_examples=200, deadline=None)
@given(history_st(), definitions_st(), st.sets(st.sampled_from(["new-0", "new-1"]), min_size=1))
def test_a_group_that_grew_is_balanced(
    history: tuple[dict[str, JobAssignment], dict[str, JobDefinition], set[str]],
    definitions: dict[str, JobDefinition],
    joining: set[str],
) -> None:
    jobs, _, members = history
    assert _balanced(assign({}, members, definitions), members)  # a new group
    assert _balanced(assign(jobs, members | joining, definitions), members | joining)


@settings(max_examples=200, deadline=None)
@given(history_st())
def test_an_unchanged_group_keeps_its_assignment(
    history: tuple[dict[str, JobAssignment], dict[str, JobDefinition], set[str]],
) -> None:
    jobs, definitions, members = history
    assert assign(jobs, members, definitions) == jobs
    assert assign(jobs, sorted(members, reverse=True), dict(reversed(definitions.items()))) == jobs


@settings(max_examples=200, deadline=None)
@given(history_st(), st.data())
def test_members_leaving_move_only_their_replicas(
    history: tuple[dict[str, JobAssignment], dict[str, JobDefinition], set[str]], data: st.DataObject
) -> None:
    jobs, definitions, members = history
    leaving = data.draw(st.sets(st.sampled_from(sorted(members))) if members else st.just(set()))
    after = assign(jobs, members - leaving, definitions)
    stayed = {(job, first, node) for job, first, node in _pairs(jobs) if node not in leaving}
    assert stayed <= _pairs(after)
    # Every replica that moved was on a member that left.
    assert moved_replicas(jobs, after) <= sum(1 for _, _, node in _pairs(jobs) if node in leaving)


@settings(max_examples=200, deadline=None)
@given(history_st(), st.sets(st.sampled_from([f"new-{i}" for i in range(3)]), min_size=1))
def test_members_joining_take_only_their_fair_share(
    history: tuple[dict[str, JobAssignment], dict[str, JobDefinition], set[str]], joining: set[str]
) -> None:
    jobs, definitions, members = history
    assume(_balanced(jobs, members))
    after = assign(jobs, members | joining, definitions)
    total = _total(after)
    moved = moved_replicas(jobs, after)
    assert moved <= len(joining) * math.ceil(total / len(members | joining))
    # Nothing moves between members that were there before: what moved went to a joiner.
    kept = {pair for pair in _pairs(after) if pair[2] not in joining}
    assert kept <= _pairs(jobs)
    if members and total == _total(jobs):  # no shard was short of replicas before
        assert moved == sum(1 for _, _, node in _pairs(after) if node in joining)


@settings(deadline=None)
@given(definitions_st())
def test_without_members_every_replica_is_missing(definitions: dict[str, JobDefinition]) -> None:
    jobs = assign({}, [], definitions)
    for job, definition in definitions.items():
        assert jobs[job].shortfall == definition.replicas * definition.shards
        assert all(shard.replicas == () for shard in jobs[job].shards)


def test_a_small_group_by_hand() -> None:
    definitions = {"orders": JobDefinition("file:///c/orders", replicas=2, shards=2, partitions=5)}
    first = assign({}, ["a", "b", "c"], definitions)
    assert [(s.first, s.last, s.replicas) for s in first["orders"].shards] == [
        (0, 2, ("a", "b")),
        (3, LAST_PARTITION, ("c", "a")),  # and any partition after (a repartition)
    ]
    # b leaves: its one replica goes to the member without a replica of that shard.
    second = assign(first, ["a", "c"], definitions)
    assert [s.replicas for s in second["orders"].shards] == [("a", "c"), ("c", "a")]
    assert moved_replicas(first, second) == 1
    # Three replicas asked, two members: the shortfall is reported.
    wider = {"orders": JobDefinition("file:///c/orders", replicas=3)}
    assert assign(second, ["a", "c"], wider)["orders"].shortfall == 1
