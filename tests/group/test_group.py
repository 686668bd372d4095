"""The group on a real ZooKeeper: election, assignment, joins, kill -9, leader failover, fencing.

In-process members each have a KazooClient (a session) of their own; members
that must die run in child processes and are killed with SIGKILL, so their
sessions end the way a crashed daemon's do: ZooKeeper expires them after their
2 s session timeout (the members that stay have 4 s). Every wait is on a condition with a generous deadline.
"""

from __future__ import annotations

import math

import pytest
from kazoo.protocol.connection import _SESSION_EXPIRED

from epochstate.core.zookeeper.errors import AssignmentChanged, JobNotAssigned, NotLeader
from epochstate.core.zookeeper.group_records import Assignment, JobAssignment
from epochstate.daemon.group.assignments import read_assignment, write_assignment
from epochstate.daemon.group.assignor import moved_replicas, replicas_per_node
from epochstate.daemon.group.definitions import JobDefinitions
from epochstate.daemon.group.member import GroupMember
from epochstate.daemon.group.membership import read_members
from epochstate.devtools.zookeeper import EmbeddedZooKeeper
from tests.fixtures.zookeeper import EXPIRING_SESSION_TIMEOUT, eventually, expire_session, new_test_client
from tests.group.conftest import GROUP, LAYOUT, GroupHarness
from tests.group.cut_proxy import CutProxy

DEADLINE = 60.0


def _define(admin: JobDefinitions) -> None:
    admin.add("orders", "s3a://bucket/orders", replicas=2)
    admin.add("clicks", "s3a://bucket/clicks", replicas=2, shards=3, partitions=6)
    admin.add("users", "file:///checkpoints/users", replicas=3)
    admin.add("audit", "hdfs://nn/audit", replicas=1)
    admin.pause("audit")


def _settled(harness: GroupHarness, members: set[str], balanced: bool = True) -> Assignment:
    """Wait until the assignment gives every defined shard its replicas on ``members`` only
    (balanced across them, unless members left: stickiness wins then)."""
    definitions = harness.admin().list()

    def complete() -> bool:
        assignment = harness.assignment()
        if assignment is None or set(assignment.jobs) != set(definitions):
            return False
        load = replicas_per_node(dict(assignment.jobs), members).values()
        return (not balanced or max(load) - min(load) <= 1) and all(
            set(shard.replicas) <= members
            and len(shard.replicas) == min(definitions[job].replicas, len(members))
            and [(s.first, s.last) for s in a.shards] == list(definitions[job].ranges)
            for job, a in assignment.jobs.items()
            for shard in a.shards
        )

    assert eventually(complete, DEADLINE), harness.assignment()
    assignment = harness.assignment()
    assert assignment is not None
    return assignment


def _pairs(jobs: dict[str, JobAssignment] | object) -> set[tuple[str, int, str]]:
    assert isinstance(jobs, dict)
    return {(job, s.first, node) for job, a in jobs.items() for s in a.shards for node in s.replicas}


def _leaders(harness: GroupHarness) -> list[str]:
    return [node for node, member in harness.members.items() if member.leader.leading]


def test_three_members_elect_one_leader_that_assigns_every_job(harness: GroupHarness) -> None:
    _define(harness.admin())
    for node in ("node-a", "node-b", "node-c"):
        harness.join(node)
    assignment = _settled(harness, {"node-a", "node-b", "node-c"})
    assert eventually(lambda: len(_leaders(harness)) == 1, DEADLINE)
    (leader,) = _leaders(harness)
    assert assignment.leader == leader
    members = read_members(harness.members[leader].client, LAYOUT, GROUP)
    assert {node: record.address for node, record in members.items()} == {
        node: f"{node}.test:7070" for node in ("node-a", "node-b", "node-c")
    }
    load = replicas_per_node(dict(assignment.jobs), ["node-a", "node-b", "node-c"])
    assert sum(load.values()) == 2 + 2 * 3 + 3 + 1 and max(load.values()) - min(load.values()) <= 1
    assert (
        assignment.jobs["audit"].state == "paused" and len(assignment.jobs["audit"].shards[0].replicas) == 1
    )
    assert assignment.jobs["clicks"].checkpoint == "s3a://bucket/clicks"
    # Each member sees the same assignment, and its own part of it in its callback.
    for node, member in harness.members.items():

        def seen(member: GroupMember = member, node: str = node) -> bool:
            return member.assignment == assignment and harness.changes[node][-1] == assignment.assigned(node)

        assert eventually(seen, DEADLINE)
        assert member.assigned() == assignment.assigned(node)
    # A fourth replica of "users" is asked for: three members, one replica missing.
    harness.admin().update("users", replicas=4)
    assert eventually(
        lambda: (a := harness.assignment()) is not None and a.jobs["users"].shortfall == 1, DEADLINE
    )


