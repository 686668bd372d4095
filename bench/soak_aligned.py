"""The soak's aligned workload (``bench/soak.py --aligned``): two chained jobs and ``aligned_with`` reads.

The demo-chain's jobs (``devtools/chain_demo``): job 1 ``hot-issues`` counts
comments per issue and writes each batch's changes to the subject ``hot-issues``
through the aligned sink (which prunes the subject's old epochs as it goes); job 2
``pr-hotness`` reads the subject aligned. Readers pin job 1's state to the epoch
aligned with a recent batch of job 2 (the daemon resolves it through its watched
view of the subject in ZooKeeper), and read job 1's latest state.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from bench.readers import ReaderThreads
from epochstate.client import AlignedWith, EpochStateClient
from epochstate.devtools.chain_demo.jobs import (
    HOT_ISSUES,
    PR_HOTNESS,
    Wiring,
    start_hot_issues,
    start_pr_hotness,
)
from epochstate.devtools.chain_demo.workload import CommentWriter, Workload
from epochstate.devtools.kafka_broker import TansuProcess

WRITER, READER, SUBJECT = HOT_ISSUES, PR_HOTNESS, HOT_ISSUES
# Batches of job 2 that aligned reads pick from: the newest, whose aligned epochs every retention keeps.
RECENT_BATCHES = 3


class AlignedChain:
    """The broker, the comment writer and both jobs; ``stop`` ends them, jobs first."""

    def __init__(self, spark: Any, workdir: Path, zookeeper: str, trigger_seconds: float) -> None:
        from epochstate.spark_plugin.alignment import register

        self.broker = TansuProcess(workdir / "kafka").start()
        _create_topic(self.broker.bootstrap, SUBJECT, 2)
        self.workload = Workload(issues=200, pull_requests=20, comments_per_second=200.0)
        self.wiring = Wiring(
            self.broker.bootstrap, zookeeper, workdir / "comments", workdir / "checkpoints", trigger_seconds
        )
        self.writer = CommentWriter(workdir / "comments", self.workload)
        register(spark)
        self.writer.start()
        self.queries = [
            start_hot_issues(spark, self.wiring, self.workload),
            start_pr_hotness(spark, self.wiring, lambda frame, batch: frame.count()),
        ]

    def checkpoints(self) -> dict[str, str]:
        return {job: self.wiring.checkpoint(job) for job in (WRITER, READER)}

    def failure(self) -> BaseException | None:
        return next((q.exception() for q in self.queries if q.exception() is not None), None)

    def stop(self) -> None:
        self.writer.stop()
        for query in reversed(self.queries):
            query.stop()
        self.broker.stop()


class AlignedReaders(ReaderThreads):
    """Each round reads job 1 pinned to the epoch aligned with a recent batch of job 2 (10
    issues, one MultiGet), then job 1's latest state."""

    def __init__(self, target: str, zookeeper: Any, workload: Workload, count: int) -> None:
        from epochstate.spark_plugin.alignment import SubjectRegistry

        super().__init__(target, count)
        self.workload = workload
        self.registry = SubjectRegistry(zookeeper)

    def round(self, client: EpochStateClient, rng: random.Random, thread: int) -> int:
        source = self.registry.get_source(SUBJECT, READER)
        batches = sorted(source.mapping)[-RECENT_BATCHES:] if source is not None else []
        if not batches:  # job 2 has read nothing aligned yet
            return 0
        issues = [[rng.randrange(self.workload.issues)] for _ in range(10)]
        aligned = AlignedWith(READER, rng.choice(batches), SUBJECT)
        client.multi_get(WRITER, issues, aligned_with=aligned, timeout=60)
        client.multi_get(WRITER, issues)
        return 2


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from typing import cast

    from epochstate.spark_plugin.kafka.admin import TopicAdmin
    from epochstate.spark_plugin.kafka.config import ClientConfig

    TopicAdmin(cast(ClientConfig, {"bootstrap.servers": bootstrap})).create_topic(topic, partitions)
