"""What the ZooKeeper ``sync`` of each aligned read costs, and what skipping it would break.

    python bench/aligned_reads.py [--reads 4000] [--rounds 8] [--probes 2000]

An embedded ZooKeeper holds one subject: ``orders`` writes it, ``enrich`` reads
it aligned. The daemon's resolution of ``aligned_with`` (``SubjectAlignment`` on a
``SubjectView``, warm cache) is timed three ways, in interleaved rounds of the
same run:

- ``sync``: as the daemon does it, :meth:`SubjectView.catch_up` first (a ``sync``
  round trip, then the watch events ZooKeeper delivered ahead of its reply);
- ``skip if idle``: the proposed shortcut, the sync skipped when kazoo has no
  watch event queued (none pending at the client when the read starts);
- ``no sync``: the cache alone (the floor).

Then the reason the sync exists, measured: ``--probes`` times, another process
(Spark's driver, in production) records a new mapping entry, gets ZooKeeper's
acknowledgement and tells this one, and only then the read starts, not waiting
(timeout 0). A read that misses the entry acknowledged before it began answered
from a stale cache (an aligned read that returns an older epoch than its writer
was told it had). Each variant gets a
fresh entry per probe, so none profits from another's round trip.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

from kazoo.client import KazooClient

from bench.table import print_table
from epochstate.core.zookeeper.layout import Layout
from epochstate.core.zookeeper.subject_records import SubjectEpochRecord, SubjectSourceRecord
from epochstate.daemon.registry.subject_view import SubjectView
from epochstate.daemon.server.aligned import SubjectAlignment
from epochstate.daemon.server.epochs import EpochWaitTimedOut
from epochstate.daemon.store.catalog import JobEntry
from epochstate.daemon.store.descriptors import JobDescriptor
from epochstate.devtools.zookeeper import EmbeddedZooKeeper
from epochstate.v1 import epochstate_pb2 as pb

LAYOUT = Layout()
TOPIC = "hot"
ORDERS = JobEntry(JobDescriptor("orders", 1, "/checkpoints/orders", "q-orders"))
FIRST_BATCH = 10  # enrich's batch b read subject epoch b - FIRST_BATCH
KEEP = 100  # mapping entries the reader's record keeps


class SkipIfIdle(SubjectView):
    """The shortcut under test: no sync when no watch event waits in kazoo's queue."""

    def catch_up(self) -> None:
        if not self.client.handler.callback_queue.empty():
            super().catch_up()


class NoSync(SubjectView):
    """The cache alone."""

    def catch_up(self) -> None:
        return None


VARIANTS: dict[str, type[SubjectView]] = {"sync": SubjectView, "skip if idle": SkipIfIdle, "no sync": NoSync}


def kazoo(connect: str) -> KazooClient:
    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=30)
    return client


def write_mapping(writer: KazooClient, newest: int) -> None:
    """enrich's record with entries up to subject epoch ``newest`` (the ``KEEP`` newest)."""
    mapping = {FIRST_BATCH + k: k for k in range(max(0, newest - KEEP + 1), newest + 1)}
    writer.set(LAYOUT.subject_source(TOPIC, "enrich"), SubjectSourceRecord("aligned", mapping, 1).encode())


def resolve(alignment: SubjectAlignment, subject_epoch: int, timeout: float) -> int:
    selector = pb.AlignedWith(job="enrich", epoch=FIRST_BATCH + subject_epoch)
    return alignment.epoch_of(ORDERS, selector, timeout)


