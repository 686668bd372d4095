"""Exactly once across crashes: chained jobs SIGKILLed mid-batch and restarted, the counter check.

An upstream job writes uniquely numbered records to a subject (the aligned sink);
a downstream job counts each id it reads aligned. Both run in processes of their
own (``tests.alignment.jobs``) and are killed, separately, at random points in a
batch, several times. A second downstream job (the reference, in the test's
SparkSession, never killed, started late) reads the same subject aligned.

Afterwards: every id is in exactly one subject epoch; in every committed
downstream batch ``m`` (reading subject epoch ``k``) Spark's own state reader
shows count 1 for exactly the ids of subject epochs ``<= k``; and the two
downstream jobs have the same epochs at identical positions with equal state.

``EPOCHSTATE_CHAOS_SEED=<n>`` repeats a run's kill points (the seed is printed).
"""

from __future__ import annotations

import functools
import json
import os
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.spark_plugin.alignment import SubjectOffset, SubjectRegistry, register
from epochstate.spark_plugin.alignment.connections import close_shared_clients
from epochstate.spark_plugin.alignment.planned import PlannedOffsets
from tests.alignment.conftest import read_epoch
from tests.alignment.jobs import JobProcess, Wiring, start_downstream
from tests.fixtures.kafka import KafkaBroker

pytestmark = pytest.mark.spark

SEED = int(os.environ.get("EPOCHSTATE_CHAOS_SEED") or random.SystemRandom().randrange(2**31))
# In an order the seed picks. CI inflicts each kind of kill once (a JVM restart is slow on
# CI's 2 cores); a local run kills each job twice, so that a restart is itself killed mid-batch.
KILLS = ["upstream", "downstream"] * (1 if os.environ.get("CI") == "true" else 2)
IDS_PER_FILE = 12
START_TIMEOUT = 240.0  # a JVM starting on a loaded 2-core machine


class Feeder:
    """Input files for the upstream job: one file is one batch, every id unique."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True)
        self.ids: list[str] = []

    @property
    def files(self) -> int:
        return len(self.ids) // IDS_PER_FILE

    def feed(self, files: int = 1) -> None:
        for _ in range(files):
            number = self.files
            batch = [f"id-{number:03d}-{i:02d}" for i in range(IDS_PER_FILE)]
            temporary = self.directory / f".part-{number:05d}.tmp"
            temporary.write_text("".join(json.dumps({"id": i}) + "\n" for i in batch))
            temporary.rename(self.directory / f"part-{number:05d}.json")
            self.ids += batch


def wait_until(check: Callable[[], bool], what: str, timeout: float, idle: Callable[[], None]) -> None:
    """Poll ``check`` every 5 ms; call ``idle`` every 2 s meanwhile (to feed a job that ran dry)."""
    deadline = time.monotonic() + timeout
    nudge = time.monotonic() + 2.0
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        if time.monotonic() > nudge:
            idle()
            nudge = time.monotonic() + 2.0
        time.sleep(0.005)


def newest_commit(checkpoint: Checkpoint) -> int:
    newest = checkpoint.latest_committed()
    return -1 if newest is None else newest


def aligned_batches(checkpoint: Path, topic: str) -> dict[int, SubjectOffset]:
    """Each committed batch of a downstream job and its end offset in the subject."""
    planned = PlannedOffsets(str(checkpoint), topic)
    return {batch: planned.offset(batch) for batch in Checkpoint(checkpoint).committed_epochs()}


def aligned_state(
    spark: Any, checkpoint: Path, topic: str
) -> dict[int, tuple[int, SubjectOffset, dict[str, int]]]:
    """Subject epoch -> (the downstream batch that read it, the batch's end offset, its state).

    Consecutive batches read consecutive epochs (one batch per epoch). A query
    started before the subject's first epoch runs an empty first batch (Spark
    always runs one), which ends before epoch 0 and is left out.
    """
    batches = aligned_batches(checkpoint, topic)
    assert sorted(batches) == list(range(len(batches)))
    read = [batches[b].epoch for b in sorted(batches)]
    assert read[0] is not None and read == list(range(read[0], read[0] + len(read))), read
    counts = counts_by_batch(spark, checkpoint, sorted(batches))
    return {k: (b, o, counts[b]) for b, o in batches.items() if (k := o.epoch) is not None and k >= 0}


def reads_epoch(checkpoint: Path, topic: str, epoch: int) -> bool:
    """Whether the downstream job under ``checkpoint`` committed the batch reading subject ``epoch``."""
    return epoch in {offset.epoch for offset in aligned_batches(checkpoint, topic).values()}


class Reference:
    """A downstream job in the test's SparkSession; started again from its checkpoint if it fails."""

    def __init__(
        self, spark: Any, wiring: Wiring, job: str = "reference", id_expression: str = "CAST(value AS STRING)"
    ) -> None:
        self.spark = spark
        self.wiring = wiring
        self.job = job
        self.id_expression = id_expression
        self.failures: list[str] = []
        self.query = self._start()

    def _start(self) -> Any:
        return start_downstream(self.spark, self.wiring, self.job, self.id_expression)

    def supervise(self) -> None:
        if not self.query.isActive:
            self.failures.append(str(self.query.exception()))
            self.query = self._start()

    def stop(self) -> None:
        self.query.stop()


