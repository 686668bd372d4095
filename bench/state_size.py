"""State size: ingest, Get and disk of a large state against a small one, in the same run.

    python bench/state_size.py [--keys-large 10000000] [--keys-small 100000] [--changed 10000]
                               [--epochs 12] [--provider "rocksdb changelog"] [--calls 4000]

The targets, the large state against the small one: ingest time per epoch
(``--changed`` keys) <= 1.2x; Get p50 unchanged (<= 1.1x: this machine's noise);
the daemon's store on disk <= 2x Spark's own checkpoint for the same retained epochs.

For each size Spark builds bench/ingest.py's aggregation (string keys ``user-%08d``;
epoch 0 has every key, each later epoch changes ``--changed`` of them) with
``--provider``. Each epoch's input is Parquet that Spark itself writes from
``spark.range`` (no row passes through Python), moved into the query's file source.

Then, with Spark stopped, on one thread of this process (``JobFollower`` and
``VersionedStore`` as the daemon runs them, the garbage collector tuned as in the
daemon): epoch 0 of each size is loaded in full; both stores are flushed and their
compactions let finish; the later epochs are ingested alternately small and large,
so that a change in the machine's load falls on both alike. Per epoch: wall clock
and CPU time of this process; the medians are compared.

Disk: each whole store directory after a flush (the memtable in SST files, as a
daemon leaves it once it has run a while), then after a full manual compaction,
against every file of Spark's checkpoint ``state/`` directory (``.crc`` files
included). Both hold every epoch: the daemon retains 1000, Spark its default 100.

Get: each store is then opened by a real daemon process (``epochstate daemon``
following the same checkpoint; it finds every epoch ingested) and single-key Gets
of random keys pinned to one epoch go through the gRPC stub over TCP, the two
daemons timed in interleaved rounds.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# ingest sets TZ and PYSPARK_PYTHON when imported, before Spark starts.
from bench.ingest import PROVIDERS, Query, percentiles
from bench.lookup import cycle_calls, interleaved
from bench.table import print_table
from epochstate.client import EpochStateClient
from epochstate.daemon.gc_tuning import freeze_startup_objects, tune_for_ingest
from epochstate.daemon.ingest.follower import JobFollower
from epochstate.daemon.runtime import NoRegistry
from epochstate.daemon.store.versioned import StoreOptions, VersionedStore
from epochstate.devtools.local_daemon import LocalDaemon
from epochstate.devtools.spark_session import local_session
from epochstate.v1 import epochstate_pb2 as pb

JOB = "bench"
RETENTION = 1000


def feed(spark: Any, query: Query, stage: Path, keys: int, changed: int) -> None:
    """One epoch: every key (epoch 0) or ``changed`` keys spread over all of them, the
    same keys as bench/ingest.py's ``changed_users``; Spark writes the Parquet."""
    epoch = query.batches
    count, step = (keys, 1) if epoch == 0 else (changed, max(1, keys // changed))
    out = stage / f"{epoch:05d}"
    frame = spark.range(0, count, 1, 2).selectExpr(
        f"format_string('user-%08d', (id * {step} + {epoch}) % {keys}) AS user",
        f"CAST({epoch} AS BIGINT) AS amount",
    )
    frame.write.parquet(str(out))
    for part in sorted(out.glob("part-*.parquet")):
        part.rename(query.source / f"{epoch:05d}-{part.name}")
    query.batches += 1
    query.query.processAllAvailable()


def build(
    spark: Any, workdir: Path, provider: str, keys: int, args: argparse.Namespace
) -> tuple[Path, float]:
    """Spark builds the checkpoint; returns it and the seconds Spark took for epoch 0."""
    query = Query(spark, workdir, PROVIDERS[provider], source_format="parquet")
    try:
        started = time.perf_counter()
        feed(spark, query, workdir / "stage", keys, args.changed)
        first = time.perf_counter() - started
        for _ in range(1, args.epochs):
            feed(spark, query, workdir / "stage", keys, args.changed)
        if "changelog" in provider:
            wait_for_snapshot(query.checkpoint, args.snapshot_wait)
    finally:
        query.stop()
        for key in PROVIDERS[provider]:
            spark.conf.unset(key)
    return query.checkpoint, first


def wait_for_snapshot(checkpoint: Path, timeout: float) -> None:
    """Let the running query's maintenance thread upload a snapshot of the state: a
    job that runs for a while keeps one in its checkpoint beside the changelogs, so
    Spark's own checkpoint is measured in the state it stays in, not in the minute
    before its first upload."""
    deadline = time.monotonic() + timeout
    while not any((checkpoint / "state").rglob("*.zip")):
        if time.monotonic() > deadline:
            print(
                f"no snapshot uploaded within {timeout:.0f} s: state/ holds changelogs only", file=sys.stderr
            )
            return
        time.sleep(1)


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def settle(store: VersionedStore) -> None:
    """Flush the memtable and wait for RocksDB's background compactions to finish."""
    store.db.flush()
    while any(
        store.db.property_int_value(name)
        for name in (
            "rocksdb.compaction-pending",
            "rocksdb.num-running-compactions",
            "rocksdb.num-running-flushes",
        )
    ):
        time.sleep(0.2)


class Size:
    """One state size: its checkpoint, its store under a daemon's data directory, its figures."""

    def __init__(
        self, workdir: Path, keys: int, checkpoint: Path, spark_first: float, options: StoreOptions
    ) -> None:
        self.keys, self.checkpoint, self.spark_first = keys, checkpoint, spark_first
        self.data_dir = workdir / "daemon"
        self.store = VersionedStore(self.data_dir / "store", options)
        self.follower = JobFollower(
            JOB, str(checkpoint), self.store, NoRegistry(), RETENTION, scratch_dir=workdir
        )
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.written: list[int] = []
        self.figures: dict[str, float] = {}

    def step(self) -> bool:
        # Wall and CPU over the same span: the whole step, finding the next epoch included.
        wall, cpu = time.perf_counter(), time.process_time()
        stats = self.follower.step()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if stats is None:
            return False
        self.wall.append(wall)
        self.cpu.append(cpu)
        self.written.append(stats.versions_written)
        return True

    def measure_disk(self) -> None:
        self.figures["spark"] = tree_bytes(self.checkpoint / "state")
        # Spark's RocksDB provider uploads a snapshot (.zip) from a maintenance thread
        # (every minDeltasForSnapshot versions, at most once a minute): whether one is in
        # state/ yet depends on timing, so the table says.
        self.figures["snapshots"] = sum(1 for _ in (self.checkpoint / "state").rglob("*.zip"))
        settle(self.store)
        self.figures["flushed"] = tree_bytes(self.data_dir / "store")
        self.store.db.compact_range(None, None)
        settle(self.store)
        self.figures["compacted"] = tree_bytes(self.data_dir / "store")
        self.store.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys-large", type=int, default=10_000_000)
    parser.add_argument("--keys-small", type=int, default=100_000)
    parser.add_argument("--changed", type=int, default=10_000)
    parser.add_argument("--epochs", type=int, default=12, help="epoch 0 (every key) and epochs-1 later ones")
    parser.add_argument("--provider", choices=sorted(PROVIDERS), default="rocksdb changelog")
    parser.add_argument(
        "--newest-keys",
        type=int,
        default=StoreOptions().newest_keys_per_store,
        help="keys per store whose newest version ingest remembers (the daemon's ingest_known_keys)",
    )
    parser.add_argument("--calls", type=int, default=4000, help="timed Gets per size")
    parser.add_argument(
        "--snapshot-wait",
        type=float,
        default=300,
        help="seconds to let Spark upload a snapshot of a changelog-checkpointed state before stopping",
    )
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="epochstate-bench-size-"))
    sizes: list[Size] = []
    daemons: list[LocalDaemon] = []
    clients: list[EpochStateClient] = []
    # The JVM's heap holds epoch 0's aggregation (10M groups) before the state store does.
    spark = local_session(
        "bench-state-size",
        conf={
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": "4g",
            # Snapshots are uploaded by the maintenance thread (default: once a minute).
            "spark.sql.streaming.stateStore.maintenanceInterval": "5s",
        },
    )
    try:
        built = []
        try:
            for keys in (args.keys_small, args.keys_large):
                print(f"building with Spark: {keys:,} keys, {args.provider} ...", file=sys.stderr)
                built.append(
                    (
                        workdir / f"k{keys}",
                        keys,
                        *build(spark, workdir / f"k{keys}", args.provider, keys, args),
                    )
                )
        finally:
            spark.stop()
        tune_for_ingest()
        freeze_startup_objects()
        options = StoreOptions(newest_keys_per_store=args.newest_keys)
        sizes = [Size(*b, options) for b in built]
        for size in sizes:
            print(f"ingesting epoch 0 in full: {size.keys:,} keys ...", file=sys.stderr)
            assert size.step()
            settle(size.store)
        print("ingesting later epochs, small and large alternately ...", file=sys.stderr)
        while [size.step() for size in sizes] == [True, True]:
            pass
        for size in sizes:
            print(f"disk: {size.keys:,} keys ...", file=sys.stderr)
            size.measure_disk()

        last = args.epochs - 1
        pinned = max(0, last - 1)
        rng = random.Random(1)
        calls: dict[int, Callable[[], Any]] = {}
        for size in sizes:
            daemon = LocalDaemon(
                size.data_dir, {JOB: str(size.checkpoint)}, extra_args=["--retention-epochs", str(RETENTION)]
            ).start(timeout=300)
            daemons.append(daemon)
            client = EpochStateClient(daemon.target, timeout=60)
            clients.append(client)
            client.wait_for(JOB, last, timeout=300)
            requests = [
                pb.GetRequest(
                    store=pb.StoreRef(job=JOB),
                    key=pb.Row(fields=[pb.Value(string=f"user-{rng.randrange(size.keys):08d}")]),
                    epoch=pb.EpochSelector(exact=pinned),
                )
                for _ in range(2000)
            ]
            assert client.stub.Get(requests[0]).record.HasField("value")
            calls[size.keys] = cycle_calls(client.stub.Get, requests)
        load_before = os.getloadavg()[0]
        for keys, samples in interleaved(calls, args.calls, rounds=10).items():
            size = next(s for s in sizes if s.keys == keys)
            size.figures["get p50"], size.figures["get p99"] = percentiles(samples)
        load_after = os.getloadavg()[0]
    finally:
        for client in clients:
            client.close()
        for daemon in daemons:
            daemon.stop()
        for size in sizes:
            size.store.close()
        shutil.rmtree(workdir, ignore_errors=True)

    small, large = sizes
    later = len(small.wall) - 1

    def row(name: str, value: Callable[[Size], float], fmt: str, ratio: bool = True) -> tuple[str, ...]:
        a, b = value(small), value(large)
        return (name, format(a, fmt), format(b, fmt), f"{b / a:.2f}x" if ratio else "")

    mb = 1 / (1 << 20)
    rows = [
        row("Spark: epoch 0 (s)", lambda s: s.spark_first, ",.1f"),
        row("ingest, epoch 0 in full (s wall)", lambda s: s.wall[0], ",.2f"),
        row("ingest, epoch 0 in full (s CPU)", lambda s: s.cpu[0], ",.2f"),
        row(
            f"ingest per later epoch, median of {later} (ms wall)",
            lambda s: statistics.median(s.wall[1:]) * 1e3,
            ",.1f",
        ),
        row(
            f"ingest per later epoch, median of {later} (ms CPU)",
            lambda s: statistics.median(s.cpu[1:]) * 1e3,
            ",.1f",
        ),
        row(
            f"ingest per later epoch, mean of {later} (ms CPU)",
            lambda s: statistics.mean(s.cpu[1:]) * 1e3,
            ",.1f",
        ),
        (
            "  min-max (ms wall)",
            *(f"{min(s.wall[1:]) * 1e3:,.1f}-{max(s.wall[1:]) * 1e3:,.1f}" for s in sizes),
            "",
        ),
        (
            "  min-max (ms CPU)",
            *(f"{min(s.cpu[1:]) * 1e3:,.1f}-{max(s.cpu[1:]) * 1e3:,.1f}" for s in sizes),
            "",
        ),
        row("versions written per later epoch (median)", lambda s: statistics.median(s.written[1:]), ",.0f"),
        row("Get, pinned epoch, TCP: p50 (µs)", lambda s: s.figures["get p50"] * 1e6, ",.0f"),
        row("Get, pinned epoch, TCP: p99 (µs)", lambda s: s.figures["get p99"] * 1e6, ",.0f"),
        row(
            f"Spark checkpoint state/, {args.epochs} epochs (MiB)", lambda s: s.figures["spark"] * mb, ",.1f"
        ),
        row("  snapshots in it (.zip files)", lambda s: s.figures["snapshots"], ",.0f", ratio=False),
        row("daemon store, flushed (MiB)", lambda s: s.figures["flushed"] * mb, ",.1f"),
        row("daemon store, fully compacted (MiB)", lambda s: s.figures["compacted"] * mb, ",.1f"),
        row(
            "  flushed / Spark state/",
            lambda s: s.figures["flushed"] / s.figures["spark"],
            ".2f",
            ratio=False,
        ),
        row(
            "  compacted / Spark state/",
            lambda s: s.figures["compacted"] / s.figures["spark"],
            ".2f",
            ratio=False,
        ),
    ]
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print()
    print(
        f"{args.epochs} epochs, {args.changed:,} keys changed per later epoch; "
        f"Spark provider {args.provider}, 2 shuffle partitions; ingest on one thread, "
        f"newest versions of {args.newest_keys:,} keys per store remembered; "
        f"Gets pinned to epoch {pinned}, {args.calls:,} per size; {os.cpu_count()} cores; "
        f"load average {load} (1 min: {load_before:.1f} -> {load_after:.1f} during the Gets)"
    )
    print_table(("measurement", f"{small.keys:,} keys", f"{large.keys:,} keys", "large/small"), rows)
    print()
    print("targets:")
    for unit, average, (big, little) in (
        ("wall", statistics.median, (large.wall, small.wall)),
        ("CPU", statistics.median, (large.cpu, small.cpu)),
        ("CPU, mean", statistics.mean, (large.cpu, small.cpu)),
    ):
        ratio = average(big[1:]) / average(little[1:])
        verdict = "met" if ratio <= 1.2 else "NOT met"
        print(f"  ingest per epoch, large/small <= 1.2x ({unit + '):':11s}  {ratio:.2f}x  {verdict}")
    ratio = large.figures["get p50"] / small.figures["get p50"]
    print(
        f"  Get p50, large/small <= 1.1x (unchanged):  {ratio:.2f}x  {'met' if ratio <= 1.1 else 'NOT met'}"
    )
    for state in ("flushed", "compacted"):
        ratio = large.figures[state] / large.figures["spark"]
        verdict = "met" if ratio <= 2 else "NOT met"
        print(f"  disk <= 2x Spark's state/ ({large.keys:,} keys, {state}):  {ratio:.2f}x  {verdict}")


if __name__ == "__main__":
    main()
