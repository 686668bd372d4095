"""The swap record and its state machine in memory: ownership, transitions, and every interleaving.

The model check runs the two jobs' steps (``advance`` and ``turn``, the functions
the participant writes through ZooKeeper) in every order, with either job dying
before or after it registers an epoch's output and running that epoch again,
with an abort, the deadline, or the new job gone for good before it prepares at
any point, and counts the epochs written by two jobs or by none. ZooKeeper
itself, with real sessions killed, is in test_protocol.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pytest

from epochstate.core.alignment.errors import CorruptSubjectRecord
from epochstate.core.swap.participant import advance, expire
from epochstate.core.swap.records import (
    BY_REQUEST,
    NEW_BEHIND,
    PREPARE_MISSED,
    SwapRecord,
    owner,
    turn,
)

OLD, NEW = "v1", "v2"


def planned(epoch: int = 4, deadline_ms: int = 1_000) -> SwapRecord:
    return SwapRecord(1, "out", "in", OLD, NEW, epoch, "planned", 0, deadline_ms)


def test_the_record_round_trips_and_refuses_what_it_cannot_be() -> None:
    record = advance(advance(planned(), OLD, 2, 5), NEW, 2, 6)
    record = advance(record, NEW, 3, 7).with_done(9, 8)
    assert SwapRecord.decode("out", record.encode()) == record
    assert (record.state, dict(record.prepared), record.committed_by, record.committed_epoch) == (
        "done",
        {OLD: 2, NEW: 2},
        NEW,
        3,
    )
    assert [record.output_epoch(e) for e in (4, 5, 7)] == [None, 10, 12]
    with pytest.raises(CorruptSubjectRecord):
        SwapRecord.decode("out", b'{"id": 1}')
    with pytest.raises(ValueError, match="two jobs"):
        replace(planned(), new=OLD)
    with pytest.raises(ValueError, match="says why"):
        replace(planned(), state="aborted")


def test_the_old_job_owns_up_to_the_swap_epoch_and_the_new_one_after_it_once_committed() -> None:
    undecided, committed = planned(), advance(advance(advance(planned(), OLD, 2, 1), NEW, 2, 1), OLD, 3, 1)
    done, aborted = committed.with_done(4, 2), undecided.with_aborted(BY_REQUEST, "", "cli", 1)
    records = {"planned": undecided, "committed": committed, "done": done, "aborted": aborted}
    table = {
        name: [(owner(r, e), turn(r, OLD, e), turn(r, NEW, e), turn(r, "other", e)) for e in (4, 5)]
        for name, r in records.items()
    }
    assert table == {
        "planned": [(OLD, "write", "skip", "skip"), (None, "hold", "hold", "skip")],
        "committed": [(OLD, "write", "skip", "skip"), (NEW, "skip", "hold", "skip")],
        "done": [(OLD, "write", "skip", "skip"), (NEW, "skip", "write", "skip")],
        "aborted": [(OLD, "write", "skip", "skip"), (OLD, "write", "skip", "skip")],
    }


def test_prepare_is_in_one_epoch_of_both_and_commit_in_a_later_one() -> None:
    record = advance(planned(), OLD, 1, 1)
    assert record.state == "planned" and not record.prepared
    record = advance(advance(record, OLD, 2, 1), NEW, 2, 1)
    assert record.state == "prepared"
    assert advance(record, NEW, 2, 1) == record  # the same epoch again: no commit
    assert advance(record, OLD, 3, 1).state == "committed"


def test_a_job_past_the_prepare_epoch_unprepared_aborts_and_so_does_the_deadline() -> None:
    missed = advance(advance(planned(), OLD, 2, 1), NEW, 3, 1)
    assert missed.aborted is not None and (missed.aborted.reason, missed.aborted.by) == (PREPARE_MISSED, NEW)
    late = expire(advance(planned(), OLD, 2, 1), 1_001, "cli")
    assert late.aborted is not None and late.aborted.reason == NEW_BEHIND
    assert expire(planned(), 999, "cli") == planned()


@dataclass(frozen=True, eq=False)
class World:
    """The swap record, where each job stands (its next input epoch), who registered each epoch."""

    record: SwapRecord
    position: tuple[int, int]
    written: frozenset[tuple[int, str]]
    late: bool = False  # the deadline has passed
    gone: bool = False  # the new job died for good before it prepared
    key: tuple[bytes, tuple[int, int], frozenset[tuple[int, str]], bool, bool] = field(init=False, repr=False)
    hashed: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        record = replace(self.record, updated_at_ms=0).encode()
        key = (record, self.position, self.written, self.late, self.gone)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "hashed", hash(key))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, World) and self.hashed == other.hashed and self.key == other.key

    def __hash__(self) -> int:
        return self.hashed

    @property
    def passed(self) -> int:
        """Every input epoch below this one was run by each job still there."""
        return self.position[0] if self.gone else min(self.position)

    @property
    def finished(self) -> bool:
        return self.position[0] > LAST and (self.gone or self.position[1] > LAST)

    def registered(self, epoch: int) -> set[str]:
        return {job for e, job in self.written if e == epoch}


JOBS = (OLD, NEW)
LAST = 6  # input epochs 0..LAST; swap epoch 4, prepare epoch 2


def _done_if_handed_over(record: SwapRecord, written: frozenset[tuple[int, str]], now: int) -> SwapRecord:
    # The participant's rule: committed and the old job's output of the swap epoch registered.
    if record.state == "committed" and (record.epoch, OLD) in written:
        return record.with_done(record.epoch, now)
    return record


def _moves(world: World) -> Iterator[World]:
    now = 2_000 if world.late else 10
    for index, job in enumerate(JOBS):
        epoch = world.position[index]
        if epoch > LAST or (job == NEW and world.gone):
            continue
        record = _done_if_handed_over(advance(world.record, job, epoch, now), world.written, now)
        answer = turn(record, job, epoch)
        yield replace(world, record=record)  # died after its step, before registering
        if answer == "hold":
            continue
        written = world.written | ({(epoch, job)} if answer == "write" else set())
        after = _done_if_handed_over(record, written, now)
        yield replace(world, record=after, written=written)  # died after registering
        moved = list(world.position)
        moved[index] += 1
        yield replace(world, record=after, written=written, position=(moved[0], moved[1]))
    if world.record.undecided:
        yield replace(world, record=world.record.with_aborted(BY_REQUEST, "", "cli", now))
    if not world.gone and NEW not in world.record.prepared and world.record.state != "done":
        yield replace(world, gone=True)
    if not world.late:
        yield replace(world, record=expire(world.record, 2_000, "cli"), late=True)


@pytest.mark.parametrize("start", [(0, 0), (2, 0), (0, 2), (0, 3), (3, 1), (4, 4)])
def test_every_interleaving_with_deaths_aborts_and_deadlines_writes_each_epoch_exactly_once(
    start: tuple[int, int],
) -> None:
    before = frozenset((e, OLD) for e in range(start[0]))  # the old job wrote these before the plan
    first = World(planned(epoch=4, deadline_ms=1_000), start, before)
    edges: dict[World, set[World]] = {}
    todo, wrong = [first], 0
    while todo:
        world = todo.pop()
        if world in edges:
            continue
        # No epoch is registered by two jobs; every epoch both passed is registered once.
        wrong += sum(len(world.registered(e)) > 1 for e in range(LAST + 1))
        wrong += sum(len(world.registered(e)) != 1 for e in range(world.passed))
        if world.passed > world.record.epoch + 1:
            assert world.record.state in ("done", "aborted"), world
        edges[world] = set(_moves(world)) - {world}
        todo.extend(edges[world])
    assert wrong == 0
    finals = {w for w in edges if w.finished}
    assert finals and {w.record.state for w in finals} <= {"done", "aborted"}
    # From every state both jobs can still get to the end: nobody holds forever.
    reaches, grew = set(finals), True
    while grew:
        grew = False
        for world, after in edges.items():
            if world not in reaches and after & reaches:
                reaches.add(world)
                grew = True
    assert reaches == set(edges) and len(edges) > 100
