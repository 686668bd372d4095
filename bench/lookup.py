"""Lookup latency, throughput and freshness, against baselines measured in the same run.

    python bench/lookup.py [--keys 100000] [--epochs 20] [--changed 10000]

Builds a real aggregation state with Spark (``--keys`` keys, ``--epochs`` epochs,
each later epoch changing ``--changed`` keys), follows it with a real daemon
process (the listener pushes each commit), then measures, on this machine:

(a) a bare gRPC echo server and client (the floor for any Python gRPC lookup),
with both Python server models (thread pool, as the daemon; asyncio); the lower
p50 is the floor; (b) our Get pinned to an epoch; (c) MultiGet of 100 keys, from
one caller and from ``--streams`` concurrent client processes; (d) Spark's own
statestore reader answering the same point lookup; (e) freshness: from Spark's
commit of a batch to that epoch being queryable.

(a)-(c) run over both transports the daemon serves: TCP on loopback and its Unix
socket (the echo server listens on both as well); every target on latency is
judged per transport, against the echo floor of the same transport. Rows compared
with each other (each transport; echo and Get) are timed in interleaved rounds.

(f) TLS: a second daemon follows the same checkpoint with mTLS and roles on (see
bench/tls_lookup.py); its Get is judged against an echo server with the same
mTLS, and timed in the same rounds as the plaintext echo and Get, shown alongside.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import grpc

os.environ["TZ"] = "UTC"
time.tzset()
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from bench import tls_lookup  # noqa: E402
from bench.streams import run_streams  # noqa: E402
from bench.table import print_table  # noqa: E402
from epochstate.client import EpochStateClient  # noqa: E402
from epochstate.client.client import CHANNEL_OPTIONS  # noqa: E402
from epochstate.devtools.local_daemon import LocalDaemon  # noqa: E402
from epochstate.devtools.spark_session import local_session  # noqa: E402
from epochstate.v1 import epochstate_pb2 as pb  # noqa: E402

K = TypeVar("K")


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def timed(call: Callable[[], Any], count: int, warmup: int = 200) -> list[float]:
    for _ in range(warmup):
        call()
    out = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        out.append(time.perf_counter() - started)
    return out


def interleaved(
    calls: Mapping[K, Callable[[], Any]], count: int, warmup: int = 200, rounds: int = 4
) -> dict[K, list[float]]:
    """``count`` timed calls of each, taken in ``rounds`` alternating slices so that a
    change in the machine's load falls on every one alike."""
    samples: dict[K, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        for _ in range(warmup):
            call()
    for turn in range(rounds):
        order = list(calls.items()) if turn % 2 == 0 else list(calls.items())[::-1]
        for name, call in order:
            samples[name] += timed(call, count // rounds, warmup=0)
    return samples


def cycle_calls(method: Callable[[Any], Any], requests: list[Any]) -> Callable[[], Any]:
    """A call of ``method`` with the next of ``requests`` each time, round robin."""
    turns = itertools.cycle(requests)
    return lambda: method(next(turns))


def echo_server(unix_socket: Path, *options: str) -> tuple[subprocess.Popen[str], list[str]]:
    """Start bench/echo_server.py as its own process, as the daemon is, on TCP and on a
    Unix socket; returns it and its two targets."""
    unix_socket.unlink(missing_ok=True)
    process = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("echo_server.py")),
            "--unix",
            str(unix_socket),
            *options,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    return process, [f"127.0.0.1:{process.stdout.readline().strip()}", f"unix://{unix_socket}"]


def measure_tls(
    workdir: Path,
    checkpoint: Path,
    retention: int,
    epoch: int,
    requests: list[Any],
    plain: EpochStateClient,
    calls: int,
    add: Callable[[str, list[float]], tuple[float, float, float]],
) -> float:
    """Rows (f): echo and Get, plaintext and over mTLS, in the same interleaved rounds; the
    ratio of Get's p50 over mTLS to the mTLS echo's."""
    setup = tls_lookup.start(workdir, checkpoint, retention, epoch)
    server, echo_targets = echo_server(workdir / "echo-plain.sock")
    try:
        with setup.client() as secure:
            plain_echo = grpc.insecure_channel(echo_targets[0], options=CHANNEL_OPTIONS)
            rows: dict[str, Callable[[], Any]] = {
                "(f) gRPC echo, thread pool, TCP plaintext": functools.partial(
                    plain_echo.unary_unary("/bench.Echo/Echo", None, None), b"x" * 40
                ),
                "(f) gRPC echo, thread pool, TCP mTLS": setup.echo_call(),
                "(f) Get, pinned epoch, TCP plaintext": cycle_calls(plain.stub.Get, requests),
                "(f) Get, pinned epoch, TCP mTLS + roles": cycle_calls(secure.stub.Get, requests),
            }
            timings = interleaved(rows, calls)
            plain_echo.close()
        p50 = {name: add(name, samples)[0] for name, samples in timings.items()}
    finally:
        server.stdin.close()  # type: ignore[union-attr]
        server.wait(10)
        setup.close()
    return p50["(f) Get, pinned epoch, TCP mTLS + roles"] / p50["(f) gRPC echo, thread pool, TCP mTLS"]


def build_state(spark: Any, workdir: Path, keys: int, epochs: int, changed: int) -> Path:
    from pyspark.sql import functions as F

    source = workdir / "in"
    source.mkdir()
    checkpoint = workdir / "cp"
    frame = (
        spark.readStream.format("json")
        .schema("user long, amount long")
        .option("maxFilesPerTrigger", 1)
        .load(str(source))
    )
    query = (
        frame.groupBy("user")
        .agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
        .writeStream.format("noop")
        .outputMode("update")
        .queryName("bench")
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    rng = random.Random(7)
    for epoch in range(epochs):
        users = range(keys) if epoch == 0 else rng.sample(range(keys), changed)
        path = source / f"{epoch:05d}.json"
        path.write_text("".join(json.dumps({"user": u, "amount": epoch}) + "\n" for u in users))
        query.processAllAvailable()
    query.stop()
    return checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--changed", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--spark-calls", type=int, default=5)
    parser.add_argument("--streams", default="2,4", help="client processes for MultiGet throughput")
    parser.add_argument("--seconds", type=float, default=5.0, help="per concurrent MultiGet measurement")
    args = parser.parse_args()

    from epochstate.spark_plugin import attach

    workdir = Path(tempfile.mkdtemp(prefix="epochstate-bench-"))
    spark = local_session("bench-lookup", conf={"spark.sql.session.timeZone": "UTC"})
    daemon = LocalDaemon(
        workdir / "daemon", {}, extra_args=["--retention-epochs", str(max(100, args.epochs))]
    ).start()
    try:
        target = daemon.target
        reporter = attach(spark, target, checkpoints={"bench": str(workdir / "cp")})
        print(
            f"building state: {args.keys} keys, {args.epochs} epochs, {args.changed} changed per epoch ...",
            file=sys.stderr,
        )
        checkpoint = build_state(spark, workdir, args.keys, args.epochs, args.changed)
        client = EpochStateClient(target, timeout=120)
        last = args.epochs - 1
        client.get("bench", [0], at_least=last)
        pinned = last - 5

        rows: list[tuple[str, str, str, str, str]] = []

        def add(name: str, samples: list[float], unit_per_call: int = 1) -> tuple[float, float, float]:
            p50, p99 = percentiles(samples)
            rate = unit_per_call * len(samples) / sum(samples)
            rows.append(
                (
                    name,
                    f"{p50 * 1e6:,.0f}",
                    f"{p99 * 1e6:,.0f}",
                    f"{rate:,.0f}" if rate >= 10 else f"{rate:.2f}",
                    "keys/s" if unit_per_call > 1 else "calls/s",
                )
            )
            return p50, p99, rate

        from pyspark.sql import functions as F

        def spark_lookup() -> None:
            frame = spark.read.format("statestore").option("batchId", pinned).load(str(checkpoint))
            frame.filter(F.col("key.user") == 42).collect()

        spark_samples = timed(spark_lookup, args.spark_calls, warmup=1)
        spark_p50, _, _ = add("(d) Spark statestore reader", spark_samples)

        epochs = client.epochs("bench")
        lags = [(e.ingested_at_ms - e.committed_at_ms) / 1000 for e in epochs if e.epoch > 0]
        fresh_p50, fresh_p99 = percentiles(lags)
        rows.append(
            (
                "(e) freshness, commit -> queryable",
                f"{fresh_p50 * 1e6:,.0f}",
                f"{fresh_p99 * 1e6:,.0f}",
                f"{len(lags)}",
                "epochs",
            )
        )

        # Spark's JVM keeps a core busy even when idle: stop it before timing our reads.
        spark.streams.removeListener(reporter)
        reporter.close()
        spark.stop()

        load_before = os.getloadavg()[0]
        transports = {"TCP": target, "Unix socket": daemon.unix_target}
        clients = {transport: EpochStateClient(address) for transport, address in transports.items()}
        rng = random.Random(1)
        requests = [
            pb.GetRequest(
                store=pb.StoreRef(job="bench"),
                key=pb.Row(fields=[pb.Value(int=rng.randrange(args.keys))]),
                epoch=pb.EpochSelector(exact=pinned),
            )
            for _ in range(1000)
        ]
        # Rows by (what, transport). The thread-pool echo (the daemon's server model) is
        # timed in the same interleaved rounds as Get, so the two see the same load.
        timings: dict[tuple[str, str], list[float]] = {}
        for name, options in (("asyncio", ("--asyncio",)), ("thread pool", ())):
            server, echo_targets = echo_server(workdir / "echo.sock", *options)
            calls: dict[tuple[str, str], Callable[[], Any]] = {
                # The client's channel options, so that the floor is what our client could reach.
                (f"(a) gRPC echo, {name}", transport): functools.partial(
                    grpc.insecure_channel(address, options=CHANNEL_OPTIONS).unary_unary(
                        "/bench.Echo/Echo", None, None
                    ),
                    b"x" * 40,
                )
                for transport, address in zip(transports, echo_targets, strict=True)
            }
            if name == "thread pool":
                calls.update(
                    (("(b) Get, pinned epoch", transport), cycle_calls(c.stub.Get, requests))
                    for transport, c in clients.items()
                )
            timings.update(interleaved(calls, args.calls))
            server.stdin.close()  # type: ignore[union-attr]
            server.wait(10)
        echo_floor: dict[str, float] = {}
        get_p50: dict[str, float] = {}
        for what in ("(a) gRPC echo, thread pool", "(a) gRPC echo, asyncio", "(b) Get, pinned epoch"):
            for transport in transports:
                p50 = add(f"{what}, {transport}", timings[what, transport])[0]
                if what.startswith("(a)"):
                    echo_floor[transport] = min(echo_floor.get(transport, float("inf")), p50)
                else:
                    get_p50[transport] = p50
        tls_ratio = measure_tls(
            workdir, checkpoint, max(100, args.epochs), last, requests, clients["TCP"], args.calls, add
        )
        multis = [
            pb.MultiGetRequest(
                store=pb.StoreRef(job="bench"),
                epoch=pb.EpochSelector(exact=pinned),
                keys=[pb.Row(fields=[pb.Value(int=rng.randrange(args.keys))]) for _ in range(100)],
            )
            for _ in range(20)
        ]
        multi_calls = {
            f"(c) MultiGet, 100 keys, 1 caller, {transport}": cycle_calls(c.stub.MultiGet, multis)
            for transport, c in clients.items()
        }
        multi_rate, multi_best = 0.0, ""
        for label, samples in interleaved(multi_calls, args.calls // 10, warmup=20).items():
            rate = add(label, samples, unit_per_call=100)[2]
            if rate > multi_rate:
                multi_rate, multi_best = rate, label.split(", ", 1)[1]
        for streams in (int(n) for n in args.streams.split(",") if n):
            for transport, address in transports.items():
                result = run_streams(
                    address,
                    "/epochstate.v1.EpochState/MultiGet",
                    [r.SerializeToString() for r in multis],
                    "epochstate.v1.MultiGetResponse",
                    streams,
                    args.seconds,
                )
                rate = 100 * result.calls_per_second
                p50, p99 = percentiles(result.latencies)
                rows.append(
                    (
                        f"(c) MultiGet, 100 keys, {streams} client processes, {transport}",
                        f"{p50 * 1e6:,.0f}",
                        f"{p99 * 1e6:,.0f}",
                        f"{rate:,.0f}",
                        "keys/s",
                    )
                )
                if rate > multi_rate:
                    multi_rate, multi_best = rate, f"100 keys, {streams} client processes, {transport}"
        load_after = os.getloadavg()[0]

        print()
        print(
            f"state: {args.keys:,} keys, {args.epochs} epochs, {args.changed:,} keys changed per epoch; "
            f"pinned epoch {pinned}; {os.cpu_count()} cores; "
            f"load average {load_before:.1f} -> {load_after:.1f} during the gRPC rows"
        )
        print_table(("measurement", "p50 (µs)", "p99 (µs)", "throughput", "unit"), rows)
        print()
        print("targets (each transport against the echo floor over the same transport):")
        for transport in transports:
            ratio = get_p50[transport] / echo_floor[transport]
            print(
                f"  Get p50 within 1.5x of echo floor, {transport + ':':12s} {ratio:.2f}x  "
                f"{'met' if ratio <= 1.5 else 'NOT met'} (floor: the lower echo p50)"
            )
        print(
            f"  Get p50 within 1.3x of echo floor, TCP mTLS:   {tls_ratio:.2f}x  "
            f"{'met' if tls_ratio <= 1.3 else 'NOT met'} (both over mTLS; the Get with role checks)"
        )
        verdict = "met" if multi_rate >= 50_000 else "NOT met"
        print(
            f"  MultiGet >= 50,000 keys/s:                       {multi_rate:,.0f} ({multi_best})  {verdict}"
        )
        for transport in transports:
            speedup = spark_p50 / get_p50[transport]
            print(
                f"  >= 1000x faster than Spark's reader, {transport + ':':12s} {speedup:,.0f}x  "
                f"{'met' if speedup >= 1000 else 'NOT met'} (Get p50 {get_p50[transport] * 1e6:,.0f} µs)"
            )
        verdict = "met" if fresh_p50 <= 0.5 else "NOT met"
        print(f"  freshness p50 <= 0.5 s:                          {fresh_p50:.3f} s  {verdict}")
        print(
            f"  (listener reports sent: {reporter.sent}, dropped: {reporter.dropped}; "
            f"statistics.mean freshness {statistics.mean(lags):.3f} s)"
        )
        for c in clients.values():
            c.close()
    finally:
        daemon.stop()
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
