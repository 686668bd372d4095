"""Ingest throughput per provider and freshness, against baselines measured in the same run.

    python bench/ingest.py [--keys 100000] [--epochs 11] [--changed 10000] [--profile hdfs]

For each state store provider (HDFS-backed; RocksDB with changelog checkpointing;
RocksDB with snapshots only) Spark builds an aggregation state (``--keys`` string
keys at epoch 0, then ``--changed`` keys per later epoch), and (d) and (e) run.
Then, with Spark stopped, on one thread of this process:

(a) decode: our reader alone, the whole state of the newest version (the floor);
(b) ingest, full load: epoch 0 into a fresh store (decode + record encoding + write);
(c) ingest, per epoch: each later epoch's changes (delta, changelog, or the
    difference of two snapshots);
(d) (measured while Spark ran) Spark's own statestore reader reading the newest
    version (2 tasks).

(e) freshness: a real daemon follows a RocksDB changelog query with the listener
attached; from the mtime of ``commits/<n>`` to the epoch being queryable.

Ingest runs with the garbage collector tuned as in the daemon's process
(:mod:`epochstate.daemon.gc_tuning`). Rates are wall clock (the target) and, beside
them, CPU time of this process (``time.process_time``), which stays comparable when
other work loads the machine.
``--profile <provider>`` prints the cProfiles of (b) and (c) for that provider.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ["TZ"] = "UTC"
time.tzset()
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from bench.table import print_table  # noqa: E402
from epochstate.client import EpochStateClient  # noqa: E402
from epochstate.daemon.gc_tuning import freeze_startup_objects, tune_for_ingest  # noqa: E402
from epochstate.daemon.ingest.follower import EpochPublisher, JobFollower  # noqa: E402
from epochstate.daemon.runtime import NoRegistry  # noqa: E402
from epochstate.daemon.store.versioned import VersionedStore  # noqa: E402
from epochstate.devtools.local_daemon import LocalDaemon  # noqa: E402
from epochstate.devtools.spark_session import local_session  # noqa: E402

_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
PROVIDERS: dict[str, dict[str, str]] = {
    "hdfs": {"spark.sql.streaming.stateStore.providerClass": _HDFS},
    "rocksdb changelog": {
        "spark.sql.streaming.stateStore.providerClass": _ROCKSDB,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    },
    "rocksdb snapshot": {
        "spark.sql.streaming.stateStore.providerClass": _ROCKSDB,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "false",
    },
}


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


class Query:
    """An aggregation (orders and total per user) fed one JSON file per batch (or, with
    another ``source_format``, whatever files the caller puts in :attr:`source`)."""

    def __init__(
        self,
        spark: Any,
        workdir: Path,
        conf: dict[str, str],
        name: str = "bench",
        source_format: str = "json",
    ) -> None:
        from pyspark.sql import functions as F

        for key, value in conf.items():
            spark.conf.set(key, value)
        self.source = workdir / "in"
        self.source.mkdir(parents=True)
        self.checkpoint = workdir / "cp"
        frame = (
            spark.readStream.format(source_format).schema("user string, amount long").load(str(self.source))
        )
        self.query = (
            frame.groupBy("user")
            .agg(F.count("*").alias("orders"), F.sum("amount").alias("total"))
            .writeStream.format("noop")
            .outputMode("update")
            .queryName(name)
            .option("checkpointLocation", str(self.checkpoint))
            .start()
        )
        self.batches = 0

    def feed(self, users: range | list[int]) -> None:
        path = self.source / f"{self.batches:05d}.json"
        tmp = self.source / f".{self.batches:05d}.tmp"
        amount = self.batches
        tmp.write_text("".join(json.dumps({"user": f"user-{u:08d}", "amount": amount}) + "\n" for u in users))
        tmp.rename(path)
        self.batches += 1
        self.query.processAllAvailable()

    def stop(self) -> None:
        self.query.stop()


def changed_users(epoch: int, keys: int, changed: int) -> list[int]:
    step = max(1, keys // changed)
    return [(i * step + epoch) % keys for i in range(changed)]


def rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds:,.0f}"


def build_checkpoint(spark: Any, workdir: Path, name: str, keys: int, epochs: int, changed: int) -> Path:
    """Spark builds provider ``name``'s checkpoint: ``keys`` keys at epoch 0, then
    ``changed`` keys in each later epoch; the provider's settings are unset after."""
    query = Query(spark, workdir, PROVIDERS[name])
    try:
        for epoch in range(epochs):
            query.feed(range(keys) if epoch == 0 else changed_users(epoch, keys, changed))
    finally:
        query.stop()
        for key in PROVIDERS[name]:
            spark.conf.unset(key)
    return query.checkpoint


