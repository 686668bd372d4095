"""The source: aligned, one batch per subject epoch across restarts and jobs; unaligned, all rows once."""

from __future__ import annotations

import pytest

from tests.alignment.conftest import IDLE, ReadRow, SubjectRun, read_epoch
from tests.fixtures.kafka import KafkaBroker

pytestmark = pytest.mark.spark


def expected_batches(run: SubjectRun, broker: KafkaBroker) -> dict[int, list[ReadRow]]:
    return {k: read_epoch(broker, epoch) for k, epoch in sorted(run.epochs.items())}


def test_each_batch_reads_exactly_one_subject_epoch(
    subject_run: SubjectRun, kafka_broker: KafkaBroker
) -> None:
    expected = expected_batches(subject_run, kafka_broker)
    assert sorted(expected) == [0, 1, 2, 3, 4]
    assert subject_run.first.rows() == expected
    for k, rows in expected.items():
        assert sorted(row[0] for row in rows) == sorted(subject_run.upstream.fed[k])


def test_the_mapping_records_batch_to_subject_epoch(subject_run: SubjectRun) -> None:
    record = subject_run.sources["reader-a"]
    assert record is not None
    assert record.mode == "aligned"
    assert dict(record.mapping) == {b: b for b in range(5)}


def test_restart_continues_one_to_one(subject_run: SubjectRun) -> None:
    runs = subject_run.first.runs
    assert sorted(runs) == [0, 1, 2, 3, 4]
    assert len(runs[1]) == 2, "batch 1 lost its commit and ran again"
    assert runs[1][0].rows == runs[1][1].rows, "the re-run read exactly the same rows"
    assert all(len(runs[b]) == 1 for b in (0, 2, 3, 4))
    everything = [row[0] for rows in subject_run.first.rows().values() for row in rows]
    assert sorted(everything) == sorted(v for batch in subject_run.upstream.fed for v in batch)


def test_two_jobs_read_the_same_batches(subject_run: SubjectRun) -> None:
    first, second = subject_run.sources["reader-a"], subject_run.sources["reader-b"]
    assert first is not None and second is not None
    assert second.mapping == first.mapping
    assert subject_run.second.rows() == subject_run.first.rows()


def test_a_waiting_reader_starts_the_batch_once_the_epoch_commits(subject_run: SubjectRun) -> None:
    committed = subject_run.epochs[IDLE].committed_at_ms
    for job in (subject_run.first, subject_run.second):
        trigger = subject_run.triggers[job.job][IDLE]
        started = job.runs[IDLE][0].started_ms
        print(
            f"{job.job}: trigger {trigger - committed} ms, foreachBatch {started - committed} ms after commit"
        )
        assert started >= committed


def test_unaligned_reads_everything_once(subject_run: SubjectRun) -> None:
    runs = subject_run.unaligned.runs
    rows = [row for batch in sorted(runs) for row in runs[batch][-1].rows]
    assert sorted((partition, offset) for _, partition, offset, _ in rows) == [
        (p, offset) for p, end in sorted(subject_run.watermarks.items()) for offset in range(end)
    ]
    assert {epoch for *_, epoch in rows} == {None}
    assert all(len(runs[batch][-1].rows) <= 10 for batch in runs)
    assert len(runs) >= 3, "maxOffsetsPerTrigger=10 splits the topic's 28 records into three batches"
    record = subject_run.sources["reader-c"]
    assert record is not None and record.mode == "unaligned" and not record.mapping
