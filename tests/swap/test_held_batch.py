"""The aligned sink's hold in a real Spark query: a batch the swap has not decided waits in the
driver's commit, proceeds once the swap is decided, and lets the query stop meanwhile.

The old job runs in the test's SparkSession; the new job is only its steps in
ZooKeeper (its mapping and :class:`SwapParticipant`), so that the test decides
the swap when it likes. The test itself writes the input subject's rows and
registers its epochs, as an upstream job's aligned sink does.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from epochstate.core.alignment.records import SubjectEpoch
from epochstate.core.alignment.subjects import SubjectRegistry, wall_clock_ms
from epochstate.core.swap.coordinator import SwapCoordinator
from epochstate.core.swap.participant import SwapParticipant
from epochstate.core.swap.registry import SwapRegistry
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.spark_plugin.alignment import register
from epochstate.spark_plugin.alignment.connections import close_shared_clients
from epochstate.spark_plugin.alignment.planned import PlannedOffsets
from epochstate.spark_plugin.kafka.producer import PartitionWriter
from tests.alignment.conftest import fresh_topic
from tests.alignment.jobs import Wiring, start_relay
from tests.alignment.test_exactly_once import reads_epoch, wait_until
from tests.fixtures.kafka import KafkaBroker

pytestmark = pytest.mark.spark

OLD, NEW = "held-v1", "held-v2"
TIMEOUT = 120.0
STOP_TIMEOUT = 30.0
SINK_COMMIT_WORKER = b"python_streaming_sink_runner"


def commit_workers() -> list[int]:
    """The Python workers this test's driver forked to run a stream writer's commit (not their daemon)."""
    parents: dict[int, int] = {}
    runners: set[int] = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid = int(stat.parent.name)
            parents[pid] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if SINK_COMMIT_WORKER in (stat.parent / "cmdline").read_bytes():
                runners.add(pid)
        except (OSError, ValueError, IndexError):  # the process ended meanwhile
            continue

    def ours(pid: int) -> bool:
        while pid > 1:
            if pid == os.getpid():
                return True
            pid = parents.get(pid, 0)
        return False

    return [pid for pid in runners if parents.get(pid) in runners and ours(pid)]


def held_in(checkpoint: Path, topic: str, epoch: int) -> int | None:
    """The batch of the job under ``checkpoint`` that reads ``epoch`` of ``topic`` and has not committed."""
    newest = PlannedOffsets(str(checkpoint), topic).newest()
    if newest is None or newest[1].epoch != epoch or Checkpoint(checkpoint).is_committed(newest[0]):
        return None
    return newest[0]


@pytest.mark.timeout(300)
def test_a_held_batch_waits_in_the_commit_until_decided_and_the_query_stops_meanwhile(
    spark: Any, kafka_broker: KafkaBroker, zk_connect: str, zk_client: KazooClient, tmp_path: Path
) -> None:
    register(spark)
    source, output = fresh_topic(kafka_broker, 2), fresh_topic(kafka_broker, 2)
    wiring = Wiring(tmp_path / "old", source, kafka_broker.bootstrap, zk_connect)
    subjects = SubjectRegistry(zk_client)
    coordinator = SwapCoordinator(subjects, SwapRegistry(zk_client))
    new = SwapParticipant(SwapRegistry(zk_client), subjects, output, NEW)
    subjects.register_source(source, NEW, "aligned")
    query: Any = None

    def feed_until(epoch: int) -> None:
        """Publish the input's epochs up to ``epoch`` as an upstream sink would: rows, then the epoch."""
        while (newest := len(subjects.epochs(source))) <= epoch:
            with PartitionWriter(kafka_broker.config(), source, 0) as writer:
                for i in range(3):
                    writer.write(None, f"id-{newest}-{i}".encode())
                written = writer.finish()
            previous = subjects.get_epoch(source, newest - 1) if newest else None
            ranges = () if written is None else (written,)
            end = {} if previous is None else previous.end_position
            subjects.register_epoch(
                SubjectEpoch(source, newest, ranges, "upstream", None, wall_clock_ms(), end)
            )

    def new_reads(epoch: int) -> None:
        subjects.record_mapping(source, NEW, "aligned", [(100 + epoch, epoch)], keep=100)

    def old_read(epoch: int) -> None:
        wait_until(
            lambda: reads_epoch(wiring.checkpoint, source, epoch), f"{OLD} reads epoch {epoch}", TIMEOUT, feed
        )

    def feed() -> None:
        pass

    try:
        feed_until(0)
        query = start_relay(spark, wiring, OLD, output, "v1", shadow=False)
        new_reads(0)
        old_read(0)
        first = coordinator.plan(output, OLD, NEW, deadline=600)
        assert first.epoch == 3
        feed_until(first.epoch + 1)
        # The old job prepares in 1, writes 2 and 3, and holds 4: the new job has not prepared.
        wait_until(
            lambda: held_in(wiring.checkpoint, source, 4) is not None, "the batch of 4 holds", TIMEOUT, feed
        )
        held = held_in(wiring.checkpoint, source, 4)
        assert held is not None
        assert commit_workers(), "the held batch waits in a Python commit worker of the driver"
        stopping = threading.Thread(target=query.stop, daemon=True)
        began = time.monotonic()
        stopping.start()
        stopping.join(STOP_TIMEOUT)
        assert not stopping.is_alive(), (
            f"query.stop() still waits on the held batch after {STOP_TIMEOUT:.0f} s"
        )
        print(f"query.stop() on a held batch took {time.monotonic() - began:.1f} s")
        assert not Checkpoint(wiring.checkpoint).is_committed(held)
        # Its hold ended with it: the worker is gone, so it cannot register the epoch once decided.
        wait_until(lambda: not commit_workers(), "the commit worker ends", TIMEOUT, feed)
        assert subjects.epochs(output)[-1] == held - 1  # the old job's epoch 5 is its newest
        record = coordinator.abort(output)
        assert record.state == "aborted"

        # Aborted: the batch runs again and the old job owns epoch 4.
        query = start_relay(spark, wiring, OLD, output, "v1", shadow=False)
        old_read(4)
        assert subjects.epochs(output)[-1] == held
        assert subjects.get_epoch(output, held).writer == OLD  # type: ignore[union-attr]

        # A second swap: the old job holds 8 until the new one prepares (5) and commits (6).
        for epoch in range(1, 5):
            new_reads(epoch)
        second = coordinator.plan(output, OLD, NEW, deadline=600)
        assert second.epoch == 7
        feed_until(second.epoch + 1)
        wait_until(
            lambda: held_in(wiring.checkpoint, source, 8) is not None, "the batch of 8 holds", TIMEOUT, feed
        )
        batch = held_in(wiring.checkpoint, source, 8)
        assert batch is not None
        decided_at = time.time()
        for epoch in (5, 6):
            new_reads(epoch)
            step = new.step(epoch)
            assert step is not None and step.turn == "skip"
        swap = SwapRegistry(zk_client).get(output)
        assert swap is not None and (swap.state, swap.handover) == ("done", batch - 1)
        old_read(8)
        committed = (wiring.checkpoint / "commits" / str(batch)).stat().st_mtime
        assert committed >= decided_at, "the held batch committed only once the swap was decided"
        assert subjects.epochs(output)[-1] == batch - 1, "the old job's batch of epoch 8 registered nothing"
    finally:
        if query is not None:
            query.stop()
        close_shared_clients()
