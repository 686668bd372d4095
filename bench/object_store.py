"""Following a checkpoint on an object store against the same checkpoint on local disk.

    python bench/object_store.py [--keys 100000] [--epochs 6] [--changed 10000]

A real S3-protocol server (moto's server mode) runs on loopback. For each state
store provider Spark builds an aggregation state locally, a mirror uploads it, and
then, with Spark stopped, on one thread of this process, the same checkpoint is
ingested twice into fresh stores, once from its local path and once from ``s3://``:

(b) full load of epoch 0 and (c) every later epoch, in rows/s, and for S3 the
    requests made per later epoch against the state files that epoch changed
    (one delta or changelog per partition; for snapshot-only RocksDB, the new zip
    and the table files it adds): with the listener's reports (each epoch named
    with its query run, as when the listener is attached), and polling only (a
    third ingest of the same checkpoint).

(e) freshness: a daemon follows an ``s3://`` checkpoint (RocksDB with changelogs)
    while a mirror uploads Spark's files as they appear (state files before
    ``commits/<n>``), the listener pushing each commit; from Spark's commit (the
    local ``commits/<n>``) to the epoch being queryable.

moto answers from memory on this machine: the figures show our overhead and request
counts, not a cloud's latency.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ["TZ"] = "UTC"
time.tzset()
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from bench.ingest import PROVIDERS, Query, build_checkpoint, changed_users, percentiles  # noqa: E402
from bench.table import print_table  # noqa: E402
from epochstate.client import EpochStateClient  # noqa: E402
from epochstate.core.storage.location import StorageFactory, configure  # noqa: E402
from epochstate.daemon.gc_tuning import freeze_startup_objects, tune_for_ingest  # noqa: E402
from epochstate.daemon.ingest.follower import EpochPublisher, JobFollower  # noqa: E402
from epochstate.daemon.runtime import NoRegistry  # noqa: E402
from epochstate.daemon.store.versioned import VersionedStore  # noqa: E402
from epochstate.devtools.local_daemon import LocalDaemon  # noqa: E402
from epochstate.devtools.object_store import CheckpointMirror, S3Server  # noqa: E402
from epochstate.devtools.spark_session import local_session  # noqa: E402


def changed_files(checkpoint: Path, version: int) -> int:
    """The state files Spark wrote for ``version``: deltas or changelogs, or a zip plus
    the table files it names that the previous zip did not."""
    files = [p for p in (checkpoint / "state").rglob("*") if p.is_file()]
    own = [p for p in files if p.name in (f"{version}.delta", f"{version}.changelog")]
    if own:
        return len(own)
    zips = [p for p in files if p.name == f"{version}.zip"]
    previous = {p.parent: p for p in files if p.name == f"{version - 1}.zip"}
    count = 0
    for zip_path in zips:
        count += 1 + len(_tables(zip_path) - _tables(previous.get(zip_path.parent)))
    return count


def _tables(zip_path: Path | None) -> set[str]:
    import json
    import zipfile

    if zip_path is None:
        return set()
    with zipfile.ZipFile(zip_path) as archive:
        lines = archive.read("metadata").decode().splitlines()
    return {f["dfsSstFileName"] for f in json.loads(lines[1]).get("sstFiles", [])}


def cpu_seconds(pid: int | None) -> float:
    """CPU time (user + system) of process ``pid`` so far; 0 without one."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ingest(
    workdir: Path,
    location: str,
    factory: StorageFactory,
    epochs: int,
    trace: bool = False,
    listener: bool = True,
    server_pid: int | None = None,
) -> dict[str, float]:
    """Ingest every epoch; ``listener``: with the reports the Spark listener sends
    (every epoch, one query run), as the daemon runs when the listener is attached.

    Besides wall-clock rates, the later epochs' CPU time is taken: this process's
    (the ingest and its read-ahead threads) and the S3 server's (``server_pid``),
    which shares the machine's cores with it."""
    configure(factory)
    if trace:
        factory.stats.requests = []
    publisher: EpochPublisher = NoRegistry()
    store = VersionedStore(workdir / "store")
    try:
        follower = JobFollower("bench", location, store, publisher, 1000, scratch_dir=workdir)
        if listener:
            query_id = follower.entry.descriptor.query_id
            for epoch in follower.checkpoint.committed_epochs():
                follower.reported(epoch, run_id="bench-run", query_id=query_id)
        before = sum(factory.stats.snapshot().get(op, 0) for op in ("list", "head", "get", "get_range"))
        first = follower.step()
        assert first is not None and first.epoch == 0
        after_full = sum(factory.stats.snapshot().get(op, 0) for op in ("list", "head", "get", "get_range"))
        written, seconds = 0, 0.0
        cpu_before, server_before = time.process_time(), cpu_seconds(server_pid)
        while (stats := follower.step()) is not None:
            written += stats.versions_written
            seconds += stats.seconds
            if factory.stats.requests is not None:
                print_trace(location, stats.epoch, factory.stats.requests)
                factory.stats.requests.clear()
        cpu = time.process_time() - cpu_before
        server_cpu = cpu_seconds(server_pid) - server_before
        after = sum(factory.stats.snapshot().get(op, 0) for op in ("list", "head", "get", "get_range"))
        return {
            "cpu_rate": written / cpu,
            "server_ms_per_epoch": 1000 * server_cpu / (epochs - 1),
            "full_rows": first.versions_written,
            "full_rate": first.versions_written / first.seconds,
            "rate": written / seconds,
            "rows": written,
            "full_requests": after_full - before,
            "requests_per_epoch": (after - after_full) / (epochs - 1),
        }
    finally:
        store.close()