def test_a_joining_member_takes_only_its_share(harness: GroupHarness) -> None:
    _define(harness.admin())
    for node in ("node-a", "node-b", "node-c"):
        harness.join(node)
    before = _settled(harness, {"node-a", "node-b", "node-c"})
    harness.join("node-d")
    after = _settled(harness, {"node-a", "node-b", "node-c", "node-d"})
    assert after.generation > before.generation
    moved = moved_replicas(before.jobs, after.jobs)
    total = len(_pairs(dict(after.jobs)))
    print(f"node-d joined: {moved} of {total} replicas moved (fair share {math.ceil(total / 4)})")
    assert 0 < moved <= math.ceil(total / 4)
    # What moved went to node-d; nothing moved between the others.
    assert {p for p in _pairs(dict(after.jobs)) if p[2] != "node-d"} <= _pairs(dict(before.jobs))
    assert moved == sum(1 for p in _pairs(dict(after.jobs)) if p[2] == "node-d")


def test_a_killed_members_replicas_move_and_nothing_else(harness: GroupHarness) -> None:
    _define(harness.admin())
    harness.join("node-a")
    harness.join("node-b")
    victim = harness.spawn("node-c")
    before = _settled(harness, {"node-a", "node-b", "node-c"})
    held = {p for p in _pairs(dict(before.jobs)) if p[2] == "node-c"}
    assert held

    victim.kill()  # the session stays until ZooKeeper expires it (2 s)
    after = _settled(harness, {"node-a", "node-b"}, balanced=False)
    moved = moved_replicas(before.jobs, after.jobs)
    print(f"node-c killed: {len(held)} replicas held, {moved} moved")
    assert {p for p in _pairs(dict(before.jobs)) if p[2] != "node-c"} <= _pairs(dict(after.jobs))
    assert moved <= len(held)
    assert after.generation > before.generation


def test_a_killed_leader_is_replaced_and_the_generation_goes_on(harness: GroupHarness) -> None:
    _define(harness.admin())
    old_leader = harness.spawn("node-a")  # first to contend: it leads
    assert eventually(lambda: (a := harness.assignment()) is not None and a.leader == "node-a", DEADLINE)
    harness.join("node-b")
    harness.join("node-c")
    before = _settled(harness, {"node-a", "node-b", "node-c"})
    assert before.leader == "node-a" and _leaders(harness) == []

    old_leader.kill()
    after = _settled(harness, {"node-b", "node-c"}, balanced=False)
    assert eventually(lambda: len(_leaders(harness)) == 1, DEADLINE)
    assert after.leader == _leaders(harness)[0]
    assert after.generation > before.generation
    assert {p for p in _pairs(dict(before.jobs)) if p[2] != "node-a"} <= _pairs(dict(after.jobs))


def test_a_deposed_leaders_write_is_refused(
    harness: GroupHarness, zookeeper_server: EmbeddedZooKeeper
) -> None:
    _define(harness.admin())
    first = harness.join("node-a")
    assert eventually(lambda: first.leader.leading, DEADLINE)
    harness.join("node-b")
    before = _settled(harness, {"node-a", "node-b"})
    deposed = first.leader.leadership
    assert deposed is not None and before.leader == "node-a"

    expire_session(zookeeper_server, first.client)  # node-a's election znode goes with its session
    assert eventually(lambda: first.client.connected and first.membership.joined, DEADLINE)
    assert eventually(lambda: harness.members["node-b"].leader.leading, DEADLINE)
    _settled(harness, {"node-a", "node-b"}, balanced=False)  # node-a is back, in a new session
    assert eventually(lambda: (a := harness.assignment()) is not None and a.leader == "node-b", DEADLINE)
    current, version = read_assignment(first.client, LAYOUT, GROUP)
    assert current is not None and version is not None
    # node-a writes with its old leadership, at the assignment's current version: refused.
    forged = Assignment(current.generation + 1, "node-a", 0, {})
    with pytest.raises(NotLeader):
        write_assignment(first.client, LAYOUT, GROUP, deposed, forged, version)
    # The leader itself, at a version it did not read: refused too.
    leadership = harness.members["node-b"].leader.leadership
    assert leadership is not None
    with pytest.raises(AssignmentChanged):
        write_assignment(first.client, LAYOUT, GROUP, leadership, forged, version - 1)
    assert read_assignment(first.client, LAYOUT, GROUP) == (current, version)
    # node-a rejoined in its new session and contends again, without leading.
    assert eventually(lambda: first.membership.joined, DEADLINE)
    assert not first.leader.leading and first.leader.terms == 1


