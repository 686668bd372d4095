"""The ``aligned_with`` selector and cross-job lookups from inside Spark.

Job ``orders`` (a stateful aggregation, followed by the daemon) writes its
output to a subject through the aligned sink; job ``enrich`` reads the subject
aligned and, in ``foreachBatch``, looks up ``orders``' state pinned to the epoch
aligned with its batch. Real Spark, ZooKeeper, the tansu broker and the daemon.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from kazoo.exceptions import NoNodeError

from epochstate.client import (
    AlignedWith,
    DeadlineExceeded,
    EpochRetired,
    Lookup,
    NoSuchEpoch,
    NoZooKeeper,
)
from epochstate.core.alignment.retention import SubjectRetention
from epochstate.devtools.zookeeper import EmbeddedZooKeeper
from epochstate.spark_plugin.alignment import SubjectRegistry, register
from epochstate.spark_plugin.alignment.connections import close_shared_clients
from epochstate.spark_plugin.lookup import AlignedLookup
from epochstate.v1 import epochstate_pb2 as pb
from epochstate.v1.epochstate_pb2_grpc import EpochStateStub
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.kafka import KafkaBroker
from tests.fixtures.oracle import canon, plain, spark_store
from tests.fixtures.zookeeper import new_test_client

# The module's scenario runs in the first test's set-up: on a loaded machine it takes minutes.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

FORMAT = "epochstate-kafka"
# Rows per batch of `orders`: batch 3 runs while `enrich` is stopped, batch 4 while a read waits.
BATCHES = [
    [("alice", 10), ("bob", 5)],
    [("alice", 7), ("carol", 1)],
    [("alice", 1), ("dave", 3)],
    [("alice", 2), ("bob", 4)],
    [("erin", 9)],
]
# The state store keeps the aggregation buffers, named after the functions: count and sum.
STATE_SCHEMA = "user string, count long, sum long, found boolean"
WORKER_TIMEOUT = "Python worker failed to connect back"


@dataclass
class Run:
    """One run of a batch of ``enrich``: the pinned epoch, what it read, what it looked up."""

    epoch: int
    subject_epochs: set[int]
    emitted: dict[str, dict[str, Any]]  # user -> the row `orders` wrote for it
    lookups: dict[str, Lookup]  # user -> its state in `orders` at `epoch`
    in_pandas: dict[str, tuple[Any, ...]]  # user -> (orders, total, found) looked up by mapInPandas


@dataclass
class Enrich:
    """The downstream job; ``runs[batch]`` lists each run of a batch."""

    spark: Any
    checkpoint: Path
    topic: str
    bootstrap: str
    zookeeper: str
    lookup: AlignedLookup
    query: Any = None
    runs: dict[int, list[Run]] = field(default_factory=dict)

    def start(self) -> Enrich:
        self.query = (
            self.spark.readStream.format(FORMAT)
            .option("topic", self.topic)
            .option("bootstrap", self.bootstrap)
            .option("zookeeper", self.zookeeper)
            .option("job", "enrich")
            .option("mappingRetention", "3")
            .option("checkpointLocation", str(self.checkpoint))
            .load()
            .writeStream.foreachBatch(self._batch)
            .option("checkpointLocation", str(self.checkpoint))
            .start()
        )
        return self

    def _batch(self, frame: Any, batch: int) -> None:
        # Pinned before the frame is touched: the batch's mapping is recorded when Spark plans it.
        epoch = self.lookup.epoch(batch)
        rows = frame.selectExpr("CAST(value AS STRING) AS value", "subject_epoch").collect()
        emitted = {row["user"]: row for row in (json.loads(r.value) for r in rows)}
        users = [*sorted(emitted), "nobody"]
        lookups = self.lookup.get(batch, [[u] for u in users])
        pandas = frame.selectExpr("CAST(key AS STRING) AS user").mapInPandas(
            self.lookup.with_state(epoch, ["user"]), STATE_SCHEMA
        )
        run = Run(
            epoch,
            {r.subject_epoch for r in rows},
            emitted,
            dict(zip(users, lookups, strict=True)),
            {r.user: (r["count"], r["sum"], r.found) for r in pandas.collect()},
        )
        # Recorded once the run is complete: wait_for_batch watches for it.
        self.runs.setdefault(batch, []).append(run)

    def wait_for_batch(self, batch: int, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while batch not in self.runs:
            assert time.monotonic() < deadline, f"enrich ran no batch {batch} within {timeout} s"
            failure = self.query.exception()
            if failure is not None and WORKER_TIMEOUT in str(failure):
                # Spark gives a new Python worker 10 s to start: too short on a loaded machine.
                self.stop()
                self.start()
                continue
            assert failure is None, failure
            time.sleep(0.05)
        # Then until the batch committed: stopping a query inside a batch goes wrong in Spark.
        self.query.processAllAvailable()

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
            self.query = None


@dataclass
class Chain:
    orders_checkpoint: Path
    enrich: Enrich
    topic: str
    daemon: DaemonProcess
    registry: SubjectRegistry
    feed: Callable[[int], None]


@pytest.fixture(scope="module")
def chain(
    spark: Any,
    tmp_path_factory: pytest.TempPathFactory,
    kafka_broker: KafkaBroker,
    zookeeper_server: EmbeddedZooKeeper,
) -> Iterator[Chain]:
    """``orders`` -> subject -> ``enrich``, the daemon following ``orders``; run once per module.

    ``orders`` runs batches 0-2 and ``enrich`` reads them; then ``enrich`` stops,
    loses its commit of batch 2, ``orders`` runs batch 3, and ``enrich`` restarts:
    batch 2 runs again, then batch 3.
    """
    from pyspark.sql import functions as F

    register(spark)
    directory = tmp_path_factory.mktemp("aligned-selector")
    chroot = f"/tests-{uuid.uuid4().hex}"
    admin = new_test_client(zookeeper_server.connect_string)
    admin.start(timeout=15)
    admin.ensure_path(chroot)
    connect = f"{zookeeper_server.connect_string}{chroot}"
    client = new_test_client(connect)
    client.start(timeout=15)
    topic = kafka_broker.create_topic(f"orders-{uuid.uuid4().hex[:8]}", partitions=2)
    inputs, checkpoint = directory / "in", directory / "orders"
    inputs.mkdir()
    counts = (
        spark.readStream.format("json")
        .schema("user string, amount long")
        .option("maxFilesPerTrigger", 1)
        .load(str(inputs))
        .groupBy("user")
        .agg(F.count("*").alias("orders"), F.sum("amount").alias("total"))
    )
    # The sink takes no update mode: complete mode writes the whole state each epoch.
    orders = (
        counts.selectExpr("user AS key", "to_json(struct(user, orders, total)) AS value")
        .writeStream.format(FORMAT)
        .outputMode("complete")
        .trigger(processingTime="100 milliseconds")  # a file source polling at 100 Hz costs CPU
        .queryName("orders")
        .option("topic", topic)
        .option("bootstrap", kafka_broker.bootstrap)
        .option("zookeeper", connect)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )

    def feed(batch: int) -> None:
        rows = "".join(json.dumps({"user": u, "amount": a}) + "\n" for u, a in BATCHES[batch])
        temporary = inputs / f".part-{batch:05d}.tmp"
        temporary.write_text(rows)
        temporary.rename(inputs / f"part-{batch:05d}.json")
        orders.processAllAvailable()

    # Two retained epochs: the subject's retention test needs a daemon that lets go of old ones.
    # The node name is the replica znode's: a second daemon on this host must not share it.
    daemon = DaemonProcess(
        directory / "daemon",
        {"orders": str(checkpoint)},
        zookeeper=connect,
        env={"EPOCHSTATE_RETENTION_EPOCHS": "2", "EPOCHSTATE_NODE": "chain"},
    ).start()
    lookup = AlignedLookup(daemon.target, job="orders", reader="enrich", timeout=60)
    enrich = Enrich(spark, directory / "enrich", topic, kafka_broker.bootstrap, connect, lookup)
    try:
        feed(0)
        feed(1)
        enrich.start()
        enrich.wait_for_batch(1)  # before `orders` moves on: the daemon keeps only two epochs
        feed(2)
        enrich.wait_for_batch(2)
        enrich.stop()
        forget_commit(enrich.checkpoint, 2)
        feed(3)
        enrich.start()
        enrich.wait_for_batch(3)
        yield Chain(checkpoint, enrich, topic, daemon, SubjectRegistry(client), feed)
    finally:
        enrich.stop()
        orders.stop()
        daemon.stop()
        close_shared_clients()
        with contextlib.suppress(NoNodeError):
            admin.delete(chroot, recursive=True)
        for zk in (client, admin):
            zk.stop()
            zk.close()


def forget_commit(checkpoint: Path, batch: int) -> None:
    """Remove Spark's commit of ``batch``, as if the driver died just before writing it."""
    for name in (str(batch), f".{batch}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)


def test_cross_job_lookups_pinned_to_aligned_epochs_are_identical_on_replay(spark: Any, chain: Chain) -> None:
    runs = chain.enrich.runs
    assert len(runs[2]) == 2, (
        f"batch 2 lost its commit and ran again: {[(b, len(r)) for b, r in runs.items()]}"
    )
    first, again = runs[2]
    assert (again.epoch, again.lookups, again.in_pandas) == (first.epoch, first.lookups, first.in_pandas)

    epochs = sorted({run.epoch for batch_runs in runs.values() for run in batch_runs})
    oracle = spark_store(spark, chain.orders_checkpoint, epochs)
    source = chain.registry.get_source(chain.topic, "enrich")
    assert source is not None
    for batch, batch_runs in sorted(runs.items()):
        for run in batch_runs:
            # The aligned epoch of `orders` is the one that wrote the subject epoch the batch read.
            assert run.subject_epochs == {run.epoch}, (batch, run.subject_epochs, run.epoch)
            assert source.mapping.get(batch, run.epoch) == run.epoch
            state = oracle.states[run.epoch]
            for user, lookup in run.lookups.items():
                expected = state.get(canon({"user": user}))
                assert lookup.epoch == run.epoch
                assert lookup.found == (expected is not None), (batch, user)
                assert plain(lookup.value) == (None if expected is None else expected[1]), (batch, user)
            # What the batch reads is what `orders` had then: its lookups agree with it.
            for user, emitted in run.emitted.items():
                value = run.lookups[user].value
                assert value is not None and value.fields == (
                    ("count", emitted["orders"]),
                    ("sum", emitted["total"]),
                )
                assert run.in_pandas[user] == (emitted["orders"], emitted["total"], True)
            assert sorted(run.in_pandas) == sorted(run.emitted)
    with chain.daemon.client() as client:
        latest = client.get("orders", ["alice"])
        assert latest.epoch > first.epoch and latest.value != first.lookups["alice"].value, "orders moved on"
        assert client.get("orders", ["alice"], aligned_with=("enrich", 2)) == first.lookups["alice"]


def test_lookups_on_the_daemons_node_read_its_store_in_process(spark: Any, chain: Chain) -> None:
    """Naming the daemon's data directory, the driver and the executors read keys through
    ``local://`` and answer exactly what they answer over gRPC."""
    remote = chain.enrich.lookup
    local = dataclasses.replace(remote, data_dir=str(chain.daemon.data_dir))
    assert remote.reads_through() == chain.daemon.target
    assert local.reads_through() == f"local://{chain.daemon.data_dir.absolute()}"
    batch = max(chain.enrich.runs)
    run = chain.enrich.runs[batch][-1]
    users = sorted(run.lookups)
    keys = [[user] for user in users]
    assert local.get(batch, keys) == remote.get(batch, keys) == [run.lookups[u] for u in users]
    assert local.get_at(run.epoch, keys) == remote.get_at(run.epoch, keys)

    epoch = run.epoch

    def both(frames: Iterator[Any]) -> Iterator[Any]:
        given = list(frames)
        in_process = list(local.with_state(epoch, ["user"])(iter(given)))
        over_grpc = list(remote.with_state(epoch, ["user"])(iter(given)))
        for mine, theirs in zip(in_process, over_grpc, strict=True):
            out = mine.copy()
            out["same"] = mine.equals(theirs)
            out["through"] = local.reads_through()
            yield out

    users_frame = spark.createDataFrame([(u,) for u in users], "user string").coalesce(1)
    rows = users_frame.mapInPandas(both, f"{STATE_SCHEMA}, same boolean, through string").collect()
    assert {r.user: (r["count"], r["sum"], r.found) for r in rows} == {
        u: (None, None, False) if not lk.found else (*(v for _, v in lk.value.fields), True)  # type: ignore[union-attr]
        for u, lk in run.lookups.items()
    }
    assert all(r.same for r in rows)
    assert {r.through for r in rows} == {local.reads_through()}


def test_aligned_reads_wait_and_fail_clearly(
    chain: Chain, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    ahead = max(chain.enrich.runs) + 1
    with chain.daemon.client(timeout=30) as client:
        # `enrich` has not read its next batch: the read waits, then fails at its deadline ...
        with pytest.raises(DeadlineExceeded, match=f"did not read its epoch {ahead}"):
            client.get("orders", ["alice"], aligned_with=("enrich", ahead), timeout=1.0)
        # ... or succeeds once `orders` writes another epoch and `enrich` reads it.
        feeder = threading.Timer(0.5, chain.feed, args=(ahead,))
        feeder.start()
        try:
            waited = client.get("orders", ["erin"], aligned_with=("enrich", ahead), timeout=90)
        finally:
            feeder.join()
        assert waited.epoch == ahead and waited.value == (1, 9)
        chain.enrich.wait_for_batch(ahead)
        # mappingRetention=3: the mapping no longer holds batch 0 of `enrich`.
        with pytest.raises(EpochRetired, match="retention"):
            client.get("orders", ["alice"], aligned_with=("enrich", 0))
        with pytest.raises(NoSuchEpoch, match="share no subject"):
            client.get("orders", ["alice"], aligned_with=("stranger", 0))

        # A second subject both jobs touch, which `orders` reads unaligned.
        chain.registry.register_source("side", "orders", "unaligned")
        chain.registry.record_mapping("side", "enrich", "aligned", [(ahead, 0)], keep=3)
        with pytest.raises(NoSuchEpoch, match="share subjects"):
            client.get("orders", ["alice"], aligned_with=("enrich", ahead))
        with pytest.raises(NoSuchEpoch, match="reads subject 'side' unaligned"):
            client.get("orders", ["alice"], aligned_with=AlignedWith("enrich", ahead, "side"))
        pinned = client.get("orders", ["erin"], aligned_with=AlignedWith("enrich", ahead, chain.topic))
        assert pinned == waited

    alone = daemon_factory({"orders": str(chain.orders_checkpoint)}, name="no-zookeeper")
    alone.wait_for_epoch("orders", 0)
    with alone.client() as client:
        with pytest.raises(NoSuchEpoch, match="without ZooKeeper"):
            client.get("orders", ["alice"], aligned_with=("enrich", 0))
        with pytest.raises(NoZooKeeper, match="without ZooKeeper"):
            client.alignment.status()


def test_cli_reads_at_the_aligned_epoch(chain: Chain) -> None:
    result = subprocess.run(
        [
            *(sys.executable, "-m", "epochstate.cli.app", "get", "orders", "alice"),
            *("--aligned-with", f"enrich:3@{chain.topic}", "--json", "--target", chain.daemon.target),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert (answer["epoch"], answer["key"], answer["value"]) == (
        3,
        {"user": "alice"},
        {"count": 4, "sum": 20},
    )


def test_scan_pages_stay_at_the_aligned_epoch(spark: Any, chain: Chain) -> None:
    batch = max(chain.enrich.runs) - 1
    pinned = chain.enrich.runs[batch][-1].epoch
    aligned = AlignedWith("enrich", batch, chain.topic)
    oracle = spark_store(spark, chain.orders_checkpoint, [pinned]).states[pinned]
    with chain.daemon.client() as client:
        latest = client.get("orders", ["alice"]).epoch
        rows = list(client.scan("orders", aligned_with=aligned, page_size=1))
    assert len(rows) == len(oracle) > 1 and {row.epoch for row in rows} == {pinned} and latest > pinned
    assert {canon(row.key): plain(row.value) for row in rows} == {
        key: value for key, (_, value, _) in oracle.items()
    }
    # The page token pins the resolved epoch: a later page ignores the request's selector.
    with grpc.insecure_channel(chain.daemon.target) as channel:
        stub = EpochStateStub(channel)
        request = pb.ScanRequest(
            store=pb.StoreRef(job="orders"),
            epoch=pb.EpochSelector(
                aligned_with=pb.AlignedWith(job="enrich", epoch=batch, subject=chain.topic)
            ),
            limit=1,
        )
        first = stub.Scan(request, timeout=30)
        request.page_token = first.next_page_token
        request.epoch.CopyFrom(pb.EpochSelector(latest=True))
        assert first.epoch == stub.Scan(request, timeout=30).epoch == pinned


def test_subject_retention_keeps_what_aligned_reads_need(chain: Chain) -> None:
    registry, topic = chain.registry, chain.topic
    retention = SubjectRetention(registry, keep=2)
    before = registry.epochs(topic)
    source = registry.get_source(topic, "enrich")
    oldest = registry.oldest_retained("orders")
    assert source is not None and oldest is not None
    last_read = max(source.mapping.values())
    with chain.daemon.client(timeout=30) as client:
        before_last = AlignedWith("enrich", last_read - 1, topic)
        kept = client.get("orders", ["alice"], aligned_with=before_last)

        pruned = retention.prune(topic)

        # The floor (2 newest), enrich (runs its newest batch again) and the daemon (its oldest epoch).
        assert pruned.plan.horizon == min(before[-1] - 1, last_read - 1, oldest) == last_read - 1
        assert registry.epochs(topic) == [e for e in before if e >= pruned.plan.horizon]
        assert pruned.epochs and pruned.mapping_entries == {"enrich": 1}, pruned
        after = registry.get_source(topic, "enrich")
        assert after is not None
        assert after.mapping == {j: k for j, k in source.mapping.items() if k >= pruned.plan.horizon}
        assert retention.prune(topic).epochs == ()
        # What a daemon still retains resolves as before; what was pruned is OUT_OF_RANGE.
        assert (
            client.get("orders", ["alice"], aligned_with=AlignedWith("enrich", last_read - 1, topic)) == kept
        )
        gone = min(j for j, k in source.mapping.items() if k < pruned.plan.horizon)
        with pytest.raises(EpochRetired, match=f"older than the retention of subject '{topic}'"):
            client.get("orders", ["alice"], aligned_with=AlignedWith("enrich", gone, topic))
