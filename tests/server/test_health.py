"""What counts as stuck ingest, on the daemon's own catalog with a clock the test moves.

The real daemon going NOT_SERVING and back (ZooKeeper stopped, a state file that does
not come) is ``tests/e2e/test_health.py``; here the rules: how long, what resets the
count, and that an epoch recorded as damaged does not count.
"""

from __future__ import annotations

from epochstate.daemon.server.health import IngestWatch
from epochstate.daemon.store.catalog import Catalog, JobEntry
from epochstate.daemon.store.descriptors import JobDescriptor, JobProgress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Loop:
    """The ingest loop as health sees it: when it last came round."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.passed_at = clock.now

    def came_round(self) -> None:
        self.passed_at = self.clock.now


def _job(catalog: Catalog, name: str, newest: int, committed: int) -> JobEntry:
    entry = JobEntry(JobDescriptor(name, 1, f"/cp/{name}", f"q-{name}"))
    entry.progress = JobProgress(newest, 0)
    entry.committed = committed
    catalog.put(entry)
    return entry


def test_a_job_behind_without_progress_for_the_threshold_is_stuck() -> None:
    clock, catalog = Clock(), Catalog()
    loop = Loop(clock)
    watch = IngestWatch(catalog, loop, stuck_after=10, loop_slack=5, clock=clock)
    entry = _job(catalog, "a", newest=3, committed=3)
    assert watch.stuck() == []
    entry.committed = 4  # a commit seen: the count starts
    assert watch.stuck() == []
    clock.now += 9
    loop.came_round()
    assert watch.stuck() == []
    clock.now += 2
    loop.came_round()
    (why,) = watch.stuck()
    assert "job 'a': epoch 4 is committed" in why and "after 3" in why

    entry.progress = JobProgress(4, 0)  # progress, but behind again: the count starts over
    entry.committed = 6
    assert watch.stuck() == []
    clock.now += 9
    loop.came_round()
    assert watch.stuck() == []
    entry.progress = JobProgress(6, 0)  # caught up
    clock.now += 60
    loop.came_round()
    assert watch.stuck() == []


def test_an_epoch_recorded_as_damaged_does_not_count_but_a_hung_loop_does() -> None:
    clock, catalog = Clock(), Catalog()
    loop = Loop(clock)
    watch = IngestWatch(catalog, loop, stuck_after=10, loop_slack=5, clock=clock)
    entry = _job(catalog, "a", newest=3, committed=5)
    entry.set_problem(4, "MissingStateFile: 5.delta does not exist")
    entry.set_problem(1, "skipped for good")
    entry.unavailable = {1: "skipped for good"}
    assert watch.stuck() == []
    clock.now += 60
    loop.came_round()
    assert watch.stuck() == []  # every replica has the same problem: not this pod's

    entry.clear_problems([4])  # repaired, but nothing moves: now it is stuck
    assert watch.stuck() == []
    clock.now += 11
    loop.came_round()
    assert len(watch.stuck()) == 1

    entry.progress = JobProgress(5, 0)
    assert watch.stuck() == []
    clock.now += 14  # within stuck_after + loop_slack since the loop last came round
    assert watch.stuck() == []
    clock.now += 2
    assert watch.stuck() == ["the ingest loop has not come round for 16 s"]