def test_ready_and_restart(harness: GroupHarness) -> None:
    admin = harness.admin()
    admin.add("orders", "file:///c", replicas=1)
    admin.add("clicks", "file:///d", replicas=1)
    ready: list[str] = []
    member = harness.join("node-a")
    member._on_ready = ready.append
    _settled(harness, {"node-a"})
    assert eventually(lambda: set(member.assigned()) == {"orders", "clicks"}, DEADLINE)
    with pytest.raises(JobNotAssigned):
        member.ready("nope")
    member.ready("orders")
    assert ready == ["orders"] and member.is_ready("orders") and not member.is_ready("clicks")
    admin.restart("orders")  # a restart re-opens the job: not ready until caught up again
    assert eventually(lambda: not member.is_ready("orders"), DEADLINE)
    assert member.assigned()["orders"][0].replicas == ("node-a",)
    admin.remove("clicks")
    assert eventually(lambda: set(member.assigned()) == {"orders"}, DEADLINE)
    assert harness.changes["node-a"][-1] == member.assigned()


def test_a_member_znode_of_an_old_session_is_taken_over_once_it_expires(harness: GroupHarness) -> None:
    # The client gives its session up while ZooKeeper still holds it (kazoo's own test
    # trick), as a restarted daemon finds its previous process's znodes: the new
    # session joins once ZooKeeper expired the old one, and leads again then.
    harness.admin().add("orders", "file:///c")
    member = harness.join("node-a", harness.make_client(EXPIRING_SESSION_TIMEOUT))
    assert eventually(lambda: member.leader.leading, DEADLINE)
    path = LAYOUT.group_member(GROUP, "node-a")
    old = member.client.client_id[0]
    member.client._call(_SESSION_EXPIRED, None)
    assert eventually(lambda: member.client.connected and member.client.client_id[0] != old, DEADLINE)
    new = member.client.client_id[0]
    reader = harness.make_client()
    assert reader.exists(path).ephemeralOwner == old  # held by the old session meanwhile
    assert eventually(
        lambda: (stat := reader.exists(path)) is not None and stat.ephemeralOwner == new, DEADLINE
    )
    assert eventually(lambda: member.membership.joined and member.leader.terms == 2, DEADLINE), (
        member.membership.joined,
        member.leader.terms,
        member.leader.leading,
        reader.get_children(LAYOUT.group_election(GROUP)),
    )
    assert eventually(lambda: set(member.assigned()) == {"orders"}, DEADLINE), (
        member.assignment,
        harness.assignment(),
        reader.get_children(LAYOUT.group_members(GROUP)),
    )


def test_a_leader_cut_off_from_zookeeper_is_replaced_and_cannot_write(
    harness: GroupHarness, zookeeper_server: EmbeddedZooKeeper, zk_chroot: str
) -> None:
    _define(harness.admin())
    proxy = CutProxy("127.0.0.1", zookeeper_server.port)
    cut_off_client = new_test_client(f"127.0.0.1:{proxy.port}{zk_chroot}", EXPIRING_SESSION_TIMEOUT)
    cut_off_client.start(timeout=15)
    try:
        cut_off = harness.join("node-a", cut_off_client)
        assert eventually(lambda: cut_off.leader.leading, DEADLINE)
        harness.join("node-b")
        harness.join("node-c")
        before = _settled(harness, {"node-a", "node-b", "node-c"})
        deposed = cut_off.leader.leadership
        assert deposed is not None

        proxy.cut()  # node-a's session expires in ZooKeeper: the others take over
        after = _settled(harness, {"node-b", "node-c"}, balanced=False)
        assert after.leader in ("node-b", "node-c") and after.generation > before.generation
        assert {p for p in _pairs(dict(before.jobs)) if p[2] != "node-a"} <= _pairs(dict(after.jobs))

        proxy.restore()  # node-a learns its session expired, joins again, and does not lead
        back = _settled(harness, {"node-a", "node-b", "node-c"})
        assert back.leader == after.leader and back.generation > after.generation
        assert eventually(lambda: cut_off.membership.joined and not cut_off.leader.leading, DEADLINE)
        assert cut_off.leader.terms == 1
        _, version = read_assignment(cut_off_client, LAYOUT, GROUP)
        with pytest.raises(NotLeader):
            write_assignment(cut_off_client, LAYOUT, GROUP, deposed, Assignment(99, "node-a", 0, {}), version)
        assert eventually(lambda: cut_off.assigned() == back.assigned("node-a"), DEADLINE)
    finally:
        harness.members.pop("node-a").stop(10)
        cut_off_client.stop()
        cut_off_client.close()
        proxy.close()
