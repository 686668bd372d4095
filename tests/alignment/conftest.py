"""Aligned sink and source tests: real Spark queries, the real ZooKeeper and the real broker.

The Spark tests of this package share one scenario (``subject_run``), run once:
queries are slow to start on a loaded machine, and every step of the scenario is
something a test checks.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from epochstate.devtools.zookeeper import EmbeddedZooKeeper
from epochstate.spark_plugin.alignment import (
    EpochStateKafka,
    SourceRecord,
    SubjectEpoch,
    SubjectRegistry,
    register,
)
from epochstate.spark_plugin.alignment.connections import close_shared_clients
from epochstate.spark_plugin.kafka.reader import read_range
from tests.fixtures.kafka import KafkaBroker
from tests.fixtures.zookeeper import new_admin_client, new_test_client

FORMAT = EpochStateKafka.name()
LAUNCH_FAILURE = "Python worker failed to connect back"
LAUNCH_ATTEMPTS = 5
STARTING = ("Initializing StreamExecution", "Initializing sources")
# One row as the tests compare them: value, partition, offset, subject epoch.
ReadRow = tuple[str, int, int, int | None]


def fresh_topic(broker: KafkaBroker, partitions: int) -> str:
    return broker.create_topic(f"alignment-{uuid.uuid4().hex[:12]}", partitions)


def read_epoch(broker: KafkaBroker, epoch: SubjectEpoch) -> list[ReadRow]:
    """The rows of exactly the epoch's registered ranges."""
    return sorted(
        (record.value.decode(), r.partition, record.offset, epoch.epoch)
        for r in epoch.ranges
        for record in read_range(broker.config(), r, timeout=10)
        if record.value is not None
    )


def epoch_znode(client: KazooClient, topic: str, epoch: int) -> tuple[bytes, int]:
    """The data of an epoch znode and the transaction that last changed it."""
    data, stat = client.get(SubjectRegistry(client).layout.epoch(topic, epoch))
    return data, stat.mzxid