def median_run(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the rounds."""
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def print_trace(location: str, epoch: int, requests: list[tuple[str, str]]) -> None:
    root = location.split("://", 1)[-1]
    print(f"  epoch {epoch}: {len(requests)} requests", file=sys.stderr)
    for op, path in requests:
        print(f"    {op:9} {path.removeprefix(root)}", file=sys.stderr)


def measure_freshness(spark: Any, server: S3Server, workdir: Path, args: argparse.Namespace) -> list[float]:
    from epochstate.spark_plugin import attach

    local = workdir / "cp"
    local.mkdir(parents=True)
    mirror = CheckpointMirror(server, local, server.new_bucket(), "fresh").start()
    daemon = LocalDaemon(
        workdir / "daemon", {"fresh": mirror.uri}, extra_args=["--retention-epochs", "1000"], env=server.env
    )
    query: Query | None = None
    reporter = None
    try:
        # The job's first files must be on S3 before the daemon opens it.
        query = Query(spark, workdir, PROVIDERS["rocksdb changelog"], name="fresh")
        query.feed(range(args.keys))
        mirror.sync()
        daemon.start()
        reporter = attach(spark, daemon.target)
        for epoch in range(1, args.fresh_epochs):
            query.feed(changed_users(epoch, args.keys, args.changed))
        query.stop()
        query = None
        mirror.stop()
        with EpochStateClient(daemon.target, timeout=120) as client:
            client.wait_for("fresh", args.fresh_epochs - 1, timeout=120)
            epochs = client.epochs("fresh")
        lags = []
        for e in epochs:
            if e.epoch == 0:
                continue
            committed = (local / "commits" / str(e.epoch)).stat().st_mtime
            lags.append(e.ingested_at_ms / 1000 - committed)
        return lags
    finally:
        if reporter is not None:
            spark.streams.removeListener(reporter)
            reporter.close()
        if query is not None:
            query.stop()
        daemon.stop()
        for key in PROVIDERS["rocksdb changelog"]:
            spark.conf.unset(key)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--changed", type=int, default=10_000)
    parser.add_argument("--fresh-epochs", type=int, default=10)
    parser.add_argument("--providers", default=",".join(PROVIDERS))
    parser.add_argument(
        "--trace", action="store_true", help="print every S3 request of each later epoch (stderr)"
    )
    parser.add_argument("--no-freshness", action="store_true", help="skip (e)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="rounds of (b) and (c), medians reported (default 3)"
    )
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="epochstate-bench-s3-"))
    server = S3Server(workdir / "s3").start()
    server_pid = server.process.process.pid if server.process and server.process.process else None
    os.environ.update(server.env)
    spark = local_session("bench-object-store", conf={"spark.sql.session.timeZone": "UTC"})
    names = args.providers.split(",")
    built: dict[str, tuple[Path, str]] = {}
    rows: list[tuple[str, ...]] = []
    checks: list[tuple[str, bool]] = []
    try:
        try:
            for name in names:
                print(f"building with Spark: {name} ...", file=sys.stderr)
                checkpoint = build_checkpoint(
                    spark, workdir / name.replace(" ", "-"), name, args.keys, args.epochs, args.changed
                )
                mirror = CheckpointMirror(server, checkpoint, server.new_bucket(), "cp")
                mirror.sync()
                built[name] = (checkpoint, mirror.uri)
            lags: list[float] = []
            if not args.no_freshness:
                print("freshness: daemon following s3:// with the listener ...", file=sys.stderr)
                lags = measure_freshness(spark, server, workdir / "fresh", args)
        finally:
            spark.stop()
        tune_for_ingest()
        freeze_startup_objects()
        for name in names:
            checkpoint, uri = built[name]
            print(f"ingesting: {name}, local then s3 ...", file=sys.stderr)
            base = workdir / name.replace(" ", "-")
            # Rounds of local, S3 and S3 polling, one after the other: the medians of
            # each compare the same stretch of time on a machine whose speed drifts.
            runs: dict[str, list[dict[str, float]]] = {"local": [], "s3": [], "polling": []}
            for r in range(args.repeat):
                runs["local"].append(
                    ingest(
                        base / f"local-{r}",
                        str(checkpoint),
                        StorageFactory(cache_dir=base / f"c1-{r}"),
                        args.epochs,
                    )
                )
                runs["s3"].append(
                    ingest(
                        base / f"s3-{r}",
                        uri,
                        StorageFactory(cache_dir=base / f"c2-{r}"),
                        args.epochs,
                        trace=args.trace and r == 0,
                        server_pid=server_pid,
                    )
                )
                runs["polling"].append(
                    ingest(
                        base / f"polling-{r}",
                        uri,
                        StorageFactory(cache_dir=base / f"c3-{r}"),
                        args.epochs,
                        listener=False,
                    )
                )
            local, remote, polling = (median_run(runs[k]) for k in ("local", "s3", "polling"))
            files = sum(changed_files(checkpoint, v) for v in range(2, args.epochs + 1)) / (args.epochs - 1)
            share = remote["rate"] / local["rate"]
            cpu_share = remote["cpu_rate"] / local["cpu_rate"]
            rows.append(
                (
                    name,
                    "(b) full load, rows/s",
                    f"{local['full_rate']:,.0f}",
                    f"{remote['full_rate']:,.0f}",
                    f"{remote['full_rate'] / local['full_rate']:.0%}",
                )
            )
            rows.append(
                (
                    name,
                    f"(c) {args.epochs - 1} later epochs, rows/s",
                    f"{local['rate']:,.0f}",
                    f"{remote['rate']:,.0f}",
                    f"{share:.0%}",
                )
            )
            rows.append(
                (
                    name,
                    "(c) the same, rows per CPU-s of ingest",
                    f"{local['cpu_rate']:,.0f}",
                    f"{remote['cpu_rate']:,.0f}",
                    f"{cpu_share:.0%}",
                )
            )
            rows.append(
                (
                    name,
                    "(c) S3 server's CPU per later epoch",
                    "-",
                    f"{remote['server_ms_per_epoch']:.0f} ms",
                    "same cores as the ingest",
                )
            )
            rows.append(
                (
                    name,
                    "(c) requests per later epoch",
                    "-",
                    f"{remote['requests_per_epoch']:.1f}",
                    f"files changed {files:.1f}",
                )
            )
            rows.append(
                (
                    name,
                    "(c) the same, polling only",
                    "-",
                    f"{polling['requests_per_epoch']:.1f}",
                    f"rows/s {polling['rate'] / local['rate']:.0%} of local",
                )
            )
            checks.append((f"{name}: ingest on S3 >= 80% of local, wall clock ({share:.0%})", share >= 0.8))
            checks.append(
                (f"{name}: ingest on S3 >= 80% of local, CPU of ingest ({cpu_share:.0%})", cpu_share >= 0.8)
            )
            checks.append(
                (
                    f"{name}: requests per epoch <= 2 + files changed "
                    f"({remote['requests_per_epoch']:.1f} <= {2 + files:.1f})",
                    remote["requests_per_epoch"] <= 2 + files,
                )
            )
            # Without the listener's run ids, each store's schema file is looked at (one HEAD).
            checks.append(
                (
                    f"{name}: polling only, requests per epoch <= 3 + files changed "
                    f"({polling['requests_per_epoch']:.1f} <= {3 + files:.1f})",
                    polling["requests_per_epoch"] <= 3 + files,
                )
            )
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    print()
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"state: {args.keys:,} string keys, {args.epochs} epochs, {args.changed:,} keys changed per later "
        f"epoch; one thread; {os.cpu_count()} cores; load average {load}; S3: moto server on loopback; "
        f"medians of {args.repeat} rounds"
    )
    print_table(("provider", "measurement", "local", "s3", "s3 / local"), rows)
    if lags:
        p50, p99 = percentiles(lags)
        print()
        print(
            f"(e) freshness on S3, Spark's commit -> queryable ({len(lags)} epochs): "
            f"p50 {p50:.3f} s, p99 {p99:.3f} s"
        )
        checks.append((f"freshness p50 <= 1.5 s ({p50:.3f} s)", p50 <= 1.5))
    print()
    print("targets:")
    for text, met in checks:
        print(f"  {text}: {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
