"""The demo: embedded ZooKeeper, the daemon, a streaming job, epoch-pinned lookups.

It shows the read contract at work: a lookup pinned to an epoch gives the same
answer every time it is asked, minutes apart, while the job keeps committing new
epochs and "latest" moves on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from epochstate.client import EpochStateClient, Lookup
from epochstate.devtools.demo_orders import SCHEMA, OrderWriter
from epochstate.devtools.local_daemon import LocalDaemon
from epochstate.devtools.log_files import LogFiles
from epochstate.devtools.query_shutdown import drain, stop_between_batches
from epochstate.devtools.spark_session import local_session

console = Console()

JOB = "orders"
USERS = ["alice", "bob", "carol"]
DRAIN_TIMEOUT = 120.0  # a few batches on a busy machine
STOP_TIMEOUT = 10.0


@dataclass
class DemoOptions:
    workdir: Path
    duration: float = 120.0
    interval: float = 30.0
    trigger_seconds: float = 2.0
    rows_per_second: int = 200


def _spark(logs: LogFiles) -> Any:
    return local_session(
        "epochstate-demo",
        conf={"spark.sql.session.timeZone": "UTC"},
        log4j_file=logs.spark,
        console_file=logs.spark_console,
    )


def _start_query(spark: Any, orders: Path, checkpoint: Path, options: DemoOptions) -> Any:
    from pyspark.sql import functions as F

    totals = (
        spark.readStream.schema(SCHEMA)
        .json(str(orders))
        .groupBy("user")
        .agg(F.count("*").alias("orders"), F.sum("amount").alias("spent"))
    )
    return (
        totals.writeStream.format("noop")
        .outputMode("update")
        .queryName(JOB)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=f"{options.trigger_seconds} seconds")
        .start()
    )


def _table(title: str, lookups: list[Lookup]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("epoch", "user", "orders", "spent"):
        table.add_column(column)
    for lk in lookups:
        orders, spent = ("-", "-") if lk.value is None else (lk.value["count"], lk.value["sum"])
        table.add_row(str(lk.epoch), str(lk.key["user"]), str(orders), str(spent))
    return table


def run(options: DemoOptions) -> int:
    """Run the demo; returns a process exit code (0 when every check held)."""
    from epochstate.devtools.zookeeper import EmbeddedZooKeeper
    from epochstate.spark_plugin.listener import attach

    workdir = options.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    logs = LogFiles(workdir / "logs").fresh()
    logs.route_python_logging()
    run_id = int(time.time())
    checkpoint = workdir / f"checkpoint-{run_id}"
    writer = OrderWriter(workdir / f"orders-{run_id}", options.rows_per_second)
    with console.status("starting ZooKeeper (embedded, from the pyspark jars)"):
        zookeeper = EmbeddedZooKeeper(workdir / "zookeeper", log_path=logs.zookeeper).start()
    console.print(f"[green]✓[/green] ZooKeeper on {zookeeper.connect_string}")
    console.print(
        f"  logs: {logs.names(logs.spark, logs.spark_console, logs.daemon, logs.zookeeper, logs.demo)}",
        soft_wrap=True,
    )
    daemon = None
    spark = None
    query = None
    client = None
    try:
        with console.status("starting the epochstate daemon"):
            daemon = LocalDaemon(
                workdir / "daemon",
                {},
                zookeeper=zookeeper.connect_string,
                extra_args=["--node", "demo-node"],
                log_path=logs.daemon,
            ).start(timeout=120)
            target = daemon.target
        console.print(f"[green]✓[/green] daemon serving gRPC on {target}")
        with console.status("starting Spark and the streaming job"):
            spark = _spark(logs)
            reporter = attach(spark, target, checkpoints={JOB: str(checkpoint)})
            query = _start_query(spark, writer.directory, checkpoint, options)
            writer.start()
        console.print(
            f"[green]✓[/green] streaming job {JOB!r}: count and sum of orders per user "
            f"({options.rows_per_second} orders/s as JSON files), "
            f"a micro-batch every {options.trigger_seconds:g} s"
        )
        client = EpochStateClient(target, timeout=30)
        client.follow(JOB, str(checkpoint))
        with console.status("waiting for the first epochs to commit"):
            pinned_epoch = client.wait_for(JOB, 2, timeout=180)
        pinned = client.multi_get(JOB, [[u] for u in USERS], epoch=pinned_epoch)
        console.print(_table(f"pinned to epoch {pinned_epoch}", pinned))
        console.print(
            f"(try it yourself meanwhile: epochstate get {JOB} alice --epoch {pinned_epoch} "
            f"--target {target})",
            highlight=False,
        )
        checks_ok = True
        started = time.monotonic()
        latest_seen = [pinned_epoch]
        while time.monotonic() - started < options.duration:
            time.sleep(min(options.interval, max(0.0, options.duration - (time.monotonic() - started))))
            again = client.multi_get(JOB, [[u] for u in USERS], epoch=pinned_epoch)
            latest = client.multi_get(JOB, [[u] for u in USERS], epoch="latest")
            same = again == pinned
            checks_ok &= same
            latest_seen.append(latest[0].epoch)
            elapsed = time.monotonic() - started
            mark = "[green]identical[/green]" if same else "[red]DIFFERENT[/red]"
            console.print(
                f"after {elapsed:5.0f} s: epoch {pinned_epoch} asked again -> {mark}; "
                f"latest is now epoch {latest[0].epoch}"
            )
            console.print(_table(f"latest (epoch {latest[0].epoch})", latest))
        moved = latest_seen[-1] > pinned_epoch
        agrees = _spark_agrees(spark, checkpoint, pinned_epoch, pinned)
        epochs_in_zk = _epochs_in_zookeeper(zookeeper.connect_string)
        console.print()
        console.print(
            f"{'[green]✓[/green]' if checks_ok else '[red]✗[/red]'} the pinned lookup at epoch "
            f"{pinned_epoch} gave the same answer {len(latest_seen) - 1} more time(s)"
        )
        console.print(
            f"{'[green]✓[/green]' if moved else '[red]✗[/red]'} latest moved on: "
            f"epoch {pinned_epoch} -> {latest_seen[-1]}"
        )
        console.print(
            f"[green]✓[/green] ZooKeeper holds {epochs_in_zk} registered epoch(s) of {JOB!r}; "
            f"the listener pushed {reporter.sent} report(s)"
        )
        console.print(
            f"{'[green]✓[/green]' if agrees else '[red]✗[/red]'} Spark's own state reader "
            f'(format "statestore", batchId {pinned_epoch}) gives the same answer'
        )
        return 0 if checks_ok and moved and agrees else 1
    finally:
        # The orders first; the job once it has processed them (between batches, so
        # no write is cut off); then Spark, the daemon it reports to, and ZooKeeper.
        if writer.is_alive():
            writer.stop()
        if query is not None:
            with console.status("letting the job finish its batches, then stopping it"):
                why = drain(query, DRAIN_TIMEOUT)
                if why is not None:
                    console.print(f"[yellow]![/yellow] job {JOB!r} did not settle before stopping: {why}")
                stop_between_batches(query, STOP_TIMEOUT)
        if spark is not None:
            spark.stop()
        if client is not None:
            client.close()
        if daemon is not None:
            daemon.stop()
        zookeeper.stop()


def _spark_agrees(spark: Any, checkpoint: Path, epoch: int, lookups: list[Lookup]) -> bool:
    rows = spark.read.format("statestore").option("batchId", epoch).load(str(checkpoint)).collect()
    state = {r.key.user: tuple(r.value) for r in rows}  # Spark's Row and the client's Struct are tuples
    return all(state.get(lk.key["user"]) == lk.value for lk in lookups)


def _epochs_in_zookeeper(connect: str) -> int:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=connect)
    zk.start(timeout=30)
    try:
        path = f"/epochstate/jobs/{JOB}/epochs"
        return len(zk.get_children(path)) if zk.exists(path) else 0
    finally:
        zk.stop()
        zk.close()
