"""Routed read throughput over a group of 1, 2 and 3 daemons, against a bare gRPC echo server.

    python bench/routing.py [--keys 2000] [--seconds 3] [--callers 1,4,16,64]

Builds a small aggregation state with Spark, starts an embedded ZooKeeper and
three daemons in one group, and defines the same checkpoint three times, as jobs
``r1``, ``r2`` and ``r3`` with 1, 2 and 3 replicas. Then, for each number of
concurrent callers, it measures Gets of random keys pinned to one epoch:

- ``echo``: the bare gRPC echo server of bench/echo_server.py (the floor for any
  Python gRPC call), called with a request of the same size;
- ``direct``: a plain :class:`EpochStateClient` on one daemon (job ``r3``);
- ``routed N``: a :class:`RoutedClient` reading job ``rN``, spread over its N replicas.

Callers are threads in up to four client processes (each process has its own
client, as independent callers would), all started together; calls/s is the sum
over the run, p50 and p99 the latency over every call, client CPU the CPU time the
client processes used per call. On a 2-core machine the daemons, ZooKeeper and the
callers share the cores: the table says what routing costs and what spreading gains
here, measured in the same run as the echo floor.

The target, a routed Get's p50 at most 1.1x a direct one's with one caller, is
measured paired, so that the load of other processes on the machine falls on both
alike: one caller alternates a direct Get (on a daemon serving the job) and a routed
one (of ``r1``: the same daemon; of ``r3``: spread over three), ``--repeat`` times.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import grpc

os.environ["TZ"] = "UTC"
time.tzset()
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from bench.lookup import echo_server, percentiles  # noqa: E402
from bench.table import print_table  # noqa: E402
from epochstate.client import EpochStateClient, JobNotFound, RoutedClient  # noqa: E402
from epochstate.devtools.local_daemon import LocalDaemon  # noqa: E402
from epochstate.devtools.spark_session import local_session  # noqa: E402
from epochstate.devtools.zookeeper import EmbeddedZooKeeper  # noqa: E402
from epochstate.v1 import epochstate_pb2 as pb  # noqa: E402

GROUP = "bench"
MAX_PROCESSES = 4


def build_state(spark: Any, workdir: Path, keys: int) -> Path:
    """An aggregation over ``keys`` users, two epochs."""
    from pyspark.sql import functions as F

    source = workdir / "in"
    source.mkdir()
    checkpoint = workdir / "cp"
    frame = spark.readStream.format("json").schema("user string, amount long").load(str(source))
    query = (
        frame.groupBy("user")
        .agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
        .writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    for epoch in range(2):
        rows = "".join(json.dumps({"user": f"user-{u}", "amount": epoch}) + "\n" for u in range(keys))
        (source / f"{epoch}.json").write_text(rows)
        query.processAllAvailable()
    query.stop()
    return checkpoint


def _caller(
    kind: str, targets: list[str], job: str, keys: int, threads: int, seconds: float, go: Event, out: Any
) -> None:
    """One client process: ``threads`` callers of one client, back to back for ``seconds``."""
    rng = random.Random(os.getpid())
    if kind == "echo":
        channel = grpc.insecure_channel(targets[0])
        echo = channel.unary_unary("/bench.Echo/Echo", None, None)
        payload = pb.GetRequest(
            store=pb.StoreRef(job=job),
            key=pb.Row(fields=[pb.Value(string="user-1000")]),
            epoch=pb.EpochSelector(exact=1),
        ).SerializeToString()

        def call() -> None:
            echo(payload, timeout=30)

    else:
        client = EpochStateClient(targets[0]) if kind == "direct" else RoutedClient(targets)

        def call() -> None:
            client.get(job, [f"user-{rng.randrange(keys)}"], epoch=1, timeout=30)

    for _ in range(20):  # connections made, schemas and locations cached
        call()
    out.put(None)
    go.wait()
    latencies: list[list[float]] = [[] for _ in range(threads)]
    cpu = time.process_time()
    end = time.perf_counter() + seconds

    def loop(index: int) -> None:
        mine = latencies[index]
        while (before := time.perf_counter()) < end:
            call()
            mine.append(time.perf_counter() - before)

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    out.put(([x for mine in latencies for x in mine], time.process_time() - cpu))


def _paired(direct_target: str, targets: list[str], job: str, keys: int, seconds: float, out: Any) -> None:
    """One caller alternating a direct Get of ``job`` on ``direct_target`` and a routed one
    over ``targets``, for ``seconds``: both latencies, for the same key each turn."""
    rng = random.Random(os.getpid())
    direct, routed = EpochStateClient(direct_target), RoutedClient(targets)
    clients = (direct, routed)
    for _ in range(100):  # connections made (every one of each pool), schemas and locations cached
        for client in clients:
            client.get(job, [f"user-{rng.randrange(keys)}"], epoch=1, timeout=30)
    latencies: tuple[list[float], list[float]] = ([], [])
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        key = [f"user-{rng.randrange(keys)}"]
        for client, mine in zip(clients, latencies, strict=True):
            before = time.perf_counter()
            client.get(job, key, epoch=1, timeout=30)
            mine.append(time.perf_counter() - before)
    out.put(latencies)


def paired_ratio(direct_target: str, targets: list[str], job: str, keys: int, seconds: float) -> float:
    """A routed Get's p50 over a direct one's, measured in turns by one caller process."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    worker = ctx.Process(target=_paired, args=(direct_target, targets, job, keys, seconds, out))
    worker.start()
    direct, routed = out.get()
    worker.join()
    return percentiles(routed)[0] / percentiles(direct)[0]


