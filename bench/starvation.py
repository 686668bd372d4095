"""Do held streams and waiting reads starve Gets and health checks? Both server designs, one run.

    python bench/starvation.py [--held 64] [--calls 500]

Builds a small aggregation state with Spark, then runs a real daemon process twice
on it: once with the server as it was (one pool of 16 threads shared by every call,
no limits: the baseline) and once as it is (per-kind call limits, the pool sized for
all of them plus a reserve). Against each it measures sequential Get (an exact epoch)
and health Check latency with nothing held, then with ``--held`` WatchEpochs streams
and ``--held`` Gets waiting without a deadline held open. Every measured call has a
2 s deadline; "answered" counts those that made it. It also shows the daemon's
threads and resident memory with the calls held (what a held call costs).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

os.environ["TZ"] = "UTC"
time.tzset()
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from bench.lookup import build_state, percentiles  # noqa: E402
from bench.table import print_table  # noqa: E402
from epochstate.devtools.spark_session import local_session  # noqa: E402
from epochstate.v1 import epochstate_pb2 as pb  # noqa: E402
from epochstate.v1 import epochstate_pb2_grpc as pb_grpc  # noqa: E402

JOB = "bench"
DEADLINE = 2.0
SINGLE_POOL_WORKERS = 16  # the daemon's one pool before per-kind limits


def serve(data_dir: Path, checkpoint: Path, address_file: Path, single_pool: bool) -> None:
    """Run one daemon in this process until SIGTERM (``single_pool``: the old server)."""
    from epochstate.daemon.config import DaemonSettings, JobConfig
    from epochstate.daemon.runtime import Daemon

    settings = DaemonSettings(
        listen="127.0.0.1:0",
        listen_unix="",
        data_dir=data_dir,
        jobs=[JobConfig(name=JOB, checkpoint=str(checkpoint))],
    )
    daemon = Daemon(settings)
    if single_pool:
        daemon.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=SINGLE_POOL_WORKERS, thread_name_prefix="grpc"),
            options=[("grpc.so_reuseport", 0)],
        )
    signal.signal(signal.SIGTERM, lambda *_: daemon.stop())
    daemon.start()
    address_file.write_text(daemon.address)
    daemon.wait()


class Served:
    """A daemon of one design as a child process."""

    def __init__(self, workdir: Path, checkpoint: Path, single_pool: bool) -> None:
        name = "single-pool" if single_pool else "limits"
        address = workdir / f"{name}.address"
        args = [
            sys.executable,
            "-m",
            "bench.starvation",
            "--serve",
            str(workdir / name),
            str(checkpoint),
            str(address),
        ]
        root = Path(__file__).resolve().parent.parent
        self.process = subprocess.Popen([*args, *(["--single-pool"] if single_pool else [])], cwd=root)
        while not address.exists():
            if self.process.poll() is not None:
                raise RuntimeError(f"the {name} daemon exited with {self.process.returncode}")
            time.sleep(0.05)
        time.sleep(0.1)
        self.target = address.read_text()

    def usage(self) -> tuple[int, float]:
        """The daemon's threads and resident memory (MiB)."""
        fields = dict(
            line.split(":", 1) for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines()
        )
        return int(fields["Threads"]), int(fields["VmRSS"].split()[0]) / 1024

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def timed(call: Callable[[], Any], count: int) -> tuple[list[float], int]:
    """Latencies of the calls that answered within their deadline, and how many did."""
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        try:
            call()
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
            continue
        samples.append(time.perf_counter() - started)
    return samples, len(samples)


def measure(target: str, count: int) -> list[str]:
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.EpochStateStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        request = pb.GetRequest(
            store=pb.StoreRef(job=JOB), key=pb.Row(fields=[pb.Value(int=7)]), epoch=pb.EpochSelector(exact=1)
        )
        check = health_pb2.HealthCheckRequest(service="epochstate.v1.EpochState")
        cells = []
        answered = 0
        for call in (
            lambda: stub.Get(request, timeout=DEADLINE),
            lambda: health.Check(check, timeout=DEADLINE),
        ):
            timed(call, min(count, 20))  # warm-up
            samples, ok = timed(call, count)
            answered += ok
            if samples:
                p50, p99 = percentiles(samples)
                cells += [f"{p50 * 1e3:.2f}", f"{p99 * 1e3:.2f}"]
            else:
                cells += ["-", "-"]
        return [*cells, f"{answered}/{2 * count}"]


def held_calls(target: str, held: int) -> tuple[list[grpc.Channel], list[Any]]:
    """``held`` WatchEpochs streams and ``held`` Gets waiting (no deadline) for an epoch that never comes."""
    channels = [grpc.insecure_channel(target) for _ in range(8)]
    stubs = [pb_grpc.EpochStateStub(c) for c in channels]
    waiting = pb.GetRequest(
        store=pb.StoreRef(job=JOB),
        key=pb.Row(fields=[pb.Value(int=7)]),
        epoch=pb.EpochSelector(exact=10**6, wait=True),
    )
    calls: list[Any] = [stubs[i % 8].WatchEpochs(pb.WatchEpochsRequest(job=JOB)) for i in range(held)]
    calls += [stubs[i % 8].Get.future(waiting) for i in range(held)]
    time.sleep(3.0)  # let them reach the daemon
    return channels, calls


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--held", type=int, default=64)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument(
        "--serve", nargs=3, metavar=("DATA_DIR", "CHECKPOINT", "ADDRESS_FILE"), help=argparse.SUPPRESS
    )
    parser.add_argument("--single-pool", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(Path(args.serve[0]), Path(args.serve[1]), Path(args.serve[2]), args.single_pool)
        return

    workdir = Path(tempfile.mkdtemp(prefix="epochstate-bench-starvation-"))
    spark = local_session("bench-starvation", conf={"spark.sql.session.timeZone": "UTC"})
    print("building state ...", file=sys.stderr)
    checkpoint = build_state(spark, workdir, keys=1000, epochs=2, changed=100)
    rows = []
    for single_pool in (True, False):
        design = f"one pool of {SINGLE_POOL_WORKERS} (before)" if single_pool else "per-kind limits (now)"
        served = Served(workdir, checkpoint, single_pool)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # until epoch 1 is queryable
                try:
                    measure(served.target, 1)
                    break
                except grpc.RpcError:
                    time.sleep(0.2)
            threads, rss = served.usage()
            rows.append([design, "0 + 0", *measure(served.target, args.calls), threads, f"{rss:.0f}"])
            channels, calls = held_calls(served.target, args.held)
            threads, rss = served.usage()
            # The single pool answers nothing while held: each call costs its whole deadline.
            count = 10 if single_pool else args.calls
            rows.append(
                [design, f"{args.held} + {args.held}", *measure(served.target, count), threads, f"{rss:.0f}"]
            )
            for call in calls:
                call.cancel()
            for channel in channels:
                channel.close()
        finally:
            served.stop()
    print()
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at the end")
    header = ["server", "held streams + waits", "Get p50 ms", "Get p99 ms", "health p50 ms", "health p99 ms"]
    print_table([*header, "answered", "threads", "RSS MiB"], rows)
    spark.stop()


if __name__ == "__main__":
    main()
