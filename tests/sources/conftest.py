"""Fixtures for the sources tests: one SparkSession, and checkpoints written by real
streaming queries over a rich mix of types."""

from __future__ import annotations

import datetime
import decimal
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from epochstate.devtools.python_workers import worker_python

# PySpark hands timestamps back as naive local datetimes; make local time UTC before
# the JVM or any datetime conversion starts.
os.environ["TZ"] = "UTC"
time.tzset()
os.environ["PYSPARK_PYTHON"] = worker_python()
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


BATCHES = 4
BULK_ROWS = 1500


def _input_rows(batch: int) -> list[dict[str, Any]]:
    """Six rows per batch; ``l``, ``s`` and ``ts`` repeat so keys get updated. The
    first batch also has bulk rows, so some state files span several LZ4 blocks."""
    utc = datetime.timezone.utc
    start = datetime.datetime(2024, 1, 1, tzinfo=utc)
    rows: list[dict[str, Any]] = []
    if batch == 0:
        rows.extend(
            {"l": 1000 + n, "s": "bulk" * 10, "ts": start + datetime.timedelta(seconds=n % 6)}
            for n in range(BULK_ROWS)
        )
    for j in range(6):
        i = batch * 3 + j
        rows.append(
            {
                "l": i % 4 if j else None,
                "i": -i,
                "sh": i % 3,
                "by": (i % 2) - 1,
                "s": ["", "x", "ü€\U0001f600", None][i % 4],
                "b": [True, False, None][i % 3],
                "d": i * 1.25 - 3,
                "f": i * 0.5,
                "dec": decimal.Decimal(i * 137 - 500) / 100,
                "big": decimal.Decimal(-(10**20) + i * 12345) / 100000 if i % 5 else None,
                "dt": datetime.date(1969, 12, 25) + datetime.timedelta(days=i),
                "ts": start + datetime.timedelta(seconds=7 * i),
                "ntz": datetime.datetime(1960, 3, 4, 5, 6, 7, 891011) + datetime.timedelta(days=i % 2),
                "bin": bytes(range(i % 5)),
                "st": {"a": i, "b": None if i % 2 else "z"} if i % 4 != 3 else None,
                "arr": [i, None, -i] if i % 3 else ([] if i % 2 else None),
                "sarr": ["a", None, "bcdefghijk" * 3][: i % 4],
                "aa": [[i, None], None, []] if i % 2 else None,
                "m": [(f"k{i}", i), ("z", None)] if i % 2 else None,
            }
        )
    return rows


