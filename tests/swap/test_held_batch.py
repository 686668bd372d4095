"""The aligned sink's hold in a real Spark query: a batch the swap has not decided waits in the
driver's commit, proceeds once the swap is decided, and lets the query stop meanwhile.

The new job (a shadow sink) runs in the test's SparkSession; the old job is
only what its sink does in ZooKeeper (its mapping, :class:`SwapParticipant`,
its output epochs), so that the test decides the swap when it likes. The test
itself writes the input subject's rows and registers its epochs, as an upstream
job's aligned sink does.
"""

from __future__ import annotations

import os
import signal
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
    wiring = Wiring(tmp_path / "new", source, kafka_broker.bootstrap, zk_connect)
    subjects = SubjectRegistry(zk_client)
    coordinator = SwapCoordinator(subjects, SwapRegistry(zk_client))
    old = SwapParticipant(SwapRegistry(zk_client), subjects, output, OLD)
    subjects.register_source(source, OLD, "aligned")
    query: Any = None

    def publish(epoch: int) -> None:
        """The input's epoch ``epoch``, as an upstream sink writes it: rows, then the epoch."""
        with PartitionWriter(kafka_broker.config(), source, 0) as writer:
            for i in range(3):
                writer.write(None, f"id-{epoch}-{i}".encode())
            written = writer.finish()
        previous = subjects.get_epoch(source, epoch - 1) if epoch else None
        ranges = () if written is None else (written,)
        end = {} if previous is None else previous.end_position
        subjects.register_epoch(SubjectEpoch(source, epoch, ranges, "upstream", None, wall_clock_ms(), end))

    def old_runs(epoch: int) -> None:
        """The old job's batch ``epoch`` of input epoch ``epoch``, as its sink's commit runs it."""
        subjects.record_mapping(source, OLD, "aligned", [(epoch, epoch)], keep=100)
        step = old.step(epoch)
        if step is None or step.turn == "write":
            previous = subjects.get_epoch(output, epoch - 1) if epoch else None
            end = {} if previous is None else previous.end_position
            subjects.register_epoch(SubjectEpoch(output, epoch, (), OLD, None, wall_clock_ms(), end))
            old.wrote(epoch, epoch)

    def new_reads(epoch: int) -> None:
        wait_until(
            lambda: reads_epoch(wiring.checkpoint, source, epoch), f"{NEW} reads epoch {epoch}", TIMEOUT, idle
        )

    def idle() -> None:
        pass

    def holding(epoch: int) -> bool:
        """Whether the new job's batch of ``epoch`` is in its commit (a commit worker runs, and only
        that batch is not committed)."""
        return held_in(wiring.checkpoint, source, epoch) is not None and bool(commit_workers())

    try:
        publish(0)
        old_runs(0)
        query = start_relay(spark, wiring, NEW, output, "v2", shadow=True)
        new_reads(0)
        swap = coordinator.plan(output, OLD, NEW, deadline=600)
        assert swap.epoch == 3
        for epoch in range(1, swap.epoch + 2):
            publish(epoch)
        # The new job prepares in 1, skips 2 and 3, and holds 4: the old job has not prepared.
        wait_until(lambda: holding(4), "the batch of 4 holds in its commit", TIMEOUT, idle)
        held = held_in(wiring.checkpoint, source, 4)
        assert held is not None
        stopping = threading.Thread(target=query.stop, daemon=True)
        began = time.monotonic()
        stopping.start()
        stopping.join(STOP_TIMEOUT)
        assert not stopping.is_alive(), (
            f"query.stop() still waits on the held batch after {STOP_TIMEOUT:.0f} s"
        )
        print(f"query.stop() on a held batch took {time.monotonic() - began:.1f} s")
        assert not Checkpoint(wiring.checkpoint).is_committed(held)
        # Its hold ends with the worker, which Spark ends about a minute after the stop (until then
        # it steps the swap, and would register the epoch were the swap decided meanwhile). The
        # test ends it now, as Spark does then: waiting for Spark would add that minute to the suite.
        for worker in commit_workers():
            os.kill(worker, signal.SIGKILL)
        wait_until(lambda: not commit_workers(), "the commit worker ends", STOP_TIMEOUT, idle)
        assert subjects.epochs(output) == [0]

        # Started again, the batch holds again, until the old job prepares, commits and hands over.
        query = start_relay(spark, wiring, NEW, output, "v2", shadow=True)
        wait_until(lambda: holding(4), "the batch of 4 holds again", TIMEOUT, idle)
        decided_at = time.time()
        for epoch in range(1, swap.epoch + 1):
            old_runs(epoch)
        record = SwapRegistry(zk_client).get(output)
        assert record is not None and (record.state, record.handover) == ("done", 3)
        new_reads(4)
        committed = (wiring.checkpoint / "commits" / str(held)).stat().st_mtime
        assert committed >= decided_at, "the held batch committed only once the swap was decided"
        assert subjects.epochs(output) == [0, 1, 2, 3, 4]
        assert subjects.get_epoch(output, 4).writer == NEW  # type: ignore[union-attr]
    finally:
        if query is not None:
            query.stop()
        close_shared_clients()
