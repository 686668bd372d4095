"""The two-step commit through a real ZooKeeper, with either job (or the planner) dying at every step.

Each job has its own session; a death closes it or has the server expire it, and
the job comes back a few turns later with a new session and runs the epoch it
died in again. Whatever the death, the swap ends done or aborted, every input
epoch's output is registered by exactly one job, and the output's epochs are one
unbroken sequence.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.core.swap.coordinator import SwapCoordinator
from epochstate.core.swap.participant import Step
from epochstate.core.swap.records import SwapRecord
from epochstate.core.swap.registry import SwapRegistry
from epochstate.devtools.zookeeper import EmbeddedZooKeeper
from tests.fixtures.zookeeper import expire_session
from tests.swap.jobs import IN, NEW, OLD, OUT, Job, Point, prepare_subjects

LAST = 9  # input epochs 0..9; jobs at 2 when the swap is planned: prepare at 3, swap at 5
DOWN_TURNS = 3


def plan(client: KazooClient, deadline: float = 30.0) -> SwapRecord:
    subjects = SubjectRegistry(client)
    prepare_subjects(subjects, old_at=2, new_at=2)
    coordinator = SwapCoordinator(subjects, SwapRegistry(client))
    assert coordinator.shared_input(OLD, NEW) == (IN, 1)  # the earliest swap epoch: 4, prepared in 2
    record = coordinator.plan(OUT, OLD, NEW, 5, deadline=deadline)
    assert (record.input, record.epoch, record.prepare_epoch, record.state) == (IN, 5, 3, "planned")
    return record


def drive(
    jobs: list[Job],
    die: Callable[[Job, Point, Step], bool],
    kill: Callable[[Job], None],
    gone: frozenset[str] = frozenset(),
    timeout: float = 20.0,
) -> dict[int, set[str]]:
    """Run the jobs in turns until each is past the last epoch (or gone for good); who wrote each epoch."""
    wrote: dict[int, set[str]] = {}
    down: dict[str, int] = {}
    ends = time.monotonic() + timeout
    pause = threading.Event()
    while any(job.epoch <= LAST and job.name not in gone for job in jobs):
        assert time.monotonic() < ends, [(job.name, job.epoch, job.steps[-1:]) for job in jobs]
        moved = False
        for job in jobs:
            if job.epoch > LAST:
                continue
            if job.client is None:
                down[job.name] = down.get(job.name, 0) - 1
                if down[job.name] <= 0 and job.name not in gone:
                    job.start()
                continue
            outcome = job.run(die, wrote)
            if outcome == "died":
                kill(job)
                down[job.name] = DOWN_TURNS
            moved = moved or outcome == "done"
        if not moved:
            pause.wait(0.02)  # both hold: the swap waits for a job or for its deadline
    return wrote


class Once:
    """Kill ``victim`` the first time ``when`` holds; ``fired`` says whether it did."""

    def __init__(self, victim: str, when: Callable[[Job, Point, Step], bool]) -> None:
        self.victim, self.when, self.fired = victim, when, False

    def __call__(self, job: Job, point: Point, step: Step) -> bool:
        if job.name != self.victim or self.fired or not self.when(job, point, step):
            return False
        self.fired = True
        return True


EVENTS: dict[str, Callable[[Job, Point, Step], bool]] = {
    "planned": lambda job, point, step: step.record.state == "planned",
    "prepared": lambda job, point, step: step.record.state == "prepared",
    "committed": lambda job, point, step: step.record.state == "committed",
    # The old job dies once its output of the swap epoch is registered, before it says so.
    "swap-epoch": lambda job, point, step: (
        job.epoch == step.record.epoch and point == ("registered" if job.name == OLD else "step")
    ),
}


def killer(how: str, server: EmbeddedZooKeeper) -> Callable[[Job], None]:
    def kill(job: Job) -> None:
        if how == "expire" and job.client is not None:
            expire_session(server, job.client)
        job.stop()

    return kill


def check_handed_over(wrote: dict[int, set[str]], subjects: SubjectRegistry, record: SwapRecord) -> None:
    owners = [(OLD if e <= record.epoch else NEW) for e in range(LAST + 1)]
    assert [wrote.get(e, set()) for e in range(2, LAST + 1)] == [{o} for o in owners[2:]]
    assert subjects.epochs(OUT) == list(range(LAST + 1))  # one unbroken sequence
    assert [subjects.get_epoch(OUT, e).writer for e in range(LAST + 1)] == owners  # type: ignore[union-attr]


@pytest.mark.parametrize("how", ["close", "expire"])
@pytest.mark.parametrize("victim", [OLD, NEW])
@pytest.mark.parametrize("event", list(EVENTS))
def test_a_job_dying_at_any_step_and_coming_back_ends_the_swap_done(
    make_zk_client: Callable[..., KazooClient],
    zookeeper_server: EmbeddedZooKeeper,
    event: str,
    victim: str,
    how: str,
) -> None:
    client = make_zk_client()
    record = plan(client)
    # The victim takes its turn second, so that it is the one to see the step's state first.
    jobs = sorted([Job(OLD, make_zk_client, 2), Job(NEW, make_zk_client, 2)], key=lambda j: j.name == victim)
    for job in jobs:
        job.start()
    died = Once(victim, EVENTS[event])
    wrote = drive(jobs, died, killer(how, zookeeper_server))
    for job in jobs:
        job.stop()
    assert died.fired
    final = SwapRegistry(client).get(OUT)
    assert final is not None and final.state == "done" and final.handover == record.epoch
    check_handed_over(wrote, SubjectRegistry(client), record)
    assert wrong_answers(jobs) == 0


def wrong_answers(jobs: list[Job]) -> int:
    """Definite answers that contradict another answer for the same epoch (to the job or the other)."""
    definite: dict[int, set[tuple[str, str]]] = {}
    for job in jobs:
        for epoch, step in job.steps:
            if step.turn != "hold":
                definite.setdefault(epoch, set()).add((job.name, step.turn))
    wrong = 0
    for answers in definite.values():
        writers = {name for name, turn in answers if turn == "write"}
        wrong += sum(len({t for n, t in answers if n == name}) - 1 for name in {n for n, _ in answers})
        wrong += max(0, len(writers) - 1)
    return wrong


def test_the_new_job_gone_before_it_prepares_aborts_at_the_deadline_and_the_old_keeps_writing(
    make_zk_client: Callable[..., KazooClient], zookeeper_server: EmbeddedZooKeeper
) -> None:
    client = make_zk_client()
    plan(client, deadline=1.0)
    jobs = [Job(OLD, make_zk_client, 2), Job(NEW, make_zk_client, 2)]
    for job in jobs:
        job.start()
    died = Once(NEW, EVENTS["planned"])
    wrote = drive(jobs, died, killer("expire", zookeeper_server), gone=frozenset({NEW}))
    jobs[0].stop()
    final = SwapRegistry(client).get(OUT)
    assert final is not None and final.aborted is not None
    assert (final.state, final.aborted.reason) == ("aborted", "NEW_TOO_FAR_BEHIND")
    assert [wrote.get(e) for e in range(2, LAST + 1)] == [{OLD}] * (LAST - 1)
    assert SubjectRegistry(client).epochs(OUT) == list(range(LAST + 1))


def test_the_old_job_gone_after_its_last_epoch_is_finished_by_the_new_one(
    make_zk_client: Callable[..., KazooClient], zookeeper_server: EmbeddedZooKeeper
) -> None:
    client = make_zk_client()
    record = plan(client)
    jobs = [Job(OLD, make_zk_client, 2), Job(NEW, make_zk_client, 2)]
    for job in jobs:
        job.start()
    died = Once(OLD, EVENTS["swap-epoch"])
    wrote = drive(jobs, died, killer("close", zookeeper_server), gone=frozenset({OLD}))
    jobs[1].stop()
    final = SwapRegistry(client).get(OUT)
    assert final is not None and (final.state, final.handover) == ("done", record.epoch)
    check_handed_over(wrote, SubjectRegistry(client), record)
    assert wrong_answers(jobs) == 0


def test_the_old_job_gone_before_it_prepares_aborts_and_the_new_one_writes_nothing(
    make_zk_client: Callable[..., KazooClient], zookeeper_server: EmbeddedZooKeeper
) -> None:
    client = make_zk_client()
    plan(client, deadline=1.0)
    jobs = [Job(OLD, make_zk_client, 2), Job(NEW, make_zk_client, 2)]
    for job in jobs:
        job.start()
    died = Once(OLD, EVENTS["planned"])
    wrote = drive(jobs, died, killer("expire", zookeeper_server), gone=frozenset({OLD}))
    jobs[1].stop()
    final = SwapRegistry(client).get(OUT)
    assert final is not None and final.aborted is not None
    assert (final.state, final.aborted.reason) == ("aborted", "OLD_TOO_FAR_BEHIND")
    assert wrote == {}  # the output waits for the old job: nothing lost, nothing doubled
    assert wrong_answers(jobs) == 0


def test_the_planner_dying_after_its_plan_leaves_the_plan_to_the_jobs(
    make_zk_client: Callable[..., KazooClient], zookeeper_server: EmbeddedZooKeeper
) -> None:
    planner = make_zk_client()
    record = plan(planner)
    expire_session(zookeeper_server, planner)
    jobs = [Job(OLD, make_zk_client, 2), Job(NEW, make_zk_client, 2)]
    for job in jobs:
        job.start()
    wrote = drive(jobs, lambda job, point, step: False, killer("close", zookeeper_server))
    for job in jobs:
        job.stop()
    client = make_zk_client()
    final = SwapRegistry(client).get(OUT)
    assert final is not None and final.state == "done"
    check_handed_over(wrote, SubjectRegistry(client), record)