def counts_by_batch(spark: Any, checkpoint: Path, batches: list[int]) -> dict[int, dict[str, int]]:
    """Spark's own state reader: the count per id after each batch, all batches in one Spark job."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    frames = [
        spark.read.format("statestore")
        .option("batchId", batch)
        .load(str(checkpoint))
        .select(F.lit(batch).alias("batch"), F.col("key.id").alias("id"), F.col("value.count").alias("n"))
        for batch in batches
    ]
    result: dict[int, dict[str, int]] = {batch: {} for batch in batches}
    for row in functools.reduce(DataFrame.unionByName, frames).collect():
        assert row.id not in result[row.batch], f"id {row.id} twice in the state after batch {row.batch}"
        result[row.batch][row.id] = row.n
    return result


@pytest.mark.timeout(900)
def test_killed_and_restarted_jobs_count_every_record_exactly_once(
    spark: Any, kafka_broker: KafkaBroker, zk_connect: str, zk_client: KazooClient, tmp_path: Path
) -> None:
    print(f"chaos seed {SEED} (EPOCHSTATE_CHAOS_SEED={SEED} repeats the kill points)")
    rng = random.Random(SEED)
    register(spark)
    topic = kafka_broker.create_topic(f"exactly-once-{uuid.uuid4().hex[:12]}", 2)

    def wiring(name: str) -> Wiring:
        return Wiring(tmp_path / name, topic, kafka_broker.bootstrap, zk_connect)

    feeder = Feeder(tmp_path / "input")
    jobs = {
        "upstream": JobProcess("upstream", wiring("upstream"), ["--input", str(feeder.directory)], tmp_path),
        "downstream": JobProcess("downstream", wiring("downstream"), ["--job", "counted"], tmp_path),
    }
    registry = SubjectRegistry(zk_client)
    reference: Reference | None = None
    killed: list[str] = []

    def nudge() -> None:
        """Feed one more file once the upstream job has planned every file fed so far."""
        if len(jobs["upstream"].checkpoint.planned_epochs()) >= feeder.files:
            feeder.feed()

    def registered_rows() -> int:
        epochs = (registry.get_epoch(topic, k) for k in registry.epochs(topic))
        return sum(r.size for e in epochs if e is not None for r in e.ranges)

    try:
        for job in jobs.values():
            job.start()
        feeder.feed(2)
        for job in jobs.values():
            job.prewarm()  # the process of its restart boots meanwhile
        order = rng.sample(KILLS, len(KILLS))
        for turn, name in enumerate(order):
            victim = jobs[name]
            wait_until(victim.warm, f"{name}'s next process boots", START_TIMEOUT, nudge)
            since = newest_commit(victim.checkpoint)
            feeder.feed()
            wait_until(
                lambda: newest_commit(victim.checkpoint) > since,  # noqa: B023 - used within the iteration
                f"{name} (start {victim.starts}) commits a batch after {since}\n{victim.log_tail()}",
                START_TIMEOUT,
                nudge,
            )
            time.sleep(rng.uniform(0.0, 1.0))
            wait_until(victim.mid_batch, f"{name} runs a batch", START_TIMEOUT, nudge)
            batch = victim.checkpoint.planned_epochs()[-1]
            victim.kill()
            killed.append(f"{name} in batch {batch}")
            victim.start()
            if name in order[turn + 1 :]:  # a process booting for nothing would slow the other restarts
                victim.prewarm()
            if reference is None:
                reference = Reference(spark, wiring("reference"))
            reference.supervise()
        assert reference is not None
        feeder.feed(2)
        wait_until(
            lambda: registered_rows() == len(feeder.ids),
            f"the subject holds all {len(feeder.ids)} ids\n{jobs['upstream'].log_tail()}",
            START_TIMEOUT,
            lambda: None,
        )
        last = registry.epochs(topic)[-1]
        for directory in (tmp_path / "downstream", tmp_path / "reference"):
            wait_until(
                functools.partial(reads_epoch, directory, topic, last),
                f"{directory.name} commits the batch reading subject epoch {last}\n"
                + jobs["downstream"].log_tail(),
                START_TIMEOUT,
                reference.supervise,
            )
    finally:
        for job in jobs.values():
            job.kill(standby=True)
        if reference is not None:
            reference.stop()
        close_shared_clients()
    print("killed:", "; ".join(killed))
    restarted = [f"{job.kind} {job.log_path.read_text().count('query failed')}x" for job in jobs.values()]
    print("failed on their own and restarted:", ", ".join(restarted), f"reference {len(reference.failures)}x")

    # The subject: every id in exactly one epoch, whatever the upstream's attempts wrote.
    epochs = [e for k in registry.epochs(topic) if (e := registry.get_epoch(topic, k)) is not None]
    assert [e.epoch for e in epochs] == list(range(len(epochs)))
    ids_of = {e.epoch: [row[0] for row in read_epoch(kafka_broker, e)] for e in epochs}
    assert sorted(i for ids in ids_of.values() for i in ids) == sorted(feeder.ids)
    orphans = sum(kafka_broker.admin.high_watermarks(topic).values()) - len(feeder.ids)
    print(f"{len(epochs)} subject epochs; {orphans} rows of killed attempts lie outside them")

    # Each downstream batch reads the next subject epoch; its state counts each id read so far once.
    counted = aligned_state(spark, tmp_path / "downstream", topic)
    assert sorted(counted) == list(range(len(epochs)))
    mapping = registry.get_source(topic, "counted")
    assert mapping is not None
    assert {b: k for k, (b, _, _) in counted.items() if b in mapping.mapping} == {
        b: k for b, k in mapping.mapping.items() if k in counted
    }, "the mapping in ZooKeeper names the batch that read each epoch"
    for k, (batch, _, counts) in counted.items():
        expected = Counter(i for e in range(k + 1) for i in ids_of[e])
        assert counts == dict(expected), f"state after batch {batch} (subject epoch {k})"
    assert set(counted[len(epochs) - 1][2].values()) == {1}

    # The reference job, never killed and started late, has the same epochs at the same positions.
    mirrored = aligned_state(spark, tmp_path / "reference", topic)
    assert {k: (offset, counts) for k, (_, offset, counts) in mirrored.items()} == {
        k: (offset, counts) for k, (_, offset, counts) in counted.items()
    }
