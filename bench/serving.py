"""Gets from 1 and 2 serving processes against an echo server with as many processes.

    python bench/serving.py [--keys 2000] [--seconds 4] [--callers 1,16,64] [--processes 1,2] [--rounds 3]

Builds the small state of bench/routing.py with Spark, then for each number of
processes P starts a daemon with ``--serve-processes P`` and the echo server of
bench/echo_server.py with ``--processes P`` (each P processes sharing one TCP
port), and for each number of callers measures (``echo`` and ``Get`` in ``--rounds``
alternating rounds, each shown by its round of median ratio, the others after it):

- ``echo``: the bare gRPC echo on a thread pool, the daemon's server model (the floor
  for any Python gRPC call the daemon serves), called with the bytes of a Get request;
  the targets compare the daemon with it;
- ``echo, asyncio``: the same echo served by ``grpc.aio`` on one event loop per process,
  the floor of that other server model;
- ``Get``: the daemon's Get of a random key pinned to one epoch, the same bytes in
  and the daemon's response out (no client-side decoding, like the echo);
- ``Get, shared``: the same Gets, the callers of each client process sharing one
  client's connections (``EpochStateClient``'s default, taken in turn call by call):
  how one client's calls spread over the processes;
- ``health``: the daemon's health Check from one more caller while the Gets run;
- ``echo, a thread per call``: the echo again, its server with one thread for every call
  the daemon's limits admit at once, plus the reserve (the daemon's pool with
  ``quick_threads: 0``): what such a pool costs any Python gRPC server with many callers
  (threads contending for the interpreter's lock); the daemon runs its quick calls on
  ``quick_threads`` threads instead.

Callers are threads in up to four client processes, each thread with a connection of
its own unless shared (connections, not calls, are what the kernel spreads over processes); the
client CPU column is the seconds of CPU the client processes used per second while they called
(not while they started; the load generator shares the machine's cores with the servers).
The server CPU column is the microseconds of CPU used per call answered by every process
of the server (a daemon's main and serving processes; the Get rows include the few health
Checks): it moves less than calls/s when other work loads the machine.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import subprocess
import tempfile
import threading
import time
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2

from bench.lookup import echo_server, percentiles
from bench.routing import build_state
from bench.table import print_table
from epochstate.client import EpochStateClient
from epochstate.client.channels import LOCAL_SUBCHANNEL_POOL, connections_for
from epochstate.client.client import CHANNEL_OPTIONS
from epochstate.client.tls import TlsOptions, open_channel
from epochstate.daemon.server.limits import CallLimits
from epochstate.devtools.local_daemon import LocalDaemon
from epochstate.devtools.spark_session import local_session
from epochstate.v1 import epochstate_pb2 as pb

MAX_PROCESSES = 4
GET = "/epochstate.v1.EpochState/Get"
ECHO = "/bench.Echo/Echo"
CHECK = "/grpc.health.v1.Health/Check"


def _requests(keys: int) -> list[bytes]:
    rng = random.Random(os.getpid())
    return [
        pb.GetRequest(
            store=pb.StoreRef(job="bench"),
            key=pb.Row(fields=[pb.Value(string=f"user-{rng.randrange(keys)}")]),
            epoch=pb.EpochSelector(exact=1),
        ).SerializeToString()
        for _ in range(200)
    ]


def _caller(
    method: str, target: str, keys: int, threads: int, seconds: float, go: Event, out: Any, shared: bool
) -> None:
    """One client process: ``threads`` callers, each on a connection of its own, or (``shared``)
    all on one client's connections."""
    requests = _requests(keys)
    options = (LOCAL_SUBCHANNEL_POOL,)
    if shared:
        pool = open_channel(target, TlsOptions(), CHANNEL_OPTIONS, connections_for(target, None))
        calls = [pool.unary_unary(method, None, None)] * threads
    else:
        calls = [
            grpc.insecure_channel(target, options=options).unary_unary(method, None, None)
            for _ in range(threads)
        ]
    for call in calls:
        for request in requests[:5]:
            call(request, timeout=30)
    out.put(None)
    go.wait()
    cpu = time.process_time()
    latencies: list[list[float]] = [[] for _ in range(threads)]
    end = time.perf_counter() + seconds

    def loop(index: int) -> None:
        mine, call = latencies[index], calls[index]
        turn = index
        while (before := time.perf_counter()) < end:
            call(requests[turn % len(requests)], timeout=30)
            turn += 1
            mine.append(time.perf_counter() - before)

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    out.put(("calls", [x for mine in latencies for x in mine], time.process_time() - cpu))


