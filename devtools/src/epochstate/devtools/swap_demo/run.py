"""``epochstate demo-swap``: hand the subject ``counts`` from job v1 to job v2 while it is read.

Starts an embedded ZooKeeper, a Kafka-protocol broker (tansu), the daemon and
Spark; an order producer registers an epoch of ``orders`` every half second;
``counts-v1`` writes ``counts``, ``counts-v2`` runs in shadow and
``counts-reader`` reads ``counts`` aligned. Once both versions run, it plans
the swap at the earliest epoch, follows it with lookups, lets v2 write a few
epochs, stops v1, and prints the counter check, the swap epoch, lookups on
both sides of it and the shadow comparison.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from epochstate.client import EpochStateClient, EpochStateClientError
from epochstate.core.alias.records import AliasRecord
from epochstate.core.alias.registry import AliasRegistry
from epochstate.core.alignment.subjects import SubjectRegistry, wall_clock_ms
from epochstate.core.swap.coordinator import SwapCoordinator
from epochstate.core.swap.records import SwapRecord
from epochstate.core.swap.registry import SwapRegistry
from epochstate.devtools.chain_demo.run import Jobs
from epochstate.devtools.demo_services import start_services
from epochstate.devtools.log_files import LogFiles
from epochstate.devtools.query_shutdown import stop_between_batches
from epochstate.devtools.spark_session import local_session
from epochstate.devtools.swap_demo.jobs import COUNTS, NEW, OLD, READER, Wiring, start_counts, start_reader
from epochstate.devtools.swap_demo.lookups import ALIAS, lookup
from epochstate.devtools.swap_demo.orders import ORDERS, USERS, OrderProducer
from epochstate.devtools.swap_demo.report import OK, console, counts_line, mapping, report

FIRST_BATCH_TIMEOUT = 300.0  # Spark, three queries and their Python workers on a busy machine
SWAP_TIMEOUT = 360.0
SWAP_DEADLINE = 300.0  # seconds for both jobs to prepare (a busy machine runs a batch in 15 s)
STOP_TIMEOUT = 10.0
POLL = 0.25
LEAD = 1  # input epochs the producer may run ahead of the slower version


@dataclass
class SwapDemoOptions:
    workdir: Path
    trigger_seconds: float = 1.0
    epochs_after: int = 2  # epochs v2 writes before the demo stops
    orders_per_epoch: int = 6


@dataclass
class Seen:
    """What the demo saw: the reader's rows per batch, and why it stopped early (None: it did not)."""

    rows: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    failure: str | None = None


def _create_topics(bootstrap: str) -> None:
    from epochstate.spark_plugin.kafka.admin import TopicAdmin
    from epochstate.spark_plugin.kafka.config import ClientConfig

    config = {"bootstrap.servers": bootstrap, "logger": logging.getLogger("epochstate.demo.kafka")}
    admin = TopicAdmin(cast(ClientConfig, config))
    admin.create_topic(ORDERS, 1)
    admin.create_topic(COUNTS, 2)


def run(options: SwapDemoOptions) -> int:
    """Run the demo; the exit code is 0 when the swap completed exactly once and v2's shadow agreed."""
    from kazoo.client import KazooClient

    from epochstate.spark_plugin.alignment import register
    from epochstate.spark_plugin.alignment.connections import close_shared_clients
    from epochstate.spark_plugin.listener import attach

    directory = options.workdir.resolve() / f"run-{int(time.time())}"
    logs = LogFiles(directory / "logs").fresh()
    logs.route_python_logging()
    seen = Seen()
    with ExitStack() as stack:
        services = start_services(stack, directory, logs, console)
        zookeeper, broker, daemon = services.zookeeper, services.broker, services.daemon
        _create_topics(broker.bootstrap)
        zk = KazooClient(hosts=zookeeper.connect_string)
        zk.start(timeout=30)
        stack.callback(zk.stop)
        subjects = SubjectRegistry(zk)
        AliasRegistry(zk).define(AliasRecord(ALIAS, OLD, COUNTS, ORDERS, wall_clock_ms()))
        producer = OrderProducer(
            broker.bootstrap,
            subjects,
            options.orders_per_epoch,
            pace=lambda epoch: epoch <= min(_read(subjects, j) for j in (OLD, NEW)) + LEAD,
        )
        wiring = Wiring(
            broker.bootstrap, zookeeper.connect_string, directory / "checkpoints", options.trigger_seconds
        )
        batches: queue.Queue[tuple[int, list[dict[str, Any]]]] = queue.Queue()
        with console.status("starting Spark and the three jobs"):
            spark = local_session(
                "epochstate-demo-swap",
                conf={
                    # Five users: one state partition (one Python worker a batch) per job is plenty.
                    "spark.sql.shuffle.partitions": "1",
                },
                log4j_file=logs.spark,
                console_file=logs.spark_console,
            )
            stack.callback(close_shared_clients)
            stack.callback(spark.stop)
            register(spark)
            attach(spark, daemon.target, checkpoints={j: wiring.checkpoint(j) for j in (OLD, NEW)})
            producer.start()
            stack.callback(producer.stop)
            starters: dict[str, Callable[[], Any]] = {
                OLD: lambda: start_counts(spark, wiring, OLD),
                NEW: lambda: start_counts(spark, wiring, NEW),
                READER: lambda: start_reader(
                    spark, wiring, lambda f, b: batches.put((b, [r.asDict() for r in f.collect()]))
                ),
            }
            jobs = Jobs(starters)
            stack.callback(jobs.stop)
        console.print(
            f"{OK} orders: {options.orders_per_epoch} an epoch into subject {ORDERS!r}, "
            f"at most {LEAD} epochs ahead of the jobs\n"
            f"{OK} job v1 {OLD!r}: orders per user -> subject {COUNTS!r} (aligned sink)\n"
            f"{OK} job v2 {NEW!r}: orders and amount per user -> {COUNTS!r}, in shadow (shadow=true)\n"
            f"{OK} downstream {READER!r}: reads {COUNTS!r} aligned\n"
            f"{OK} lookups read alias {ALIAS!r}: {OLD!r}'s state up to the swap epoch, {NEW!r}'s after it"
        )
        client = stack.enter_context(EpochStateClient(daemon.target, timeout=60))
        coordinator = SwapCoordinator(subjects, SwapRegistry(zk))
        swap = _swap(jobs, subjects, coordinator, client, batches, seen, options)
        producer.stop()
        if swap is not None and swap.state == "done":
            # v1's part ends with the swap epoch; a user stops it now.
            stop_between_batches(jobs.queries.pop(OLD), STOP_TIMEOUT)
        jobs.stop()
        _collect(batches, seen)
        seen.failure = seen.failure or producer.failure
        rows = [row for batch in sorted(seen.rows) for row in seen.rows[batch]]
        code = report(rows, seen.failure, swap, subjects, client, producer.written)  # the daemon still serves
    return code


