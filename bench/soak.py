"""Soak: ingest plus mixed reads for a long time; do the daemon's resources stay bounded?

    python bench/soak.py [--minutes 30] [--sample-seconds 60] [--retention-epochs 20] [--aligned]

A real Spark query (the rate source, counts and sums over ``--keys`` users, the
RocksDB provider with changelog checkpointing, a ``--trigger-seconds`` trigger)
commits epochs continuously into its checkpoint; the listener pushes each commit
to a real daemon process registered in a real ZooKeeper, which keeps
``--retention-epochs`` epochs, so older ones retire all the time. ``--readers``
threads read meanwhile: the first one in turn Get latest and a waiting Get of the
next epoch; the others Get latest, Get at an exact recent epoch, MultiGet of 50
keys and a Scan of 200 keys in pages of 50 (each page a read).

With ``--aligned`` the workload is instead two chained jobs and reads pinned
with ``aligned_with`` (see ``soak_aligned.py``): the daemon then watches the
subject in ZooKeeper, and the subject's epoch znodes are counted too.

Every ``--sample-seconds`` it records the daemon's RSS and open file descriptors,
the bytes of the store's ``*.sst`` files (RocksDB's live files: compaction deletes
the others) and write-ahead logs, ZooKeeper's watch count (the ``wchs``
four-letter word) and the job's epoch znodes, the newest ingested epoch and the
reads done; and, not judged but explaining the others, compactions finished and
the block cache's usage (from RocksDB's ``LOG``, dumped every 10 minutes). At the
end it prints the table and, per resource, a verdict: *bounded* when the largest
sample of the last third is at most ``--margin`` above the largest of the first
third, with the growth rate (least squares) over the last two thirds.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from bench.readers import ReaderThreads
from bench.soak_aligned import SUBJECT, WRITER, AlignedChain, AlignedReaders
from bench.table import print_table
from epochstate.client import EpochStateClient
from epochstate.core.zookeeper.layout import Layout
from epochstate.devtools.local_daemon import LocalDaemon
from epochstate.devtools.spark_session import local_session
from epochstate.devtools.zookeeper import EmbeddedZooKeeper, four_letter_word

JOB = "soak"
SPARK_CONF = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
}


@dataclass(frozen=True)
class Sample:
    seconds: float
    rss: int
    fds: int
    sst: int
    wal: int
    compactions: int
    cache: str
    watches: int
    znodes: int
    subject_znodes: int
    epoch: int
    retained: int
    reads: int


# Resources judged, with how a value prints.
RESOURCES: dict[str, Callable[[float], str]] = {
    "rss": lambda v: f"{v / 2**20:,.1f} MiB",
    "fds": lambda v: f"{v:,.0f}",
    "sst": lambda v: f"{v / 2**20:,.1f} MiB",
    "wal": lambda v: f"{v / 2**20:,.1f} MiB",
    "watches": lambda v: f"{v:,.0f}",
    "znodes": lambda v: f"{v:,.0f}",
    "subject_znodes": lambda v: f"{v:,.0f}",
}


COLUMNS: tuple[str, ...] = ("time", "rss", "fds", "sst bytes", "wal bytes", "compactions", "block cache")
COLUMNS += ("zk watches", "epoch znodes", "subject znodes")
COLUMNS += ("epoch", "retained", "reads", "reads/s")


class Readers(ReaderThreads):
    """Reads of the rate job: the first thread in turn Get latest and a waiting Get of the next
    epoch; the others Get latest, Get at an exact recent epoch, MultiGet and a paged Scan."""

    def __init__(self, target: str, keys: int, count: int) -> None:
        super().__init__(target, count)
        self.keys = keys

    def _user(self, rng: random.Random) -> list[str]:
        return [f"user-{rng.randrange(self.keys):05d}"]

    def round(self, client: EpochStateClient, rng: random.Random, thread: int) -> int:
        latest = client.get(JOB, self._user(rng))
        if thread == 0:  # the next epoch: about one trigger interval away
            client.get(JOB, self._user(rng), epoch=latest.epoch + 1, wait=True, timeout=60)
            return 2
        # Two behind the newest: retention keeps it for --retention-epochs more epochs.
        client.get(JOB, self._user(rng), epoch=max(0, latest.epoch - 2))
        client.multi_get(JOB, [self._user(rng) for _ in range(50)])
        rows = sum(1 for _ in client.scan(JOB, page_size=50, limit=200))
        assert rows > 0, "a scan of a non-empty state returned nothing"
        return 4 + (rows + 49) // 50


def rss_bytes(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    return int(match.group(1)) * 1024 if match else 0


def rocksdb_bytes(directory: Path) -> tuple[int, int]:
    """Bytes of the ``*.sst`` files and of the write-ahead logs (``*.log``) of the RocksDB
    databases under ``directory`` (each a folder with a ``CURRENT`` file)."""
    sst = wal = 0
    for current in directory.rglob("CURRENT"):
        for path in current.parent.iterdir():
            try:
                size = path.stat().st_size
            except FileNotFoundError:  # compacted away, or a log recycled, meanwhile
                continue
            if path.suffix == ".sst":
                sst += size
            elif path.suffix == ".log":
                wal += size
    return sst, wal


def rocksdb_log(directory: Path) -> tuple[int, str]:
    """From the ``LOG`` of the store under ``directory``: compactions finished so far, and the
    block cache's usage in RocksDB's latest statistics dump (every 10 minutes; "-" before)."""
    compactions, cache = 0, "-"
    for log in directory.rglob("LOG"):
        text = log.read_text(errors="replace")
        compactions += text.count('"event": "compaction_finished"')
        usages = re.findall(r"Block cache \S+ capacity: [\d.]+ \w+ .*? usage: ([\d.]+ \w+)", text)
        cache = usages[-1] if usages else cache
    return compactions, cache


def zookeeper_watches(port: int) -> int:
    """Total watches the server holds (``wchs``: "N connections watching M paths / Total watches:K")."""
    match = re.search(r"Total watches:\s*(\d+)", four_letter_word(port, "wchs"))
    if match is None:
        raise RuntimeError("ZooKeeper did not answer 'wchs' (is it in 4lw.commands.whitelist?)")
    return int(match.group(1))


def _children(kazoo: Any, path: str) -> int:
    return len(kazoo.get_children(path)) if kazoo.exists(path) else 0


def sample(
    started: float,
    daemon: LocalDaemon,
    zookeeper: EmbeddedZooKeeper,
    kazoo: Any,
    readers: Readers | AlignedReaders,
    job: str,
) -> Sample:
    assert daemon.process is not None
    pid = daemon.process.pid
    with daemon.client(timeout=30) as client:
        summary = next((j for j in client.jobs() if j.job == job), None)
    sst, wal = rocksdb_bytes(daemon.data_dir)
    compactions, cache = rocksdb_log(daemon.data_dir)
    epoch = summary.latest_epoch if summary is not None else -1
    retained = summary.latest_epoch - summary.oldest_epoch + 1 if summary is not None and epoch >= 0 else 0
    return Sample(
        seconds=time.monotonic() - started,
        rss=rss_bytes(pid),
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        sst=sst,
        wal=wal,
        compactions=compactions,
        cache=cache,
        watches=zookeeper_watches(zookeeper.port),
        znodes=_children(kazoo, Layout().epochs(job)),
        subject_znodes=_children(kazoo, Layout().subject_epochs(SUBJECT)),
        epoch=epoch,
        retained=retained,
        reads=readers.reads,
    )


def verdicts(samples: list[Sample], margin: float) -> list[tuple[str, ...]]:
    third = max(1, len(samples) // 3)
    rows: list[tuple[str, ...]] = []
    for name, shown in RESOURCES.items():
        values = [float(getattr(s, name)) for s in samples]
        first, last = max(values[:third]), max(values[-third:])
        tail = samples[third:] if len(samples) - third >= 2 else samples
        if len(tail) >= 2 and len({s.seconds for s in tail}) > 1:
            slope, _ = statistics.linear_regression(
                [s.seconds / 60 for s in tail], [float(getattr(s, name)) for s in tail]
            )
        else:
            slope = 0.0
        bounded = last <= first * (1 + margin)
        rows.append(
            (
                name,
                shown(first),
                shown(last),
                f"{shown(slope)}/min",
                "bounded" if bounded else f"GROWS (> {margin:.0%} above the first third)",
            )
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--sample-seconds", type=float, default=None, help="default: 30 samples in the run")
    # Enough changes per epoch that the store's 64 MiB memtable fills (and flushes) many times.
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--rows-per-second", type=int, default=2000)
    parser.add_argument("--trigger-seconds", type=float, default=1.0)
    parser.add_argument("--retention-epochs", type=int, default=20)
    parser.add_argument("--readers", type=int, default=3)
    parser.add_argument("--margin", type=float, default=0.2)
    parser.add_argument("--aligned", action="store_true", help="two chained jobs and aligned_with reads")
    args = parser.parse_args(argv)
    interval = args.sample_seconds or max(5.0, args.minutes * 60 / 30)

    from epochstate.spark_plugin import attach

    workdir = Path(tempfile.mkdtemp(prefix="epochstate-soak-"))
    zookeeper = EmbeddedZooKeeper(workdir / "zookeeper").start()
    kazoo = _kazoo(zookeeper.connect_string)
    daemon = LocalDaemon(
        workdir / "daemon",
        {},
        zookeeper=zookeeper.connect_string,
        extra_args=["--retention-epochs", str(args.retention_epochs)],
    ).start()
    spark = local_session("bench-soak", conf=SPARK_CONF, log4j_file=workdir / "spark.log")
    job = WRITER if args.aligned else JOB
    chain: AlignedChain | None = None
    if args.aligned:
        chain = AlignedChain(spark, workdir, zookeeper.connect_string, args.trigger_seconds)
        checkpoints = chain.checkpoints()
    else:
        checkpoints = {JOB: str(workdir / "checkpoint")}
    reporter = attach(spark, daemon.target, checkpoints=checkpoints)
    query = None if chain is not None else _rate_query(spark, workdir, args)
    samples: list[Sample] = []
    readers: Readers | AlignedReaders = (
        AlignedReaders(daemon.target, kazoo, chain.workload, args.readers)
        if chain is not None
        else Readers(daemon.target, args.keys, args.readers)
    )
    try:
        print(
            f"soak for {args.minutes:g} min in {workdir}; warming up to --retention-epochs epochs ...",
            file=sys.stderr,
        )
        # Measured from when retention first retires epochs: the store is as full as it gets then.
        with daemon.client(timeout=600) as client:
            client.wait_for(job, args.retention_epochs, timeout=600)
        readers.start()
        started = time.monotonic()
        deadline = started + args.minutes * 60
        while True:
            samples.append(sample(started, daemon, zookeeper, kazoo, readers, job))
            print("  ".join(_row(samples[-1], samples)), file=sys.stderr, flush=True)
            failure = chain.failure() if chain is not None else query.exception() if query else None
            assert failure is None, failure
            if time.monotonic() >= deadline:
                break
            time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
    finally:
        readers.stop()
        if chain is not None:
            chain.stop()
        if query is not None:
            query.stop()
        spark.streams.removeListener(reporter)
        reporter.close()
        spark.stop()
        daemon.stop()
        kazoo.stop()
        zookeeper.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    workload = (
        "two chained jobs (demo-chain), aligned_with MultiGets + latest MultiGets"
        if args.aligned
        else f"rate source {args.rows_per_second} rows/s over {args.keys:,} keys"
    )
    print(
        f"soak: {args.minutes:g} min; {workload}, trigger {args.trigger_seconds:g} s, retention "
        f"{args.retention_epochs} epochs, {args.readers} readers; {os.cpu_count()} cores; load average {load}"
    )
    print_table(COLUMNS, [_row(s, samples) for s in samples])
    print()
    print(f"errors seen by readers: {dict(readers.errors) or 'none'}")
    print(f"verdicts (bounded: last third's max <= first third's max + {args.margin:.0%}):")
    print_table(
        ("resource", "first third max", "last third max", "growth (last 2/3)", "verdict"),
        verdicts(samples, args.margin),
    )


def _row(s: Sample, samples: list[Sample]) -> tuple[str, ...]:
    before = samples[samples.index(s) - 1] if samples.index(s) > 0 else None
    rate = (
        (s.reads - before.reads) / (s.seconds - before.seconds)
        if before and s.seconds > before.seconds
        else 0.0
    )
    return (
        f"{s.seconds / 60:5.1f} min",
        RESOURCES["rss"](s.rss),
        str(s.fds),
        RESOURCES["sst"](s.sst),
        RESOURCES["wal"](s.wal),
        str(s.compactions),
        s.cache,
        str(s.watches),
        str(s.znodes),
        str(s.subject_znodes),
        str(s.epoch),
        str(s.retained),
        f"{s.reads:,}",
        f"{rate:,.0f}",
    )


def _rate_query(spark: Any, workdir: Path, args: argparse.Namespace) -> Any:
    """The default workload: counts and sums per user over the rate source, into no sink."""
    from pyspark.sql import functions as F

    return (
        spark.readStream.format("rate")
        .option("rowsPerSecond", args.rows_per_second)
        .load()
        .select(F.format_string("user-%05d", F.col("value") % args.keys).alias("user"), "value")
        .groupBy("user")
        .agg(F.count("*").alias("orders"), F.sum("value").alias("total"))
        .writeStream.format("noop")
        .outputMode("update")
        .queryName(JOB)
        .trigger(processingTime=f"{args.trigger_seconds} seconds")
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .start()
    )


def _kazoo(connect: str) -> Any:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=connect)
    client.start(timeout=30)
    return client


if __name__ == "__main__":
    main()
