"""A whole epoch into Arrow: the client against Spark's own reader, in the same run.

    python bench/arrow_scan.py [--keys 100000] [--epochs 3] [--rounds 5]

Builds the state bench/lookup.py builds (``--keys`` keys in the first epoch, 10,000
of them changed in each later one), follows it with a real daemon process, then
reads every key of one epoch (the last but one) into Arrow:

(a) Spark's reader, ``spark.read.format("statestore").option("batchId", e)``, into
``toArrow()`` and ``toPandas()``: the first read of the session (cold: the JVM plans
and loads the state store) and the median of ``--rounds`` later ones (warm);
(b) the client, ``epochstate.client.arrow.scan_table`` over TCP and the Unix socket,
``scan_pandas``, and the client's own ``scan`` into ``Lookup`` objects;
(c) where (b)'s time goes: the Scan calls alone (pages as bytes, one after the other:
the daemon and gRPC), parsing those pages (protobuf), building the Arrow batches
from the parsed pages (the client's decoding).

Each row of (b) and (c) is the median of ``--rounds`` reads taken in interleaved
rounds, with the CPU seconds the client process and the daemon process spent on one
read ("server": Spark's JVM for (a), the daemon for (b) and (c)). Spark is stopped
before (b): its JVM keeps a core busy even when idle.
Targets: >= 10x faster than Spark's warm ``toArrow()``, >= 300,000 rows/s into Arrow.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ["TZ"] = "UTC"
time.tzset()
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from bench.lookup import build_state  # noqa: E402
from bench.table import print_table  # noqa: E402
from epochstate.client import EpochStateClient  # noqa: E402
from epochstate.client.arrow import scan_pandas, scan_table, state_batch, state_schema  # noqa: E402
from epochstate.devtools.local_daemon import LocalDaemon  # noqa: E402
from epochstate.devtools.spark_session import local_session  # noqa: E402
from epochstate.v1 import epochstate_pb2 as pb  # noqa: E402

SCAN = "/epochstate.v1.EpochState/Scan"


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Timings:
    """Wall clock and CPU seconds (this process; the server: the daemon, or Spark's JVM)
    of each call of each row."""

    def __init__(self) -> None:
        self.server_pid = 0
        self.samples: dict[str, list[tuple[float, float, float]]] = {}

    def run(self, name: str, call: Callable[[], Any]) -> Any:
        wall, cpu, server = time.perf_counter(), time.process_time(), process_cpu(self.server_pid)
        result = call()
        taken = (
            time.perf_counter() - wall,
            time.process_time() - cpu,
            process_cpu(self.server_pid) - server,
        )
        self.samples.setdefault(name, []).append(taken)
        return result

    def median(self, name: str, column: int = 0) -> float:
        return statistics.median(s[column] for s in self.samples[name])


def raw_pages(channel: Any, epoch: int) -> list[bytes]:
    """Every Scan page of ``epoch`` as the bytes the daemon sent, one call after the other."""
    call = channel.unary_unary(SCAN, request_serializer=pb.ScanRequest.SerializeToString)
    request = pb.ScanRequest(
        store=pb.StoreRef(job="bench"), epoch=pb.EpochSelector(exact=epoch), limit=10_000
    )
    pages = []
    while True:
        page = call(request, timeout=120)
        pages.append(page)
        token = pb.ScanResponse.FromString(page).next_page_token
        if not token:
            return pages
        request.page_token = token


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--changed", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="epochstate-bench-arrow-"))
    spark = local_session("bench-arrow", conf={"spark.sql.session.timeZone": "UTC"})
    daemon: LocalDaemon | None = None
    try:
        print(f"building state: {args.keys} keys, {args.epochs} epochs ...", file=sys.stderr)
        checkpoint = build_state(spark, workdir, args.keys, args.epochs, args.changed)
        epoch = args.epochs - 2
        daemon = LocalDaemon(workdir / "daemon", {"bench": str(checkpoint)}).start()
        daemon.wait_for_epoch("bench", args.epochs - 1, timeout=300)
        assert daemon.process is not None
        timings = Timings()
        timings.server_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())

        def reader() -> Any:
            return spark.read.format("statestore").option("batchId", epoch).load(str(checkpoint))

        cold = timings.run("(a) Spark reader, toArrow(), cold", lambda: reader().toArrow())
        for _ in range(args.rounds):
            timings.run("(a) Spark reader, toArrow(), warm", lambda: reader().toArrow())
            timings.run("(a) Spark reader, toPandas(), warm", lambda: reader().toPandas())
        spark_rows = cold.num_rows
        spark_table = cold
        spark.stop()
        timings.server_pid = daemon.process.pid

        clients = {"TCP": EpochStateClient(daemon.target, timeout=120)}
        if daemon.unix_target:
            clients["Unix socket"] = EpochStateClient(daemon.unix_target, timeout=120)
        tcp = clients["TCP"]
        store = tcp.describe("bench").store()
        rows: dict[str, Callable[[], Any]] = {
            f"(b) scan_table, {transport}": functools.partial(scan_table, c, "bench", epoch=epoch)
            for transport, c in clients.items()
        }
        rows["(b) scan_pandas, TCP"] = lambda: scan_pandas(tcp, "bench", epoch=epoch)
        rows["(b) client.scan into Lookups, TCP"] = lambda: sum(
            1 for _ in tcp.scan("bench", epoch=epoch, page_size=10_000, limit=None)
        )
        rows["(c) Scan calls alone (bytes), TCP"] = lambda: raw_pages(tcp._channel, epoch)
        pages = raw_pages(tcp._channel, epoch)
        rows["(c) parse the pages (protobuf)"] = lambda: [pb.ScanResponse.FromString(p) for p in pages]
        parsed = [pb.ScanResponse.FromString(p) for p in pages]
        schema = state_schema(store)
        rows["(c) Arrow batches from parsed pages"] = lambda: [
            state_batch(p.records, store, schema) for p in parsed
        ]
        for call in rows.values():  # warm every path once
            call()
        load_before = os.getloadavg()[0]
        for turn in range(args.rounds):
            order = list(rows.items()) if turn % 2 == 0 else list(rows.items())[::-1]
            for name, call in order:
                timings.run(name, call)
        load_after = os.getloadavg()[0]

        ours = scan_table(tcp, "bench", epoch=epoch)
        same = ours.num_rows == spark_rows and sorted(
            ours.select(["key", "value", "partition_id"]).to_pylist(), key=lambda r: r["key"]["user"]
        ) == sorted(spark_table.to_pylist(), key=lambda r: r["key"]["user"])

        table_rows = []
        for name in timings.samples:
            wall = timings.median(name)
            table_rows.append(
                (
                    name,
                    f"{wall:.3f}",
                    f"{spark_rows / wall:,.0f}",
                    f"{timings.median(name, 1):.3f}",
                    f"{timings.median(name, 2):.3f}",
                    str(len(timings.samples[name])),
                )
            )
        print()
        print(
            f"state: {args.keys:,} keys, epoch {epoch} ({spark_rows:,} rows); {os.cpu_count()} cores; "
            f"load average {load_before:.1f} -> {load_after:.1f} during (b) and (c); "
            f"client's table equals Spark's: {same}"
        )
        print_table(
            ("measurement", "wall (s)", "rows/s", "client CPU (s)", "server CPU (s)", "reads"), table_rows
        )
        best = min(timings.median(f"(b) scan_table, {t}") for t in clients)
        spark_warm = timings.median("(a) Spark reader, toArrow(), warm")
        spark_cold = timings.median("(a) Spark reader, toArrow(), cold")
        rate = spark_rows / best
        print()
        print("targets:")
        print(
            f"  >= 10x faster than Spark's reader (warm toArrow):  {spark_warm / best:.1f}x  "
            f"{'met' if spark_warm / best >= 10 else 'NOT met'} (cold: {spark_cold / best:.1f}x)"
        )
        print(
            f"  >= 300,000 rows/s into Arrow:                      {rate:,.0f}  "
            f"{'met' if rate >= 300_000 else 'NOT met'}"
        )
        # On a shared machine the wall clock waits for other processes too; the client and
        # the daemon overlap (a page is decoded while the next is made), so on two free
        # cores a read takes about the larger of their CPU times.
        tcp_row = "(b) scan_table, TCP"
        bound = max(timings.median(tcp_row, 1), timings.median(tcp_row, 2))
        spark_cpu = timings.median("(a) Spark reader, toArrow(), warm", 2)
        print(
            f"  (CPU per read: client {timings.median(tcp_row, 1):.3f} s, daemon "
            f"{timings.median(tcp_row, 2):.3f} s; Spark's JVM {spark_cpu:.3f} s; with a free core "
            f"each, about {spark_rows / bound:,.0f} rows/s)"
        )
        for c in clients.values():
            c.close()
    finally:
        if daemon is not None:
            daemon.stop()
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