def measure(kind: str, targets: list[str], job: str, keys: int, callers: int, seconds: float) -> list[Any]:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")  # no gRPC state inherited through fork
    processes = min(callers, MAX_PROCESSES)
    go, out = ctx.Event(), ctx.Queue()
    threads = [callers // processes + (1 if i < callers % processes else 0) for i in range(processes)]
    workers = [
        ctx.Process(target=_caller, args=(kind, targets, job, keys, n, seconds, go, out)) for n in threads
    ]
    for worker in workers:
        worker.start()
    for _ in workers:
        out.get()
    go.set()
    answers = [out.get() for _ in workers]
    for worker in workers:
        worker.join()
    latencies = [x for mine, _ in answers for x in mine]
    cpu = sum(used for _, used in answers)
    p50, p99 = percentiles(latencies)
    return [
        f"{len(latencies) / seconds:,.0f}",
        f"{p50 * 1e3:.2f}",
        f"{p99 * 1e3:.2f}",
        f"{cpu / len(latencies) * 1e6:,.0f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument("--callers", default="1,4,16,64", help="concurrent callers, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="paired measurements of the target")
    args = parser.parse_args()
    callers = [int(c) for c in args.callers.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="bench-routing-"))
    print(f"work directory {workdir}")
    spark = local_session("bench-routing")
    try:
        checkpoint = build_state(spark, workdir, args.keys)
    finally:
        spark.stop()
    zookeeper = EmbeddedZooKeeper(workdir / "zookeeper").start()
    daemons: list[LocalDaemon] = []
    echo_process: subprocess.Popen[str] | None = None
    try:
        for node in ("a", "b", "c"):
            daemon = LocalDaemon(
                workdir / node,
                {},
                zookeeper=zookeeper.connect_string,
                extra_args=["--group", GROUP, "--node", node, "--poll-interval", "0.2"],
            )
            daemons.append(daemon.start())
        with EpochStateClient(daemons[0].target) as admin:
            deadline = time.monotonic() + 60
            while len(admin.group_jobs.status().leader) == 0 and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(2)  # every member joined: no replica moves while we measure
            for replicas in (1, 2, 3):
                admin.group_jobs.add(f"r{replicas}", str(checkpoint), replicas=replicas)
        serving_r1 = ""
        with RoutedClient([d.target for d in daemons]) as probe:
            for replicas in (1, 2, 3):
                deadline = time.monotonic() + 180
                while True:
                    try:
                        location = probe.locate(f"r{replicas}", refresh=True)
                    except JobNotFound:  # not assigned yet
                        location = None
                    serving = [
                        r
                        for s in (location.shards if location else ())
                        for r in s.replicas
                        if r.serving and r.newest_epoch >= 1
                    ]
                    if len(serving) == replicas:
                        serving_r1 = serving[0].address if replicas == 1 else serving_r1
                        break
                    if time.monotonic() > deadline:
                        raise SystemExit(f"job r{replicas}: {len(serving)} of {replicas} replicas serving")
                    time.sleep(0.5)
        echo_process, echo_targets = echo_server(workdir / "echo.sock")
        everyone = [d.target for d in daemons]
        load_before = os.getloadavg()[0]
        rows = []
        for count in callers:
            rows.append(
                ["echo", count, *measure("echo", echo_targets[:1], "r3", args.keys, count, args.seconds)]
            )
            rows.append(["direct", count, *measure("direct", everyone, "r3", args.keys, count, args.seconds)])
            for replicas in (1, 2, 3):
                figures = measure("routed", everyone, f"r{replicas}", args.keys, count, args.seconds)
                rows.append([f"routed {replicas}", count, *figures])
        # r1 read directly on the daemon that serves it; r3 on the first daemon (it serves it too).
        ratios = {
            job: [
                paired_ratio(direct_target, everyone, job, args.keys, args.seconds)
                for _ in range(args.repeat)
            ]
            for job, direct_target in (("r1", serving_r1), ("r3", everyone[0]))
        }
        print(
            f"\nGet of one of {args.keys} keys pinned to epoch 1; {os.cpu_count()} cores; "
            f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}"
        )
        print_table(["reads", "callers", "calls/s", "p50 ms", "p99 ms", "client CPU µs"], rows)
        print("\ntargets:")
        for job, measured in ratios.items():
            median = statistics.median(measured)
            each = ", ".join(f"{r:.2f}x" for r in measured)
            print(
                f"  routed Get p50 <= 1.1x direct, 1 caller, job {job} ({job[1]} replica(s)): "
                f"{median:.2f}x ({'met' if median <= 1.1 else 'NOT met'}; paired runs {each})"
            )
    finally:
        if echo_process is not None and echo_process.stdin is not None:
            echo_process.stdin.close()
            echo_process.wait(10)
        for daemon in daemons:
            daemon.stop()
        zookeeper.stop()


if __name__ == "__main__":
    main()