def latencies(
    alignments: dict[str, SubjectAlignment], reads: int, rounds: int, newest: int
) -> dict[str, list[float]]:
    """Microseconds per resolution, per variant, interleaved round by round."""
    found: dict[str, list[float]] = {name: [] for name in alignments}
    per_round = max(1, reads // rounds)
    for _ in range(rounds):
        for name, alignment in alignments.items():
            samples = found[name]
            for i in range(per_round):
                k = newest - i % KEEP
                started = time.perf_counter_ns()
                assert resolve(alignment, k, 1.0) == k
                samples.append((time.perf_counter_ns() - started) / 1000)
    return found


def write_on_request(connect: str, requests: Connection) -> None:
    """In another process, as Spark's driver: register subject epoch k and enrich's entry for it,
    for each k received; answer once ZooKeeper acknowledged both."""
    writer = kazoo(connect)
    try:
        while (newest := requests.recv()) is not None:
            record = SubjectEpochRecord({0: (newest, newest + 1)}, "orders", "q-orders", 1)
            writer.create(LAYOUT.subject_epoch(TOPIC, newest), record.encode())
            write_mapping(writer, newest)
            requests.send(newest)
    finally:
        writer.stop()


def stale_reads(
    writer: Connection, alignments: dict[str, SubjectAlignment], probes: int, newest: int
) -> dict[str, int]:
    """Per variant, how many reads missed an entry acknowledged to the writer before they began."""
    stale = dict.fromkeys(alignments, 0)
    for _ in range(probes):
        for name, alignment in alignments.items():
            newest += 1
            writer.send(newest)
            writer.recv()  # acknowledged by ZooKeeper to the writer's session
            try:
                assert resolve(alignment, newest, 0.0) == newest
            except EpochWaitTimedOut:
                stale[name] += 1
    return stale


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reads", type=int, default=4000, help="timed resolutions per variant")
    parser.add_argument("--rounds", type=int, default=8, help="interleaved rounds they are split into")
    parser.add_argument("--probes", type=int, default=2000, help="write-then-read probes per variant")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="epochstate-bench-aligned-"))
    with EmbeddedZooKeeper(workdir / "zookeeper") as zookeeper:
        writer, reader = kazoo(zookeeper.connect_string), kazoo(zookeeper.connect_string)
        newest = KEEP - 1
        for k in range(newest + 1):
            record = SubjectEpochRecord({0: (k, k + 1)}, "orders", "q-orders", 1)
            writer.create(LAYOUT.subject_epoch(TOPIC, k), record.encode(), makepath=True)
        writer.create(LAYOUT.subject_source(TOPIC, "enrich"), b"{}", makepath=True)
        write_mapping(writer, newest)
        views = {name: kind(reader) for name, kind in VARIANTS.items()}
        alignments = {name: SubjectAlignment(view) for name, view in views.items()}
        try:
            latencies(alignments, 200, 1, newest)  # warm: caches filled, code paths loaded
            timed = latencies(alignments, args.reads, args.rounds, newest)
            load_before = os.getloadavg()[0]
            requests, served = multiprocessing.get_context("spawn").Pipe()
            process = multiprocessing.get_context("spawn").Process(
                target=write_on_request, args=(zookeeper.connect_string, served)
            )
            process.start()
            try:
                stale = stale_reads(requests, alignments, args.probes, newest)
            finally:
                requests.send(None)
                process.join(30)
        finally:
            for view in views.values():
                view.close()
            writer.stop()
            reader.stop()

    print(f"aligned_with on a warm cache: {args.reads} reads per variant, {args.rounds} interleaved rounds")
    print(f"load average {load_before:.1f} (1 min), {os.cpu_count()} CPUs")
    base = statistics.median(timed["no sync"])
    rows: list[list[object]] = []
    for name, samples in timed.items():
        p50 = statistics.median(samples)
        rows.append(
            [
                name,
                f"{p50:,.0f}",
                f"{percentile(samples, 0.99):,.0f}",
                f"{percentile(samples, 0.999):,.0f}",
                f"{p50 - base:+,.0f}",
                f"{stale[name]} of {args.probes}",
            ]
        )
    print_table(
        ["variant", "p50 µs", "p99 µs", "p99.9 µs", "p50 vs no sync", "stale after an acknowledged write"],
        rows,
    )


if __name__ == "__main__":
    main()