def forget_commit(checkpoint: Path, batch: int) -> None:
    """Remove Spark's commit of ``batch``, as if the driver died just before writing it."""
    for name in (str(batch), f".{batch}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)


@dataclass
class UpstreamJob:
    """A streaming query writing rows to a subject through the sink; ``feed`` runs one batch."""

    spark: Any
    directory: Path
    topic: str
    broker: KafkaBroker
    zookeeper: str
    job: str = "upstream"
    tasks: int = 2
    options: dict[str, str] = field(default_factory=dict)  # more options of the sink
    query: Any = None
    files: int = 0
    fed: list[list[str]] = field(default_factory=list)

    @property
    def checkpoint(self) -> Path:
        return self.directory / "checkpoint"

    def start(self) -> UpstreamJob:
        inputs = self.directory / "input"
        inputs.mkdir(parents=True, exist_ok=True)
        frame = (
            self.spark.readStream.format("json")
            .schema("key string, value string")
            .option("maxFilesPerTrigger", 1)
            .load(str(inputs))
            .repartition(self.tasks)
        )
        writer = frame.writeStream.format(FORMAT).options(**self.options)
        self.query = (
            writer.queryName(self.job)
            .trigger(processingTime="100 milliseconds")  # a file source polling at 100 Hz costs CPU
            .option("topic", self.topic)
            .option("bootstrap", self.broker.bootstrap)
            .option("zookeeper", self.zookeeper)
            .option("checkpointLocation", str(self.checkpoint))
            .start()
        )
        return self

    def feed(self, values: list[str]) -> None:
        """Run one batch that writes ``values`` (an empty list runs an empty batch)."""
        inputs = self.directory / "input"
        temporary = inputs / f".part-{self.files:05d}.tmp"
        temporary.write_text("".join(json.dumps({"key": v, "value": v}) + "\n" for v in values))
        temporary.rename(inputs / f"part-{self.files:05d}.json")
        self.files += 1
        self.fed.append(list(values))
        self.query.processAllAvailable()

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
            self.query = None


@dataclass
class Batch:
    rows: list[ReadRow]
    started_ms: int


@dataclass
class DownstreamJob:
    """A streaming query reading a subject through the source into foreachBatch.

    ``runs[batch]`` lists every run of a batch (a re-executed batch runs twice).
    """

    spark: Any
    directory: Path
    topic: str
    broker: KafkaBroker
    zookeeper: str
    job: str
    options: dict[str, str] = field(default_factory=dict)
    trigger: str | None = None  # processingTime; None: Spark's default (as fast as it can)
    query: Any = None
    runs: dict[int, list[Batch]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def checkpoint(self) -> Path:
        return self.directory / "checkpoint"

    def start(self) -> DownstreamJob:
        reader = (
            self.spark.readStream.format(FORMAT)
            .option("topic", self.topic)
            .option("bootstrap", self.broker.bootstrap)
            .option("zookeeper", self.zookeeper)
            .option("job", self.job)
            .option("checkpointLocation", str(self.checkpoint))
        )
        for name, value in self.options.items():
            reader = reader.option(name, value)
        writer = reader.load().writeStream.foreachBatch(self._batch)
        if self.trigger is not None:
            writer = writer.trigger(processingTime=self.trigger)
        for attempt in range(LAUNCH_ATTEMPTS):
            time.sleep(attempt * 5.0)  # let a burst of load on the shared machine pass
            self.query = writer.option("checkpointLocation", str(self.checkpoint)).start()
            if self._source_launched():
                return self
        raise AssertionError(f"{self.job}: the source's Python worker never started")

    def _source_launched(self, timeout: float = 120.0) -> bool:
        """Whether the query got past starting its source (False: Spark gave up on the worker).

        Spark waits a fixed ten seconds for the Python worker of a stream reader to
        connect back; on a loaded test machine a cold interpreter can take longer.
        Nothing of the source has run then, so starting the query again is safe.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            launched = self.query.status["message"] not in STARTING or bool(self.query.recentProgress)
            error = self.query.exception()  # after the status: a failure sets it first
            if error is not None:
                if LAUNCH_FAILURE in str(error):
                    self.query.stop()
                    return False
                raise AssertionError(error)
            if launched:
                return True
            time.sleep(0.1)
        return True

    def _batch(self, frame: Any, batch: int) -> None:
        started = time.time_ns() // 1_000_000
        rows = sorted(
            (bytes(r.value).decode(), r.partition, r.offset, r.subject_epoch)
            for r in frame.select("value", "partition", "offset", "subject_epoch").collect()
        )
        with self._lock:
            self.runs.setdefault(batch, []).append(Batch(rows, started))

    def rows(self) -> dict[int, list[ReadRow]]:
        """Each batch's rows (of its last run)."""
        with self._lock:
            return {batch: runs[-1].rows for batch, runs in sorted(self.runs.items())}

    def wait_for_batch(self, batch: int, timeout: float = 90.0) -> None:
        """Wait until ``batch`` ran, then until the query has nothing left to do."""
        deadline = time.monotonic() + timeout
        while batch not in self.runs:
            assert time.monotonic() < deadline, f"{self.job}: no batch {batch} within {timeout} s"
            exception = self.query.exception()
            assert exception is None, exception
            time.sleep(0.05)
        self.query.processAllAvailable()

    def trigger_started_ms(self) -> dict[int, int]:
        """When the current run's trigger of each batch began (Spark's progress timestamp).

        A query that waits reports an idle trigger with the next batch id; the
        batch's own report comes later and wins.
        """
        return {
            int(p.batchId): int(datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")).timestamp() * 1000)
            for p in self.query.recentProgress
        }

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
            self.query = None


@dataclass
class SubjectRun:
    """What the shared scenario did and saw; see :func:`subject_run`."""

    topic: str
    upstream: UpstreamJob
    first: DownstreamJob
    second: DownstreamJob
    unaligned: DownstreamJob
    epochs: dict[int, SubjectEpoch]
    sources: dict[str, SourceRecord | None]
    rerun_epoch_before: tuple[bytes, int]
    rerun_epoch_after: tuple[bytes, int]
    watermarks: dict[int, int]
    triggers: dict[str, dict[int, int]]  # job -> batch -> when its trigger began (ms)


SIZES = [7, 5, 0, 6, 4]  # rows per upstream batch; batch 2 is empty
RERUN = 3  # the upstream batch that runs twice
IDLE = 4  # the upstream batch written while both aligned readers wait for it


@pytest.fixture(scope="package")
def subjects_zookeeper(zookeeper_server: EmbeddedZooKeeper) -> Iterator[tuple[str, KazooClient]]:
    """A ZooKeeper chroot for the package's scenario: its connect string and a client on it."""
    chroot = f"/tests-{uuid.uuid4().hex}"
    admin = new_admin_client(zookeeper_server.connect_string)
    admin.ensure_path(chroot)
    client = new_test_client(f"{zookeeper_server.connect_string}{chroot}")
    client.start(timeout=15)
    try:
        yield f"{zookeeper_server.connect_string}{chroot}", client
    finally:
        client.stop()
        client.close()
        close_shared_clients()
        with contextlib.suppress(NoNodeError):
            admin.delete(chroot, recursive=True)
        admin.stop()
        admin.close()


@pytest.fixture(scope="package")
def subject_run(
    spark: Any,
    kafka_broker: KafkaBroker,
    subjects_zookeeper: tuple[str, KazooClient],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SubjectRun]:
    """One upstream query and three downstream queries over a two-partition subject.

    1. Upstream (two write tasks) writes batches 0 and 1. Aligned readers A and B start.
    2. A stops after batch 1, loses its commit of batch 1 and restarts (re-running it)
       while upstream writes batches 2 (empty) and 3.
    3. Upstream stops, loses its commit of batch 3 and restarts: batch 3 runs again,
       writing its rows a second time.
    4. Once A and B have read epoch 3 and wait, upstream writes batch 4.
    5. C reads the topic unaligned, ten offsets per batch at most.
    """
    register(spark)
    connect, client = subjects_zookeeper
    topic = fresh_topic(kafka_broker, 2)
    directory = tmp_path_factory.mktemp("alignment")

    def downstream(job: str, **options: str) -> DownstreamJob:
        return DownstreamJob(spark, directory / job, topic, kafka_broker, connect, job, options)

    upstream = UpstreamJob(spark, directory / "upstream", topic, kafka_broker, connect)
    first, second = downstream("reader-a"), downstream("reader-b")
    unaligned = downstream("reader-c", mode="unaligned", maxOffsetsPerTrigger="10")

    def feed(batch: int) -> None:
        upstream.feed([f"b{batch}-{i}" for i in range(SIZES[batch])])

    try:
        upstream.start()
        feed(0)
        feed(1)
        first.start()
        second.start()
        first.wait_for_batch(1)
        first.stop()
        forget_commit(first.checkpoint, 1)
        first.start()
        feed(2)
        feed(RERUN)
        before = epoch_znode(client, topic, RERUN)
        upstream.stop()
        forget_commit(upstream.checkpoint, RERUN)
        upstream.start()
        upstream.query.processAllAvailable()
        first.wait_for_batch(RERUN)
        second.wait_for_batch(RERUN)
        feed(IDLE)
        first.wait_for_batch(IDLE)
        second.wait_for_batch(IDLE)
        unaligned.start()
        unaligned.query.processAllAvailable()
        registry = SubjectRegistry(client)
        epochs = {k: registry.get_epoch(topic, k) for k in registry.epochs(topic)}
        yield SubjectRun(
            topic=topic,
            upstream=upstream,
            first=first,
            second=second,
            unaligned=unaligned,
            epochs={k: e for k, e in epochs.items() if e is not None},
            sources={job: registry.get_source(topic, job) for job in ("reader-a", "reader-b", "reader-c")},
            rerun_epoch_before=before,
            rerun_epoch_after=epoch_znode(client, topic, RERUN),
            watermarks=kafka_broker.admin.high_watermarks(topic),
            triggers={job.job: job.trigger_started_ms() for job in (first, second)},
        )
    finally:
        for job in (unaligned, second, first, upstream):
            job.stop()
