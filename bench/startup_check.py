"""What the store's start-up check costs, against opening alone and a full read, same run.

    python bench/startup_check.py [--jobs 2] [--keys 500000] [--epochs 100] [--changed 10000] [--repeats 3]

Builds a store of ``--jobs`` jobs, each with ``--keys`` keys at epoch 0 and
``--changed`` changed keys in each of ``--epochs - 1`` later epochs (all retained),
flushed and compacted as a daemon's store is after a while. Then, closed and
reopened ``--repeats`` times, the best of: RocksDB's open alone, the start-up check
(``daemon/store/integrity.py``: every record but the versions and the garbage index,
checksums verified, no block cache) and, for scale, a full read of every key with
checksums verified (what checking the versions at start-up would cost). The page
cache is warm in every run, so the disk is not what is measured.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rocksdict import Rdict, ReadOptions

from bench.table import print_table
from epochstate.daemon.codec import keycodec
from epochstate.daemon.store import integrity
from epochstate.daemon.store.descriptors import EpochRecord, SourceRange
from epochstate.daemon.store.placement import StoreChanges
from epochstate.daemon.store.versioned import StoreOptions, VersionedStore


def build(path: Path, jobs: int, keys: int, epochs: int, changed: int) -> int:
    """The store; the number of versions written."""
    store = VersionedStore(path)
    written = 0
    for j in range(jobs):
        job = store.add_job(f"job-{j}", f"/cp/{j}", f"query-{j}", "hdfs")
        sid = store.add_store(job.name, 0, "agg", "default", 200, "{}", "{}").store_id
        for epoch in range(epochs):
            users = (
                range(keys) if epoch == 0 else range(epoch * changed % keys, epoch * changed % keys + changed)
            )
            changes: StoreChanges = {
                keycodec.encode_fields((f"customer-{u % keys:012d}", "eu-west")): keycodec.encode(
                    (epoch, u, random.randbytes(24).hex(), 12.5 * u)
                )
                for u in users
            }
            source = SourceRange(
                "kafka[orders]", f'{{"orders":{{"0":{epoch}}}}}', f'{{"orders":{{"0":{epoch + 1}}}}}'
            )
            record = EpochRecord(epoch, epoch, epoch, 0, (source,))
            written += store.apply_epoch(
                job, epoch, {sid: changes}, record, fresh=epoch == 0
            ).versions_written
    store.db.compact_range(None, None)
    store.close()
    return written


def full_read(db: Rdict) -> int:
    options = ReadOptions()
    options.set_verify_checksums(True)
    options.fill_cache(False)  # type: ignore[call-arg]  # rocksdict's stub omits the flag it takes
    it = db.iter(options)
    it.seek_to_first()
    count = 0
    while it.valid():
        it.value()
        count += 1
        it.next()
    it.status()
    return count


def best(runs: int, action: Callable[[], object]) -> tuple[float, object]:
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--keys", type=int, default=500_000)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--changed", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    try:
        path = workdir / "store"
        started = time.perf_counter()
        versions = build(path, args.jobs, args.keys, args.epochs, args.changed)
        print(f"built {versions:,} versions in {time.perf_counter() - started:.0f} s")
        size = sum(p.stat().st_size for p in path.glob("*.sst")) / 2**20
        options = StoreOptions().to_options()

        def opened() -> Rdict:
            return Rdict(str(path), options)

        def timed_open() -> None:
            opened().close()

        def timed(check: Callable[[Rdict], int]) -> tuple[float, int]:
            db = opened()
            try:
                start = time.perf_counter()
                count = check(db)
                return time.perf_counter() - start, count
            finally:
                db.close()

        open_s, _ = best(args.repeats, timed_open)
        check_s, records = min(timed(integrity.check_records) for _ in range(args.repeats))
        full_s, keys = min(timed(full_read) for _ in range(args.repeats))
        print_table(
            ("store (SST MB)", "versions", "what", "records read", "ms", "vs open"),
            [
                (f"{size:.0f}", f"{versions:,}", "open (baseline)", "-", f"{open_s * 1e3:.1f}", "1.00x"),
                (
                    "",
                    "",
                    "start-up check",
                    f"{records:,}",
                    f"{check_s * 1e3:.2f}",
                    f"{check_s / open_s:.2f}x",
                ),
                (
                    "",
                    "",
                    "full read (not done)",
                    f"{keys:,}",
                    f"{full_s * 1e3:.0f}",
                    f"{full_s / open_s:.0f}x",
                ),
            ],
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
