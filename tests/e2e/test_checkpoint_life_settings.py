"""Provider settings changed between runs of one query, on Spark 4.3: every epoch before
and after each change is served as ``spark.read.format("statestore")`` reads it, by a
daemon that followed the query live across the changes and by one started afterwards.

What Spark does with each change (checked here on the checkpoint itself):

* RocksDB changelog checkpointing is not pinned: a run with it off writes a zip per
  version and no changelog; a later run with it on writes changelogs again.
* The compression codec, row checksums and the shuffle partitions are pinned in the
  offset log (``OffsetSeqMetadata.relevantSQLConfs``): a later run's value is replaced by
  the checkpoint's, silently, so every epoch keeps lz4, no checksums and the first
  run's partitions. A setting the checkpoint does not record yet takes its legacy
  default (``rowChecksum.enabled`` false), so none of them can change mid-life.
* ``checkpointFormatVersion`` 2 on a checkpoint written with 1 is not recorded in the
  offset log, yet Spark keeps writing format 1 (no unique ids in file names or commits).
* The HDFS provider's files change with its (pinned) codec only; ``minDeltasForSnapshot``
  changes how often snapshots appear, which the daemon follows.

Each checkpoint shape is one Spark workload shared by the tests of this module.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import StoreOracle, assert_store_equals_oracle, spark_store
from tests.fixtures.streams import (
    CHANGELOG_CHECKPOINTING,
    CHECKPOINT_FORMAT,
    PROVIDER_CLASS,
    ROCKSDB,
    FileStream,
    Provider,
    copy_checkpoint,
)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

CODEC = "spark.sql.streaming.stateStore.compression.codec"
ROW_CHECKSUM = "spark.sql.streaming.stateStore.rowChecksum.enabled"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
MIN_DELTAS = "spark.sql.streaming.stateStore.minDeltasForSnapshot"
SCHEMA = "k long, v long, ts timestamp"
JOB = "life"
LZ4_MAGIC = b"LZ4Block"


def windowed_counts(frame: Any) -> Any:
    """Counts per key and 10-second window; windows behind the watermark are evicted,
    so versions remove keys as well as put them."""
    from pyspark.sql import functions as F

    return (
        frame.withWatermark("ts", "10 seconds")
        .groupBy(F.window("ts", "10 seconds"), "k")
        .agg(F.count("*").alias("n"), F.sum("v").alias("total"))
    )


def rows(batch: int) -> list[dict[str, Any]]:
    """Six rows over a dozen keys, a batch five seconds after the one before: a window
    is evicted two or three batches after its first row."""
    seconds = [batch * 5 + i for i in range(6)]
    return [
        {"k": (batch * 5 + i) % 12, "v": batch * 10 + i, "ts": f"2026-01-01T00:{s // 60:02d}:{s % 60:02d}"}
        for i, s in enumerate(seconds)
    ]


@dataclass(frozen=True)
class Run:
    """One run of the query: what it sets on top of the workload's base settings, and
    how many batches it runs."""

    name: str
    conf: dict[str, str]
    batches: int


@dataclass
class Life:
    """A checkpoint after all its runs: the epochs of each run, Spark's reading of every
    epoch, the daemon that followed it live and one started on a copy afterwards."""

    checkpoint: Path
    epochs: dict[str, list[int]]
    oracle: StoreOracle
    live: DaemonProcess
    after: DaemonProcess

    def conf(self, epoch: int) -> dict[str, str]:
        return Checkpoint(str(self.checkpoint)).epoch_log(epoch).conf

    def partition_files(self) -> list[str]:
        return sorted(p.name for p in (self.checkpoint / "state" / "0" / "0").iterdir())


ROCKSDB_BASE = {PROVIDER_CLASS: ROCKSDB, CHANGELOG_CHECKPOINTING: "true", SHUFFLE_PARTITIONS: "3"}
ROCKSDB_RUNS = (
    Run("changelog on", {}, 3),
    Run("changelog off", {CHANGELOG_CHECKPOINTING: "false"}, 3),
    Run("changelog on again", {}, 3),
    Run("codec zstd", {CODEC: "zstd"}, 1),
    Run("codec lzf", {CODEC: "lzf"}, 1),
    Run("codec snappy", {CODEC: "snappy"}, 1),
    Run("row checksums on", {ROW_CHECKSUM: "true"}, 2),
    Run("checkpoint format 2", {CHECKPOINT_FORMAT: "2"}, 2),
    Run("shuffle partitions 5", {SHUFFLE_PARTITIONS: "5"}, 2),
)
HDFS_BASE = {SHUFFLE_PARTITIONS: "3"}
HDFS_RUNS = (
    Run("hdfs", {}, 3),
    Run("codec zstd", {CODEC: "zstd"}, 2),
    Run("snapshot after every delta", {MIN_DELTAS: "1"}, 2),
    Run("rare snapshots", {MIN_DELTAS: "50"}, 2),
)


def _live(spark: Any, root: Path, base: dict[str, str], runs: tuple[Run, ...]) -> Iterator[Life]:
    """Run ``runs`` one after the other on one checkpoint while a daemon follows it,
    then start a second daemon on a copy of the finished checkpoint."""
    checkpoint = root / "cp"
    checkpoint.mkdir(parents=True)
    live: DaemonProcess | None = None
    after: DaemonProcess | None = None
    try:
        stream: FileStream | None = None
        epochs: dict[str, list[int]] = {}
        batch = 0
        for run in runs:
            session = Provider(run.name, {**base, **run.conf}).session(spark, no_data_batches=False)
            if stream is None:
                stream = FileStream(session, root / "in", checkpoint, windowed_counts, SCHEMA).start()
                # Followed from before the first commit (the query id is written at start).
                live = DaemonProcess(root / "live", {JOB: str(checkpoint)}).start()
            else:
                stream.spark = session
                stream.start(fresh=False)
            try:
                for _ in range(run.batches):
                    stream.feed(rows(batch))
                    batch += 1
            finally:
                stream.stop()
            epochs[run.name] = list(range(batch - run.batches, batch))
            # Followed across the change: each run's epochs are ingested before the next starts.
            assert live is not None
            live.wait_for_epoch(JOB, batch - 1)
        assert live is not None and stream is not None and stream.committed() == list(range(batch))
        oracle = spark_store(spark, checkpoint, range(batch))
        copy = copy_checkpoint(checkpoint, root / "copy")
        after = DaemonProcess(root / "after", {JOB: str(copy)}).start()
        after.wait_for_epoch(JOB, batch - 1)
        yield Life(checkpoint, epochs, oracle, live, after)
    finally:
        for daemon in (live, after):
            if daemon is not None:
                daemon.stop()


@pytest.fixture(scope="module")
def rocksdb_life(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Life]:
    yield from _live(spark, tmp_path_factory.mktemp("rocksdb-life"), ROCKSDB_BASE, ROCKSDB_RUNS)


@pytest.fixture(scope="module")
def hdfs_life(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Life]:
    yield from _live(spark, tmp_path_factory.mktemp("hdfs-life"), HDFS_BASE, HDFS_RUNS)


def assert_served_as_spark(life: Life, epochs: list[int]) -> int:
    """Both daemons answer every key at each of ``epochs`` as Spark's reader does and
    list no problem; returns how many (epoch, key) answers were compared per daemon."""
    for daemon in (life.live, life.after):
        with daemon.client() as client:
            assert not client.describe(JOB, refresh=True).problems
            assert_store_equals_oracle(client, JOB, life.oracle, epochs)
    compared = len(life.oracle.keys()) * len(epochs)
    assert compared > 0
    return compared


def _around(life: Life, *runs: str) -> list[int]:
    """The epochs of ``runs`` and of the run before the first of them."""
    names = list(life.epochs)
    first = names.index(runs[0])
    chosen = names[max(0, first - 1) : names.index(runs[-1]) + 1]
    return [e for name in chosen for e in life.epochs[name]]


# -- RocksDB ---------------------------------------------------------------------------


def test_every_epoch_of_every_run_is_served_as_spark_reads_it(rocksdb_life: Life) -> None:
    epochs = sorted(rocksdb_life.oracle.states)
    assert epochs == list(range(18))
    assert rocksdb_life.oracle.removes(), "the workload removes no key: deletions go untested"
    assert assert_served_as_spark(rocksdb_life, epochs) == 18 * len(rocksdb_life.oracle.keys())


def test_changelog_checkpointing_off_then_on_is_followed(rocksdb_life: Life) -> None:
    files = rocksdb_life.partition_files()
    for name, changelogs in (("changelog on", True), ("changelog off", False), ("changelog on again", True)):
        for epoch in rocksdb_life.epochs[name]:
            assert (f"{epoch + 1}.changelog" in files) == changelogs, f"{name}, epoch {epoch}: {files}"
    # Without changelogs every version is a snapshot of its own.
    assert all(f"{e + 1}.zip" in files for e in rocksdb_life.epochs["changelog off"])
    assert_served_as_spark(rocksdb_life, _around(rocksdb_life, "changelog off", "changelog on again"))


def test_compression_codec_is_pinned_by_the_checkpoint(rocksdb_life: Life) -> None:
    for epoch in rocksdb_life.oracle.states:
        assert rocksdb_life.conf(epoch)[CODEC] == "lz4", f"epoch {epoch}"
    for name in ("codec zstd", "codec lzf", "codec snappy"):
        for epoch in rocksdb_life.epochs[name]:
            for partition in range(3):
                path = rocksdb_life.checkpoint / "state" / "0" / str(partition) / f"{epoch + 1}.changelog"
                assert path.read_bytes().startswith(LZ4_MAGIC), f"{name}: {path}"
    assert_served_as_spark(rocksdb_life, _around(rocksdb_life, "codec zstd", "codec snappy"))


def test_row_checksums_switched_on_later_stay_off(rocksdb_life: Life) -> None:
    for epoch in rocksdb_life.oracle.states:
        assert rocksdb_life.conf(epoch)[ROW_CHECKSUM] == "false", f"epoch {epoch}"
    assert_served_as_spark(rocksdb_life, _around(rocksdb_life, "row checksums on"))


def test_checkpoint_format_2_on_a_format_1_checkpoint_keeps_format_1(rocksdb_life: Life) -> None:
    files = rocksdb_life.partition_files()
    assert not [f for f in files if f[0].isdigit() and "_" in f], files
    for epoch in rocksdb_life.oracle.states:
        assert CHECKPOINT_FORMAT not in rocksdb_life.conf(epoch)
        commit = (rocksdb_life.checkpoint / "commits" / str(epoch)).read_text().splitlines()
        assert "stateUniqueIds" not in json.loads(commit[1]), f"epoch {epoch}: {commit}"
    assert_served_as_spark(rocksdb_life, _around(rocksdb_life, "checkpoint format 2"))


def test_shuffle_partitions_changed_without_repartition_are_pinned(rocksdb_life: Life) -> None:
    for epoch in rocksdb_life.oracle.states:
        assert rocksdb_life.conf(epoch)[SHUFFLE_PARTITIONS] == "3", f"epoch {epoch}"
    state = rocksdb_life.checkpoint / "state" / "0"
    assert sorted(p.name for p in state.iterdir() if p.name.isdigit()) == ["0", "1", "2"]
    assert rocksdb_life.oracle.partitions() == {0, 1, 2}
    for daemon in (rocksdb_life.live, rocksdb_life.after):
        with daemon.client() as client:
            (store,) = client.describe(JOB, refresh=True).stores
            assert store.num_partitions == 3
    assert_served_as_spark(rocksdb_life, _around(rocksdb_life, "shuffle partitions 5"))


# -- HDFS ------------------------------------------------------------------------------


def test_hdfs_every_epoch_of_every_run_is_served_as_spark_reads_it(hdfs_life: Life) -> None:
    epochs = sorted(hdfs_life.oracle.states)
    assert epochs == list(range(9))
    assert hdfs_life.oracle.removes(), "the workload removes no key: deletions go untested"
    assert assert_served_as_spark(hdfs_life, epochs) == 9 * len(hdfs_life.oracle.keys())


def test_hdfs_compression_codec_is_pinned_by_the_checkpoint(hdfs_life: Life) -> None:
    for epoch in hdfs_life.oracle.states:
        assert hdfs_life.conf(epoch)[CODEC] == "lz4", f"epoch {epoch}"
    for epoch in hdfs_life.epochs["codec zstd"]:
        for partition in range(3):
            path = hdfs_life.checkpoint / "state" / "0" / str(partition) / f"{epoch + 1}.delta"
            assert path.read_bytes().startswith(LZ4_MAGIC), path
    assert_served_as_spark(hdfs_life, _around(hdfs_life, "codec zstd"))


def test_hdfs_snapshot_interval_changed_is_followed(hdfs_life: Life) -> None:
    # Fifty deltas between snapshots: that run's versions are deltas only, read on top
    # of the snapshots the runs before left.
    snapshots = {p.name for p in (hdfs_life.checkpoint / "state" / "0").glob("*/*.snapshot")}
    assert snapshots, "the runs before left no snapshot"
    assert not {f"{e + 1}.snapshot" for e in hdfs_life.epochs["rare snapshots"]} & snapshots
    assert_served_as_spark(hdfs_life, _around(hdfs_life, "snapshot after every delta", "rare snapshots"))


# -- codecs ----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["zstd", "lzf", "snappy"])
def test_a_checkpoint_started_with_another_codec_is_read(
    codec: str, spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    """The codec is fixed when a checkpoint starts, so each is its own checkpoint: the
    RocksDB changelogs it compresses read as Spark's reader has them."""
    conf = {**ROCKSDB_BASE, CODEC: codec}
    session = Provider(codec, conf).session(spark, no_data_batches=False)
    checkpoint = tmp_path / "cp"
    stream = FileStream(session, tmp_path / "in", checkpoint, windowed_counts, SCHEMA).start()
    try:
        for batch in range(3):
            stream.feed(rows(batch))
    finally:
        stream.stop()
    assert Checkpoint(str(checkpoint)).epoch_log(2).conf[CODEC] == codec
    changelog = (checkpoint / "state" / "0" / "0" / "3.changelog").read_bytes()
    assert not changelog.startswith(LZ4_MAGIC)
    daemon = daemon_factory({JOB: str(checkpoint)})
    daemon.wait_for_epoch(JOB, 2)
    oracle = spark_store(spark, checkpoint, range(3))
    with daemon.client() as client:
        assert not client.describe(JOB, refresh=True).problems
        assert_store_equals_oracle(client, JOB, oracle)
