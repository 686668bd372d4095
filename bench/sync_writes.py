"""What ``sync_writes`` costs ingest: rows/s with the WAL fsynced per epoch and without, same run.

    python bench/sync_writes.py [--keys 100000] [--epochs 21] [--changed 10000,1000] [--repeats 3]

Spark builds one aggregation checkpoint per ``--changed`` size (HDFS-backed
provider: ``--keys`` keys at epoch 0, then that many changed keys per epoch).
Then, with Spark stopped, one thread ingests every later epoch into a fresh store
with ``sync_writes`` on and off, alternating ``--repeats`` times so that both see
the same machine; the table gives each setting's best run and the cost of sync.
Several sizes, because what the fsync adds to an epoch depends on how many bytes
the epoch writes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ["TZ"] = "UTC"
time.tzset()
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from bench.ingest import build_checkpoint  # noqa: E402
from bench.table import print_table  # noqa: E402
from epochstate.daemon.gc_tuning import freeze_startup_objects, tune_for_ingest  # noqa: E402
from epochstate.daemon.ingest.follower import JobFollower  # noqa: E402
from epochstate.daemon.runtime import NoRegistry  # noqa: E402
from epochstate.daemon.store.versioned import StoreOptions, VersionedStore  # noqa: E402
from epochstate.devtools.spark_session import local_session  # noqa: E402


def ingest(workdir: Path, checkpoint: Path, sync: bool) -> tuple[int, float, int]:
    """Versions written by the epochs after the first, their ingest seconds, epochs."""
    path = workdir / "store"
    shutil.rmtree(path, ignore_errors=True)
    store = VersionedStore(path, StoreOptions(sync_writes=sync))
    follower = JobFollower("bench", str(checkpoint), store, NoRegistry(), 1000, scratch_dir=workdir)
    try:
        assert follower.step() is not None  # the full load of epoch 0 is not what sync changes
        written, seconds, epochs = 0, 0.0, 0
        while (stats := follower.step()) is not None:
            written += stats.versions_written
            seconds += stats.seconds
            epochs += 1
        return written, seconds, epochs
    finally:
        store.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=21)
    parser.add_argument("--changed", default="10000,1000", help="changed keys per epoch, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="epochstate-bench-sync-"))
    sizes = [int(c) for c in args.changed.split(",")]
    rows: list[tuple[str, ...]] = []
    try:
        checkpoints = {}
        spark = local_session("bench-sync", conf={"spark.sql.session.timeZone": "UTC"})
        for changed in sizes:
            print(f"building with Spark: {changed:,} changed keys per epoch ...", file=sys.stderr)
            checkpoints[changed] = build_checkpoint(
                spark, workdir / f"cp-{changed}", "hdfs", args.keys, args.epochs, changed
            )
        tune_for_ingest()
        freeze_startup_objects()
        for changed in sizes:
            best: dict[bool, float] = {}
            per_epoch: dict[bool, float] = {}
            for _ in range(args.repeats):
                for sync in (True, False):
                    written, seconds, epochs = ingest(workdir / f"run-{changed}", checkpoints[changed], sync)
                    if written / seconds > best.get(sync, 0.0):
                        best[sync] = written / seconds
                        per_epoch[sync] = seconds / epochs
            for sync in (True, False):
                rows.append(
                    (
                        f"{changed:,}",
                        "on" if sync else "off",
                        f"{best[sync]:,.0f}",
                        f"{per_epoch[sync] * 1000:.1f}",
                        f"{(1 - best[True] / best[False]) * 100:.0f}%" if sync else "",
                    )
                )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print()
    print(
        f"{args.keys:,} keys, {args.epochs - 1} incremental epochs ingested per run, best of {args.repeats} "
        f"alternating runs; one thread; {os.cpu_count()} cores; load average {load}"
    )
    print_table(("changed keys/epoch", "sync_writes", "rows/s", "ms/epoch", "cost of sync"), rows)


if __name__ == "__main__":
    main()