def _collect(batches: queue.Queue[tuple[int, list[dict[str, Any]]]], seen: Seen) -> None:
    while True:
        try:
            batch, rows = batches.get_nowait()
        except queue.Empty:
            return
        seen.rows[batch] = rows  # a batch run again replaces its rows


def _wait(
    jobs: Jobs,
    batches: queue.Queue[tuple[int, list[dict[str, Any]]]],
    seen: Seen,
    timeout: float,
    until: Callable[[], bool],
    every: Callable[[], None] = lambda: None,
) -> bool:
    """Poll ``until`` (restarting failed jobs, collecting the reader's rows) for up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen.failure = jobs.restart_failed()
        if seen.failure is not None:
            return False
        _collect(batches, seen)
        every()
        if until():
            return True
        time.sleep(POLL)
    seen.failure = f"gave up after {timeout:g} s"
    return False


def _read(subjects: SubjectRegistry, job: str) -> int:
    """The newest epoch of ``orders`` job ``job`` has read (-1: none)."""
    return max(mapping(subjects, job).values(), default=-1)


def _swap(
    jobs: Jobs,
    subjects: SubjectRegistry,
    coordinator: SwapCoordinator,
    client: EpochStateClient,
    batches: queue.Queue[tuple[int, list[dict[str, Any]]]],
    seen: Seen,
    options: SwapDemoOptions,
) -> SwapRecord | None:
    """Plan the swap once both versions run, follow it to done, then let v2 write a few epochs."""
    with console.status("waiting for both versions' first batches"):
        running = _wait(
            jobs,
            batches,
            seen,
            FIRST_BATCH_TIMEOUT,
            lambda: subjects.exists(COUNTS) and min(_read(subjects, OLD), _read(subjects, NEW)) >= 0,
        )
    if not running:
        return None
    record = coordinator.plan(COUNTS, OLD, NEW, deadline=SWAP_DEADLINE)
    planned = time.monotonic()
    console.print(
        f"[bold]swap planned[/bold]: subject {COUNTS!r} from {OLD!r} to {NEW!r} at input epoch "
        f"{record.epoch} of {ORDERS!r} (both jobs prepare in epoch {record.prepare_epoch})"
    )
    last = {"state": record.state, "epoch": -1}
    took = {"state": 0.0}  # seconds from the plan to the newest state

    def follow() -> None:
        nonlocal record
        record = coordinator.status(COUNTS)
        if record.state != last["state"]:
            last["state"] = record.state
            took["state"] = time.monotonic() - planned
            console.print(f"  {took['state']:5.1f} s  swap {record.state}")
        newest = max(_read(subjects, OLD), _read(subjects, NEW))
        if newest > int(last["epoch"]):
            last["epoch"] = newest
            try:
                answer = lookup(client, subjects, newest, USERS)
            except EpochStateClientError:
                answer = None  # the daemon has not seen the job yet
            if answer is not None:
                console.print(f"  {time.monotonic() - planned:5.1f} s  lookup {counts_line(answer)}")

    with console.status("following the swap; looking up the counts of every new epoch"):
        if not _wait(jobs, batches, seen, SWAP_TIMEOUT, lambda: record.state in ("done", "aborted"), follow):
            return record
    if record.state != "done":
        seen.failure = f"the swap was {record.state}: {record.aborted}"
        return record
    console.print(f"  swap done {took['state']:.1f} s after the plan")
    target = (record.handover or 0) + options.epochs_after
    with console.status(f"letting v2 write {options.epochs_after} epochs of {COUNTS!r}"):
        _wait(
            jobs,
            batches,
            seen,
            SWAP_TIMEOUT,
            lambda: max(subjects.epochs(COUNTS), default=-1) >= target,
            follow,
        )
    return record
