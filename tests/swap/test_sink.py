"""The aligned sink's commit in a hot-swap, in-process on a real ZooKeeper (no Spark, no broker).

The driver's commit is what decides what a batch registers; here it gets the
commit messages of tasks that wrote (made up offset ranges, as a task reports
them) and the job's mapping as the aligned source records it when it plans a batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest
from kazoo.client import KazooClient

from epochstate.core.alignment.ranges import OffsetRange
from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.core.swap import registry as registry_module
from epochstate.core.swap.coordinator import SwapCoordinator
from epochstate.core.swap.records import State, SwapRecord
from epochstate.core.swap.registry import SwapRegistry
from epochstate.spark_plugin.alignment.connections import close_shared_clients
from epochstate.spark_plugin.alignment.options import KafkaOptions, RegistryOptions, SinkOptions
from epochstate.spark_plugin.alignment.sink import (
    PartitionWritten,
    RowLayout,
    SubjectStreamWriter,
    shadow_skips,
)
from tests.swap.jobs import FIRST_BATCH, IN, NEW, OLD, OUT, THIRD, prepare_subjects


@pytest.fixture
def writers(zk_connect: str) -> Iterator[dict[str, SubjectStreamWriter]]:
    kafka = KafkaOptions(OUT, {"bootstrap.servers": "127.0.0.1:9"})  # the commit never calls Kafka
    layout = RowLayout(value=0, value_is_text=True)
    registry = RegistryOptions(zk_connect)
    options = {job: SinkOptions(kafka, registry, job, shadow=job == NEW) for job in (OLD, NEW)}
    yield {job: SubjectStreamWriter(found, layout) for job, found in options.items()}
    close_shared_clients()


def commit(subjects: SubjectRegistry, writer: SubjectStreamWriter, epoch: int, offset: int) -> None:
    """The job's batch for input ``epoch``: planned (its mapping), one task wrote 2 rows at ``offset``."""
    job = writer.options.job
    batch = FIRST_BATCH[job] + epoch
    subjects.record_mapping(IN, job, "aligned", [(batch, epoch)], keep=100)
    written = PartitionWritten(0, OffsetRange(OUT, 0, offset, offset + 2), 0, f"query-{job}")
    writer.commit([written], batch)


def test_a_shadow_registers_nothing_before_the_swap_epoch_and_continues_the_sequence_after_it(
    zk_client: KazooClient, writers: dict[str, SubjectStreamWriter]
) -> None:
    subjects = SubjectRegistry(zk_client)
    prepare_subjects(subjects, old_at=2, new_at=2)
    offset = 100
    for epoch in (2, 3):  # no swap yet: the shadow registers nothing
        for job in (OLD, NEW):
            commit(subjects, writers[job], epoch, offset)
            offset += 2
    assert [subjects.get_epoch(OUT, e).writer for e in subjects.epochs(OUT)] == [OLD] * 4  # type: ignore[union-attr]

    record = SwapCoordinator(subjects, SwapRegistry(zk_client)).plan(OUT, OLD, NEW)
    assert (record.epoch, record.prepare_epoch) == (6, 4)
    for epoch in range(4, 10):
        for job in (NEW, OLD) if epoch % 2 else (OLD, NEW):
            commit(subjects, writers[job], epoch, offset)
            offset += 2

    swap = SwapRegistry(zk_client).get(OUT)
    assert swap is not None and (swap.state, swap.handover) == ("done", 6)
    registered = [subjects.get_epoch(OUT, e) for e in subjects.epochs(OUT)]
    assert [e.epoch for e in registered if e] == list(range(10))  # one unbroken sequence
    assert [e.writer for e in registered if e] == [OLD] * 7 + [NEW] * 3
    # Each epoch holds its owner's rows, and the end positions run on across the handover.
    assert [e.end_position[0] for e in registered[5:] if e] == [e.ranges[0].end for e in registered[5:] if e]
    assert all(e.ranges[0].start >= 100 for e in registered[2:] if e)