def build(spark: Any, workdir: Path, name: str, args: argparse.Namespace) -> tuple[Path, float]:
    """The checkpoint (:func:`build_checkpoint`); then (d): Spark's own statestore reader
    reads the newest version, forced to decode every row (it takes the provider from the
    checkpoint). Returns the checkpoint and the reader's seconds."""
    checkpoint = build_checkpoint(spark, workdir, name, args.keys, args.epochs, args.changed)
    started = time.perf_counter()
    frame = spark.read.format("statestore").option("batchId", args.epochs - 1).load(str(checkpoint))
    frame.write.format("noop").mode("overwrite").save()
    return checkpoint, time.perf_counter() - started


def measure_ingest(
    workdir: Path,
    name: str,
    checkpoint: Path,
    spark_seconds: float,
    args: argparse.Namespace,
    rows: list[tuple[str, ...]],
) -> None:
    """(a), (b), (c) on a checkpoint Spark built, with no Spark running beside them."""
    last = args.epochs - 1
    publisher: EpochPublisher = NoRegistry()
    store = VersionedStore(workdir / "store")
    follower = JobFollower("bench", str(checkpoint), store, publisher, 1000, scratch_dir=workdir)
    # (a) our reader alone.
    follower._discover_stores(last)
    ((_, handle),) = follower.entry.stores.items()
    reader = follower._reader(handle, handle.latest, last)
    started, cpu = time.perf_counter(), time.process_time()
    decoded = sum(1 for _ in reader.full_state(last + 1))
    rows.append(
        (
            name,
            "(a) decode, our reader (floor)",
            f"{decoded:,}",
            rate(decoded, time.perf_counter() - started),
            rate(decoded, time.process_time() - cpu),
        )
    )
    # (b) full load of epoch 0, (c) every later epoch.
    profile = cProfile.Profile() if args.profile == name else None
    cpu = time.process_time()
    if profile:
        profile.enable()
    first = follower.step()
    if profile:
        profile.disable()
    assert first is not None and first.epoch == 0
    rows.append(
        (
            name,
            "(b) ingest, full load",
            f"{first.versions_written:,}",
            rate(first.versions_written, first.seconds),
            rate(first.versions_written, time.process_time() - cpu),
        )
    )
    if profile:
        print(f"profile of (b), full load, {name}:", file=sys.stderr)
        pstats.Stats(profile, stream=sys.stderr).sort_stats("tottime").print_stats(18)
        profile = cProfile.Profile()
    written, seconds = 0, 0.0
    cpu = time.process_time()
    if profile:
        profile.enable()
    while (stats := follower.step()) is not None:
        written += stats.versions_written
        seconds += stats.seconds
    if profile:
        profile.disable()
        print(f"profile of (c), later epochs, {name}:", file=sys.stderr)
        pstats.Stats(profile, stream=sys.stderr).sort_stats("tottime").print_stats(18)
    cpu = time.process_time() - cpu
    rows.append(
        (name, f"(c) ingest, {last} epochs", f"{written:,}", rate(written, seconds), rate(written, cpu))
    )
    store.close()
    rows.append((name, "(d) Spark statestore reader", f"{decoded:,}", rate(decoded, spark_seconds), "-"))