def _write_batch(directory: Path, batch: int) -> None:
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    schema = pa.schema(
        [
            ("l", pa.int64()),
            ("i", pa.int32()),
            ("sh", pa.int16()),
            ("by", pa.int8()),
            ("s", pa.string()),
            ("b", pa.bool_()),
            ("d", pa.float64()),
            ("f", pa.float32()),
            ("dec", pa.decimal128(10, 2)),
            ("big", pa.decimal128(30, 5)),
            ("dt", pa.date32()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("ntz", pa.timestamp("us")),
            ("bin", pa.binary()),
            ("st", pa.struct([("a", pa.int32()), ("b", pa.string())])),
            ("arr", pa.list_(pa.int64())),
            ("sarr", pa.list_(pa.string())),
            ("aa", pa.list_(pa.list_(pa.int64()))),
            ("m", pa.map_(pa.string(), pa.int32())),
        ]
    )
    table = pa.Table.from_pylist(_input_rows(batch), schema=schema)
    # The file source must never see a half-written file.
    temp = directory / f".b{batch}.parquet.tmp"
    pq.write_table(table, temp)
    temp.rename(directory / f"b{batch}.parquet")


@pytest.fixture(scope="session")
def checkpoints(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Checkpoints of four HDFS-backed queries fed the same four input files:

    * ``plain``: a groupBy over struct/array/decimal/boolean/string keys with
      aggregates whose buffers hold values of every type;
    * ``window``: a windowed count with a watermark, so old windows are removed;
    * ``dedup``: dropDuplicates over 66 columns with a watermark (a ``void`` value,
      removals);
    * ``join``: a stream-stream inner join (four named stores per partition).
    """
    base = tmp_path_factory.mktemp("sources")
    source = base / "in"
    source.mkdir()
    for batch in range(BATCHES):
        _write_batch(source, batch)
    # Snapshots after every two deltas (SQL confs are per session; the maintenance
    # interval only counts if this is the JVM's first stateful query, see ``spark``).
    frames = _stateful_frames(_input_stream(spark.newSession(), source))
    names = ("plain", "window", "dedup", "join")
    paths = {name: base / f"cp_{name}" for name in names}
    _run_to_end([(paths[name], *frames[name]) for name in names])
    return paths


def _input_stream(session: Any, source: Path) -> Any:
    """One input file per epoch, read by ``session`` (snapshots every two versions)."""
    session.conf.set("spark.sql.streaming.stateStore.minDeltasForSnapshot", "2")
    session.conf.set("spark.sql.streaming.stateStore.maintenanceInterval", "200ms")
    schema = session.read.parquet(str(source)).schema
    return session.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(source))


def _stateful_frames(df: Any) -> dict[str, tuple[Any, str]]:
    """The stateful queries over the input stream ``df``, by name, with output modes."""
    from pyspark.sql import functions as F

    plain = df.groupBy("sh", "s", "dec", "b", "st", "arr").agg(
        F.count("*").alias("n"),
        F.sum("l"),
        F.max("big"),
        F.min("dt"),
        F.first("m"),
        F.first("sarr"),
        F.first("st"),
        F.first("aa"),
        F.max("bin"),
        F.sum("dec"),
        F.sum("big"),
        F.max("f"),
        F.avg("d"),
        F.max("ts"),
        F.max("ntz"),
        F.max("by"),
        F.collect_list("s"),
        # Arrays of every element width, and a map with struct values.
        F.first(
            F.struct(
                *[F.array(c, c) for c in ("b", "by", "sh", "i", "f", "dt", "dec", "big", "bin")],
                F.array("ts", "ntz"),
                F.create_map(F.lit("k"), F.col("st")),
            )
        ),
    )
    window = (
        df.withWatermark("ts", "10 seconds")
        .groupBy(F.window("ts", "10 seconds"), "by", "bin", "big", "dt", "f", "d", "i", "l")
        .agg(F.count("*").alias("n"), F.last("arr"))
    )
    # 66 key fields: a null bitset of two words.
    wide = df.select("l", "s", "ts", "ntz", *[(F.col("i") + k).alias(f"w{k}") for k in range(62)])
    dedup = wide.withWatermark("ts", "15 seconds").dropDuplicates()
    left = df.select("l", "s", "ts").withWatermark("ts", "10 seconds").alias("a")
    right = df.select("l", "d", "ts").withWatermark("ts", "10 seconds").alias("b")
    join = left.join(
        right,
        F.expr("a.l = b.l AND a.ts BETWEEN b.ts - INTERVAL 5 SECONDS AND b.ts + INTERVAL 5 SECONDS"),
    )
    # Session windows keep their state under a prefix key (the grouping column).
    session = (
        df.withWatermark("ts", "10 seconds")
        .groupBy(F.session_window("ts", "8 seconds"), "sh")
        .agg(F.count("*").alias("n"), F.max("s"))
    )
    return {
        "plain": (plain, "update"),
        "window": (window, "update"),
        "dedup": (dedup, "append"),
        "join": (join, "append"),
        "session": (session, "append"),
    }


def _run_to_end(queries: list[tuple[Path, Any, str]]) -> None:
    """Run ``(checkpoint, frame, output mode)`` queries concurrently until their input ends."""
    started = []
    try:
        for checkpoint, frame, mode in queries:
            writer = (
                frame.writeStream.format("noop")
                .outputMode(mode)
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
            )
            started.append(writer.start())
        for query in started:
            query.awaitTermination(120)
    finally:
        for query in started:
            query.stop()


ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CHANGELOG_CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
FORMAT_VERSION_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"
# Checkpoint name -> (query, changelog checkpointing, state checkpoint format version).
ROCKSDB_RUNS = {
    "window-changelog": ("window", True, 1),
    "window-zip": ("window", False, 1),
    "dedup-changelog": ("dedup", True, 1),
    "dedup-zip": ("dedup", False, 1),
    "session-changelog": ("session", True, 1),
    "window-format2": ("window", True, 2),
    "window-format2-zip": ("window", False, 2),
    "dedup-format2": ("dedup", True, 2),
}


@pytest.fixture(scope="session")
def rocksdb_checkpoints(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Checkpoints of queries run with the RocksDB provider on the same input as
    :func:`checkpoints` (see :data:`ROCKSDB_RUNS`): with changelog checkpointing on
    (``<v>.changelog``, a ``<v>.zip`` every two versions) or off (a ``<v>.zip`` per
    version), and with state checkpoint format version 2 (files named by unique ids)."""
    base = tmp_path_factory.mktemp("rocksdb_runs")
    source = base / "in"
    source.mkdir()
    for batch in range(BATCHES):
        _write_batch(source, batch)
    frames: dict[tuple[bool, int], dict[str, tuple[Any, str]]] = {}
    runs = []
    paths = {}
    for name, (query, changelog, version) in ROCKSDB_RUNS.items():
        if (changelog, version) not in frames:
            session = spark.newSession()
            session.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
            session.conf.set(CHANGELOG_CONF, str(changelog).lower())
            session.conf.set(FORMAT_VERSION_CONF, str(version))
            frames[changelog, version] = _stateful_frames(_input_stream(session, source))
        paths[name] = base / f"cp_{name}"
        runs.append((paths[name], *frames[changelog, version][query]))
    _run_to_end(runs)
    return paths


@pytest.fixture(scope="session")
def rocksdb_checkpoint(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint of a small aggregation run with the RocksDB state store provider."""
    from pyspark.sql import functions as F

    base = tmp_path_factory.mktemp("rocksdb")
    source = base / "in"
    source.mkdir()
    _write_batch(source, 0)
    schema = spark.read.parquet(str(source)).schema
    session = spark.newSession()
    session.conf.set(
        "spark.sql.streaming.stateStore.providerClass",
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    )
    df = session.readStream.schema(schema).parquet(str(source))
    query = (
        df.groupBy("s")
        .agg(F.count("*"))
        .writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(base / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
    finally:
        query.stop()
    return base / "cp"
