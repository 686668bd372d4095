"""The group's assignor: a pure function from (previous assignment, live members, definitions)
to the next assignment.

Its guarantees, each checked by a property test (tests/group/test_assignor.py):

- Every shard of every defined job (paused ones too: a paused replica keeps
  serving the epochs it holds) has ``min(replicas, len(members))`` replicas, on
  distinct live members; ``missing`` says how many the definition asks for beyond.
- Sticky when members leave: a replica on a live member never moves away when
  the group only shrank (members left, no job or replica was added); only the
  replicas of the members that left move, each to the least loaded member that
  does not hold its shard yet.
- Balanced when the group grew (a member joined, a shard or a replica was
  added): the number of replicas per member then differs by one at most. A
  member joining a balanced group takes at most ``ceil(total / members)``
  replicas (its fair share), and nothing moves between the other members.
- Stickiness wins over balance: after members left, a shard whose replicas may
  only go to the most loaded members can leave a difference of two or more,
  evened out at the next growth. Moving a replica costs a full catch-up of its
  state; one replica more on a member costs little.
- Deterministic: the same inputs give the same assignment; an unchanged group
  gives back its previous assignment.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from epochstate.core.zookeeper.group_records import JobAssignment, JobDefinition, ShardAssignment

ShardKey = tuple[str, int, int]  # job, first partition, last partition


@dataclass
class _Shard:
    key: ShardKey
    wanted: int
    replicas: list[str]


def assign(
    previous: Mapping[str, JobAssignment],
    members: Collection[str],
    definitions: Mapping[str, JobDefinition],
) -> dict[str, JobAssignment]:
    """The jobs of the next assignment (see the module's guarantees).

    ``previous`` is the current assignment's jobs (empty for the first one);
    ``members`` the live members' node names; ``definitions`` the group's jobs.
    A shard is the same shard when its job and partition range are: a job whose
    shards were redefined starts them afresh.
    """
    live = sorted(set(members))
    kept = _previous_replicas(previous, set(live))
    shards: list[_Shard] = []
    for job, definition in sorted(definitions.items()):
        for first, last in definition.ranges:
            key = (job, first, last)
            wanted = min(definition.replicas, len(live))
            shards.append(_Shard(key, wanted, kept.get(key, [])[:wanted]))
    load = Counter({node: 0 for node in live})
    for shard in shards:
        load.update(shard.replicas)
    held = {node for replicas in kept.values() for node in replicas}
    sizes = {job_shard: len(shard.replicas) for job_shard, shard in _previous_shards(previous).items()}
    grew = any(node not in held for node in live) or any(s.wanted > sizes.get(s.key, 0) for s in shards)
    # The most constrained shards (fewest members left to take a replica) choose first.
    for shard in sorted(shards, key=lambda s: (-len(s.replicas), s.key)):
        while len(shard.replicas) < shard.wanted:
            node = min((n for n in live if n not in shard.replicas), key=lambda n: (load[n], n))
            shard.replicas.append(node)
            load[node] += 1
    if grew:
        _balance(shards, load)
    by_key = {shard.key: shard for shard in shards}
    jobs: dict[str, JobAssignment] = {}
    for job, definition in sorted(definitions.items()):
        assigned = tuple(
            ShardAssignment(
                first,
                last,
                tuple(by_key[(job, first, last)].replicas),
                definition.replicas - by_key[(job, first, last)].wanted,
            )
            for first, last in definition.ranges
        )
        jobs[job] = JobAssignment(
            definition.checkpoint, definition.state, definition.restart_generation, assigned
        )
    return jobs


def moved_replicas(before: Mapping[str, JobAssignment], after: Mapping[str, JobAssignment]) -> int:
    """How many replicas ``after`` places on a node that did not hold that shard ``before``,
    counting only shards present in both (new shards are placed, not moved)."""
    old = _replica_sets(before)
    return sum(len(nodes - old[key]) for key, nodes in _replica_sets(after).items() if old.get(key))


def replicas_per_node(jobs: Mapping[str, JobAssignment], members: Collection[str]) -> dict[str, int]:
    """How many shard replicas each of ``members`` holds in ``jobs``."""
    load = Counter({node: 0 for node in members})
    for assignment in jobs.values():
        for shard in assignment.shards:
            load.update(shard.replicas)
    return dict(load)


def _previous_replicas(previous: Mapping[str, JobAssignment], live: set[str]) -> dict[ShardKey, list[str]]:
    """Each previous shard's replicas on live members, in their order."""
    return {
        (job, shard.first, shard.last): [node for node in shard.replicas if node in live]
        for job, assignment in previous.items()
        for shard in assignment.shards
    }


def _previous_shards(previous: Mapping[str, JobAssignment]) -> dict[ShardKey, ShardAssignment]:
    return {(job, s.first, s.last): s for job, assignment in previous.items() for s in assignment.shards}


def _replica_sets(jobs: Mapping[str, JobAssignment]) -> dict[ShardKey, set[str]]:
    return {
        (job, shard.first, shard.last): set(shard.replicas)
        for job, assignment in jobs.items()
        for shard in assignment.shards
    }


def _balance(shards: list[_Shard], load: Counter[str]) -> None:
    """Move replicas from the most to the least loaded member until they differ by one at most.

    A member with at least two more replicas than another holds a shard that the
    other does not (each shard has one replica per member at most), so each step
    finds a replica to move. A shard's first (longest-assigned) replica moves last.
    """
    if not load:
        return
    while True:
        most = max(load, key=lambda n: (load[n], n))
        least = min(load, key=lambda n: (load[n], n))
        if load[most] - load[least] <= 1:
            return
        movable = [s for s in shards if most in s.replicas and least not in s.replicas]
        shard = min(movable, key=lambda s: (s.replicas.index(most) == 0, s.key))
        shard.replicas.remove(most)
        shard.replicas.append(least)
        load[most] -= 1
        load[least] += 1
