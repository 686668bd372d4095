"""Planning, reading and aborting swaps against a real ZooKeeper: the refusals, each with its reason."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from epochstate.core import reasons
from epochstate.core.alignment.errors import InvalidOption, SubjectNotFound
from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.core.swap.coordinator import SwapCoordinator
from epochstate.core.swap.errors import (
    JobsNotAligned,
    NewTooFarBehind,
    SwapCommitted,
    SwapEpochPassed,
    SwapInFlight,
    SwapNotFound,
)
from epochstate.core.swap.participant import SwapParticipant
from epochstate.core.swap.registry import SwapRegistry
from tests.swap.jobs import IN, NEW, OLD, OUT, prepare_subjects


@pytest.fixture
def subjects(zk_client: KazooClient) -> SubjectRegistry:
    found = SubjectRegistry(zk_client)
    prepare_subjects(found, old_at=4, new_at=2)
    return found


@pytest.fixture
def coordinator(zk_client: KazooClient, subjects: SubjectRegistry) -> SwapCoordinator:
    return SwapCoordinator(subjects, SwapRegistry(zk_client))


def test_the_default_epoch_is_the_earliest_both_can_still_prepare_for(coordinator: SwapCoordinator) -> None:
    # The old job has read epoch 3 of the input: both prepare in 4 at the earliest, swap at 6.
    record = coordinator.plan(OUT, OLD, NEW)
    assert (record.id, record.input, record.epoch, record.prepare_epoch) == (1, IN, 6, 4)
    assert record.state == "planned"
    assert coordinator.status(OUT) == record
    with pytest.raises(SwapEpochPassed) as passed:
        coordinator.plan(OUT, OLD, NEW, 5)
    assert passed.value.reason == reasons.SWAP_EPOCH_PASSED
    assert passed.value.metadata == {"earliestEpoch": "6"}


def test_a_second_plan_is_refused_while_one_is_in_flight_and_a_committed_one_cannot_be_aborted(
    zk_client: KazooClient, subjects: SubjectRegistry, coordinator: SwapCoordinator
) -> None:
    first = coordinator.plan(OUT, OLD, NEW, 8)
    with pytest.raises(SwapInFlight) as refused:
        coordinator.plan(OUT, OLD, NEW, 9)
    assert refused.value.metadata == {"swapId": "1", "state": "planned"}
    aborted = coordinator.abort(OUT)
    assert aborted.aborted is not None and aborted.aborted.reason == "ABORTED_BY_REQUEST"
    assert coordinator.abort(OUT) == aborted  # twice: no error
    second = coordinator.plan(OUT, OLD, NEW, 8)
    assert second.id == 2 and [p.id for p in SwapRegistry(zk_client).past(OUT)] == [first.id]
    for job in (OLD, NEW):
        SwapParticipant(SwapRegistry(zk_client), subjects, OUT, job).step(6)
    committed = SwapParticipant(SwapRegistry(zk_client), subjects, OUT, NEW).step(7)
    assert committed is not None and committed.record.state == "committed"
    with pytest.raises(SwapCommitted):
        coordinator.abort(OUT)
    with pytest.raises(SwapInFlight):
        coordinator.plan(OUT, OLD, NEW, 10)
    assert coordinator.wait(OUT, 2, timeout=0) == committed.record


def test_jobs_that_do_not_read_one_subject_aligned_are_refused(
    subjects: SubjectRegistry, coordinator: SwapCoordinator
) -> None:
    with pytest.raises(JobsNotAligned, match="do not both read"):
        coordinator.plan(OUT, OLD, "stranger")
    subjects.register_source(IN, NEW, "unaligned")
    with pytest.raises(JobsNotAligned) as refused:
        coordinator.plan(OUT, OLD, NEW)
    assert refused.value.reason == reasons.JOBS_NOT_ALIGNED
    subjects.register_source(IN, NEW, "aligned")
    with pytest.raises(JobsNotAligned, match="does not write"):
        coordinator.plan(OUT, NEW, OLD)  # the new job is not the output's writer
    for job in (OLD, NEW):
        subjects.register_source("prices", job, "aligned")
    with pytest.raises(InvalidOption, match="name the input"):
        coordinator.plan(OUT, OLD, NEW)
    assert coordinator.plan(OUT, OLD, NEW, input=IN).input == IN


def test_unknown_subjects_and_swaps_are_not_found(coordinator: SwapCoordinator) -> None:
    with pytest.raises(SubjectNotFound):
        coordinator.status("nowhere")
    with pytest.raises(SwapNotFound) as missing:
        coordinator.status(OUT)
    assert missing.value.reason == reasons.SWAP_NOT_FOUND


def test_a_new_job_that_does_not_prepare_before_the_deadline_is_too_far_behind(
    coordinator: SwapCoordinator,
) -> None:
    record = coordinator.plan(OUT, OLD, NEW, deadline=0.2)
    with pytest.raises(NewTooFarBehind) as behind:
        coordinator.wait(OUT, record.id, timeout=10)
    assert behind.value.reason == reasons.NEW_TOO_FAR_BEHIND
    after = coordinator.status(OUT)
    assert after.aborted is not None and (after.aborted.reason, after.aborted.by) == (
        "NEW_TOO_FAR_BEHIND",
        "coordinator",
    )