def test_a_shadow_task_writes_no_rows_only_for_batches_sure_to_be_skipped(
    zk_client: KazooClient, writers: dict[str, SubjectStreamWriter]
) -> None:
    subjects = SubjectRegistry(zk_client)
    prepare_subjects(subjects, old_at=2, new_at=2)
    old, new = writers[OLD].options, writers[NEW].options
    batch = FIRST_BATCH[NEW] + 2
    subjects.record_mapping(IN, NEW, "aligned", [(batch, 2)], keep=100)
    assert shadow_skips(new, batch)  # no swap: the shadow registers nothing
    SwapCoordinator(subjects, SwapRegistry(zk_client)).plan(OUT, OLD, NEW)
    assert shadow_skips(new, batch)  # the swap epoch (5) comes after the batch's epoch (2)
    assert shadow_skips(new, batch + 4)  # a batch that read no epoch of the input: never registered
    subjects.record_mapping(IN, NEW, "aligned", [(batch + 4, 6)], keep=100)
    assert not shadow_skips(new, batch + 4)  # epoch 6, after the swap epoch: not decided yet
    for epoch in range(3, 7):
        commit(subjects, writers[OLD], epoch, 100 + 2 * epoch)
        commit(subjects, writers[NEW], epoch, 200 + 2 * epoch)
    assert not shadow_skips(new, FIRST_BATCH[NEW] + 6)  # after the swap epoch: the new job's
    assert not shadow_skips(old, 5)  # the old job writes what it owns


def test_a_chain_of_swaps_numbers_each_writer_after_the_last_and_a_replaced_writer_registers_nothing(
    zk_client: KazooClient, zk_connect: str, writers: dict[str, SubjectStreamWriter]
) -> None:
    subjects = SubjectRegistry(zk_client)
    prepare_subjects(subjects, old_at=2, new_at=2)
    third = SubjectStreamWriter(replace(writers[NEW].options, job=THIRD), writers[NEW].layout)
    subjects.register_source(IN, THIRD, "aligned")
    subjects.record_mapping(IN, THIRD, "aligned", [(FIRST_BATCH[THIRD] + e, e) for e in range(2)], keep=100)
    coordinator = SwapCoordinator(subjects, SwapRegistry(zk_client))
    chain = [writers[OLD], writers[NEW], third]
    offset = 100
    first = coordinator.plan(OUT, OLD, NEW)
    second: SwapRecord | None = None
    for epoch in range(2, 16):
        if epoch == first.epoch + 2:  # the first swap is done: the new job hands over next
            second = coordinator.plan(OUT, NEW, THIRD)
        for writer in chain:  # the old job goes on running after it handed over
            commit(subjects, writer, epoch, offset)
            offset += 2
    assert second is not None
    swaps = SwapRegistry(zk_client)
    assert [(r.id, r.state, r.handover) for r in [*swaps.past(OUT), swaps.get(OUT)] if r] == [
        (1, "done", first.epoch),
        (2, "done", second.epoch),
    ]
    registered = [subjects.get_epoch(OUT, e) for e in subjects.epochs(OUT)]
    assert [e.epoch for e in registered if e] == list(range(16))  # one unbroken sequence
    owners = [OLD if e <= first.epoch else NEW if e <= second.epoch else THIRD for e in range(16)]
    assert [e.writer for e in registered if e] == owners


def test_the_swap_history_keeps_the_newest_and_the_newest_done_swap(
    zk_client: KazooClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry_module, "SWAP_HISTORY", 3)
    swaps = SwapRegistry(zk_client)

    def swap(state: State) -> Callable[[SwapRecord | None], SwapRecord]:
        def plan(current: SwapRecord | None) -> SwapRecord:
            number = 1 if current is None else current.id + 1
            record = SwapRecord(number, OUT, IN, OLD, NEW, 5, "planned", 0, 1)
            if state == "done":
                return record.with_committed(NEW, 4, 1).with_done(5, 1)
            return record.with_aborted("ABORTED_BY_REQUEST", "test", "coordinator", 1)

        return plan

    for state in ["done", "done", *["aborted"] * 6]:
        swaps.create(OUT, swap(state))  # type: ignore[arg-type]
    assert [p.id for p in swaps.past(OUT)] == [2, 5, 6, 7]  # the newest three, and the newest done
    newest = swaps.newest_done(OUT)
    assert newest is not None and newest.id == 2
    swaps.create(OUT, swap("done"))
    swaps.create(OUT, swap("aborted"))
    assert [p.id for p in swaps.past(OUT)] == [7, 8, 9]
