"""A reading job whose checkpoint is deleted and recreated: real Spark, Kafka, ZooKeeper.

The old query read subject epochs 0..3 as its batches 0..3. The recreated query
(a new query id, batch ids from 0 again) starts at subject epoch 3, so its batch
0 reads epoch 3 and its batch 1 epoch 4. Before the source record carried the
query id, the new entry was merged into the old mapping ({0: 3, 1: 1, 2: 2, 3: 3}),
and the daemon aligned the new query's epoch 1 with subject epoch 1: a wrong answer.
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from kazoo.client import KazooClient

from epochstate.core.alignment.coordinator import AlignmentCoordinator
from epochstate.core.alignment.errors import InvalidTransition
from epochstate.core.checkpoint.log import QueryLog
from epochstate.daemon.registry.subject_view import SubjectView
from epochstate.daemon.server.aligned import SubjectAlignment
from epochstate.daemon.server.epochs import EpochWaitTimedOut, IncarnationChanged
from epochstate.daemon.store.catalog import Catalog, JobEntry
from epochstate.daemon.store.descriptors import JobDescriptor
from epochstate.spark_plugin.alignment import SubjectRegistry, register
from epochstate.v1 import epochstate_pb2 as pb
from tests.alignment.conftest import DownstreamJob, UpstreamJob, fresh_topic
from tests.fixtures.kafka import KafkaBroker

pytestmark = pytest.mark.spark


def entry(name: str, checkpoint: Any) -> JobEntry:
    return JobEntry(JobDescriptor(name, 1, str(checkpoint), QueryLog(str(checkpoint)).query_id()))


def truth(job: DownstreamJob) -> dict[int, int]:
    """Batch -> the one subject epoch its rows came from, as the query itself read them."""
    found = {}
    for batch, rows in job.rows().items():
        epochs = {row[3] for row in rows}
        assert len(epochs) == 1, f"batch {batch} read subject epochs {epochs}"
        epoch = epochs.pop()
        assert epoch is not None, f"batch {batch} did not read aligned"
        found[batch] = epoch
    return found


def wrong_answers(alignment: SubjectAlignment, upstream: JobEntry, reader: str, read: dict[int, int]) -> int:
    """How many of the reader's epochs resolve to another upstream epoch than the one they read.

    An epoch the registry cannot align (yet) is no answer, and not a wrong one.
    """
    wrong = 0
    for batch, subject_epoch in read.items():
        try:
            answer = alignment.epoch_of(upstream, pb.AlignedWith(job=reader, epoch=batch), 0.5)
        except EpochWaitTimedOut:
            continue
        wrong += answer != subject_epoch
    return wrong


def test_a_recreated_reader_starts_a_fresh_mapping_and_takes_no_old_command(
    spark: Any,
    kafka_broker: KafkaBroker,
    subjects_zookeeper: tuple[str, KazooClient],
    tmp_path: Any,
) -> None:
    register(spark)
    connect, client = subjects_zookeeper
    topic = fresh_topic(kafka_broker, 2)
    upstream = UpstreamJob(spark, tmp_path / "upstream", topic, kafka_broker, connect, job="writer")
    old = DownstreamJob(spark, tmp_path / "reader", topic, kafka_broker, connect, "reader")
    new = DownstreamJob(
        spark, tmp_path / "reader", topic, kafka_broker, connect, "reader", {"startingEpoch": "3"}
    )
    registry = SubjectRegistry(client)
    coordinator = AlignmentCoordinator(registry)
    view = SubjectView(client)
    try:
        upstream.start()
        for batch in range(4):
            upstream.feed([f"b{batch}-{i}" for i in range(3)])
        old.start()
        old.wait_for_batch(3)
        old_entry = entry("reader", old.checkpoint)
        old.stop()
        old_read = truth(old)
        assert old_read == {0: 0, 1: 1, 2: 2, 3: 3}
        record = registry.get_source(topic, "reader")
        assert record is not None and record.query_id == old_entry.descriptor.query_id
        # An abort the old query never saw: the new query must not carry it out.
        abort = coordinator.abort(topic, "reader")
        assert abort.query_id == old_entry.descriptor.query_id

        shutil.rmtree(old.checkpoint)
        new.start()
        new.wait_for_batch(0)
        new_entry = entry("reader", new.checkpoint)
        assert new_entry.descriptor.query_id != old_entry.descriptor.query_id

        record = registry.get_source(topic, "reader")
        assert record is not None
        assert record.query_id == new_entry.descriptor.query_id
        assert dict(record.mapping) == {0: 3}, "the old query's entries are gone, none merged"
        assert record.mode == "aligned", "the old query's abort was not carried out"
        assert record.live_command is None and record.command == abort
        assert coordinator.source(topic, "reader").answered, "the old command is void"
        with pytest.raises(InvalidTransition, match="recreated"):
            coordinator.wait(topic, "reader", abort, 5.0)

        writer = entry("writer", upstream.checkpoint)
        catalog = Catalog()
        catalog.put(writer)
        catalog.put(new_entry)  # the daemon follows the new query
        alignment = SubjectAlignment(view, catalog)
        assert alignment.epoch_of(writer, pb.AlignedWith(job="reader", epoch=0), 10.0) == 3
        with pytest.raises(EpochWaitTimedOut, match="did not read its epoch 1"):
            alignment.epoch_of(writer, pb.AlignedWith(job="reader", epoch=1), 0.5)
        # A read pinned to the old query, aligning the reader with the writer: refused by name.
        with pytest.raises(IncarnationChanged) as refused:
            alignment.epoch_of(old_entry, pb.AlignedWith(job="writer", epoch=3), 10.0)
        assert refused.value.metadata == {
            "job": "reader",
            "requestedQueryId": old_entry.descriptor.query_id,
            "currentQueryId": new_entry.descriptor.query_id,
        }

        upstream.feed([f"b4-{i}" for i in range(3)])
        new.wait_for_batch(1)
        new_read = truth(new)
        assert new_read == {0: 3, 1: 4}
        assert alignment.epoch_of(new_entry, pb.AlignedWith(job="writer", epoch=4), 10.0) == 1
        wrong = wrong_answers(alignment, writer, "reader", new_read)
        print(f"wrong aligned answers for the recreated query: {wrong} of {len(new_read)}")
        assert wrong == 0
    finally:
        view.close()
        for job in (new, old, upstream):
            job.stop()