def measure_freshness(spark: Any, workdir: Path, args: argparse.Namespace) -> tuple[float, float, int]:
    from epochstate.spark_plugin import attach

    daemon = LocalDaemon(workdir / "daemon", {}, extra_args=["--retention-epochs", "1000"]).start()
    reporter = attach(spark, daemon.target, checkpoints={"fresh": str(workdir / "cp")})
    try:
        query = Query(spark, workdir, PROVIDERS["rocksdb changelog"], name="fresh")
        try:
            for epoch in range(args.fresh_epochs):
                query.feed(range(args.keys) if epoch == 0 else changed_users(epoch, args.keys, args.changed))
        finally:
            query.stop()
        with EpochStateClient(daemon.target, timeout=120) as client:
            client.wait_for("fresh", args.fresh_epochs - 1, timeout=120)
            epochs = client.epochs("fresh")
        lags = [(e.ingested_at_ms - e.committed_at_ms) / 1000 for e in epochs if e.epoch > 0]
        p50, p99 = percentiles(lags)
        return p50, p99, len(lags)
    finally:
        spark.streams.removeListener(reporter)
        reporter.close()
        daemon.stop()
        for key in PROVIDERS["rocksdb changelog"]:
            spark.conf.unset(key)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=11)
    parser.add_argument("--changed", type=int, default=10_000)
    parser.add_argument("--fresh-epochs", type=int, default=12)
    parser.add_argument("--providers", default=",".join(PROVIDERS))
    parser.add_argument("--profile", choices=sorted(PROVIDERS), default=None)
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="epochstate-bench-ingest-"))
    spark = local_session("bench-ingest", conf={"spark.sql.session.timeZone": "UTC"})
    rows: list[tuple[str, ...]] = []
    names = args.providers.split(",")
    built: dict[str, tuple[Path, float]] = {}
    try:
        try:
            for name in names:
                print(f"building with Spark: {name} ...", file=sys.stderr)
                built[name] = build(spark, workdir / name.replace(" ", "-"), name, args)
            print("freshness: rocksdb changelog, daemon + listener ...", file=sys.stderr)
            fresh_p50, fresh_p99, count = measure_freshness(spark, workdir / "fresh", args)
        finally:
            # Ingest is measured with Spark stopped: its JVM winding down after the
            # queries stopped would take CPU (and caches) from the ingesting thread.
            spark.stop()
        # As the daemon's process does (epochstate.daemon.gc_tuning).
        tune_for_ingest()
        freeze_startup_objects()
        for name in names:
            print(f"ingesting: {name} ...", file=sys.stderr)
            checkpoint, spark_seconds = built[name]
            measure_ingest(workdir / name.replace(" ", "-"), name, checkpoint, spark_seconds, args, rows)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print()
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"state: {args.keys:,} string keys, {args.epochs} epochs, {args.changed:,} keys changed per later "
        f"epoch; one thread; {os.cpu_count()} cores; load average {load}"
    )
    print_table(("provider", "measurement", "rows", "rows/s", "rows/CPU-s"), rows)
    print()
    print(
        f"(e) freshness, commit -> queryable (rocksdb changelog, {count} epochs of {args.changed:,} changes):"
    )
    print(f"    p50 {fresh_p50:.3f} s, p99 {fresh_p99:.3f} s")
    print()
    print("targets:")
    ingest = [r for r in rows if r[1].startswith("(b)") or r[1].startswith("(c)")]
    worst = min(float(r[3].replace(",", "")) for r in ingest)
    verdict = "met" if worst >= 100_000 else "NOT met"
    print(f"  ingest >= 100,000 rows/s per core (slowest row): {worst:,.0f}  {verdict}")
    verdict = "met" if fresh_p50 <= 0.5 else "NOT met"
    print(f"  freshness p50 <= 0.5 s:                         {fresh_p50:.3f} s  {verdict}")


if __name__ == "__main__":
    main()