def _health(target: str, seconds: float, go: Event, out: Any) -> None:
    channel = grpc.insecure_channel(target, options=[LOCAL_SUBCHANNEL_POOL])
    check = channel.unary_unary(CHECK, None, None)
    request = health_pb2.HealthCheckRequest().SerializeToString()
    check(request, timeout=10)
    out.put(None)
    go.wait()
    cpu = time.process_time()
    latencies = []
    end = time.perf_counter() + seconds
    while (before := time.perf_counter()) < end:
        check(request, timeout=10)
        latencies.append(time.perf_counter() - before)
        time.sleep(0.02)  # a probe's pace, not a load
    out.put(("health", latencies, time.process_time() - cpu))


def server_cpu(pid: int) -> float:
    """CPU seconds used so far by process ``pid`` and its children (a daemon's serving
    processes, an echo server's other processes); Linux only."""
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        pids += [int(child) for child in (task / "children").read_text().split()]
    total = 0
    for each in pids:
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone since it was listed
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
    return total / os.sysconf("SC_CLK_TCK")


def measure(
    method: str,
    target: str,
    keys: int,
    callers: int,
    seconds: float,
    server: int,
    health: str | None = None,
    shared: bool = False,
) -> tuple[list[str], list[float]]:
    """Calls/s, p50 and p99 (ms), client CPU of ``callers`` callers and the CPU per call of the
    server (process id ``server``, with its children); the health Checks' latencies."""
    ctx = mp.get_context("spawn")  # no gRPC state inherited through fork
    processes = min(callers, MAX_PROCESSES)
    go, out = ctx.Event(), ctx.Queue()
    threads = [callers // processes + (1 if i < callers % processes else 0) for i in range(processes)]
    workers = [
        ctx.Process(target=_caller, args=(method, target, keys, n, seconds, go, out, shared)) for n in threads
    ]
    if health is not None:
        workers.append(ctx.Process(target=_health, args=(health, seconds, go, out)))
    for worker in workers:
        worker.start()
    for _ in workers:
        out.get()
    served_before = server_cpu(server)
    go.set()
    results = [out.get() for _ in workers]
    served = server_cpu(server) - served_before
    for worker in workers:
        worker.join()
    cpu = sum(used for _, _, used in results) / seconds
    health_latencies = [x for kind, result, _ in results if kind == "health" for x in result]
    latencies = [x for kind, result, _ in results if kind == "calls" for x in result]
    p50, p99 = percentiles(latencies)
    return [
        f"{len(latencies) / seconds:,.0f}",
        f"{p50 * 1e3:.2f}",
        f"{p99 * 1e3:.2f}",
        f"{cpu:.2f}",
        f"{served / max(1, len(latencies)) * 1e6:.0f}",
    ], health_latencies


def _round_ratio(echo_row: list[Any], get_row: list[Any], callers: int) -> float:
    """The round's measure against its target: Get's p50 over the echo's with one caller,
    else Get's calls/s over the echo's."""
    if callers == 1:
        return float(get_row[1]) / float(echo_row[1])
    return float(get_row[0].replace(",", "")) / float(echo_row[0].replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=4.0, help="per measurement")
    parser.add_argument("--callers", default="1,16,64", help="concurrent callers, comma-separated")
    parser.add_argument("--processes", default="1,2", help="serving processes, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="alternating echo and Get rounds per row")
    args = parser.parse_args()
    callers = [int(c) for c in args.callers.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="bench-serving-"))
    spark = local_session("bench-serving")
    try:
        checkpoint = build_state(spark, workdir, args.keys)
    finally:
        spark.stop()
    rows: list[list[Any]] = []
    verdicts: list[str] = []
    load_before = os.getloadavg()[0]
    for count in (int(p) for p in args.processes.split(",")):
        daemon = LocalDaemon(workdir / f"daemon-{count}", {"bench": str(checkpoint)}, serve_processes=count)
        daemon.start()
        echo: subprocess.Popen[str] | None = None
        pooled: subprocess.Popen[str] | None = None
        looped: subprocess.Popen[str] | None = None
        assert daemon.process is not None
        daemon_pid = daemon.process.pid
        try:
            with EpochStateClient(daemon.target, timeout=120) as client:
                client.wait_for("bench", 1, timeout=120)
            echo, targets = echo_server(workdir / f"echo-{count}.sock", "--processes", str(count))
            pooled, pooled_targets = echo_server(
                workdir / f"echo-pool-{count}.sock",
                "--processes",
                str(count),
                "--workers",
                str(CallLimits().threads),
            )
            looped, looped_targets = echo_server(
                workdir / f"echo-aio-{count}.sock", "--processes", str(count), "--asyncio"
            )
            for n in callers:
                # The echo and the Get in alternating rounds; the rows and verdicts are those of
                # the round of median ratio, so one round disturbed by the machine decides nothing.
                rounds = []
                for _ in range(args.rounds):
                    echo_row, _ = measure(ECHO, targets[0], args.keys, n, args.seconds, echo.pid)
                    get_row, checks = measure(
                        GET, daemon.target, args.keys, n, args.seconds, daemon_pid, health=daemon.target
                    )
                    rounds.append((_round_ratio(echo_row, get_row, n), echo_row, get_row, checks))
                ratios = ", ".join(f"{r[0]:.2f}" for r in rounds)
                _, echo_row, get_row, checks = sorted(rounds, key=lambda r: r[0])[len(rounds) // 2]
                looped_row, _ = measure(ECHO, looped_targets[0], args.keys, n, args.seconds, looped.pid)
                rows.append([count, "echo", n, *echo_row, ""])
                rows.append([count, "echo, asyncio", n, *looped_row, ""])
                health_p99 = f"{percentiles(checks)[1] * 1e3:.1f}" if checks else ""
                rows.append([count, "Get", n, *get_row, health_p99])
                if n > 1:
                    shared_row, _ = measure(
                        GET, daemon.target, args.keys, n, args.seconds, daemon_pid, shared=True
                    )
                    rows.append([count, "Get, shared", n, *shared_row, ""])
                    pool_row, _ = measure(ECHO, pooled_targets[0], args.keys, n, args.seconds, pooled.pid)
                    per_call = f"echo, a thread per call ({CallLimits().threads})"
                    rows.append([count, per_call, n, *pool_row, ""])
                ratio = float(get_row[0].replace(",", "")) / float(echo_row[0].replace(",", ""))
                cpu_ratio = float(get_row[4]) / float(echo_row[4])
                if n == 1:
                    p50_ratio = float(get_row[1]) / float(echo_row[1])
                    verdicts.append(
                        f"  {count} process(es), 1 caller: Get p50 {p50_ratio:.2f}x echo's "
                        f"(rounds {ratios}) "
                        f"({'met' if p50_ratio <= 1.2 else 'NOT met'}: <= 1.2x); "
                        f"server CPU per call {cpu_ratio:.2f}x echo's"
                    )
                else:
                    looped_ratio = float(looped_row[0].replace(",", "")) / float(echo_row[0].replace(",", ""))
                    verdicts.append(
                        f"  {count} process(es), {n} callers: Get {ratio:.2f}x echo's calls/s "
                        f"(rounds {ratios}; asyncio echo {looped_ratio:.2f}x) "
                        f"({'met' if ratio >= 0.8 else 'NOT met'}: >= 0.8x); health p99 {health_p99} ms "
                        f"({'met' if checks and percentiles(checks)[1] < 0.05 else 'NOT met'}: < 50 ms); "
                        f"server CPU per call {cpu_ratio:.2f}x echo's"
                    )
        finally:
            for server in (echo, pooled, looped):
                if server is not None and server.stdin is not None:
                    server.stdin.close()
                    server.wait(10)
            daemon.stop()
    print(
        f"\nGet of one of {args.keys} keys pinned to epoch 1; {os.cpu_count()} cores; "
        f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}"
    )
    print_table(
        [
            "processes",
            "reads",
            "callers",
            "calls/s",
            "p50 ms",
            "p99 ms",
            "client CPU",
            "server CPU us/call",
            "health p99 ms",
        ],
        rows,
    )
    print("\ntargets:")
    for line in verdicts:
        print(line)


if __name__ == "__main__":
    main()
