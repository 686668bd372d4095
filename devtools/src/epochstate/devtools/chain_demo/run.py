"""``epochstate demo-chain``: two chained jobs with aligned epochs, and lookups pinned across them.

Starts an embedded ZooKeeper, a Kafka-protocol broker (tansu), the daemon and
Spark; writes issue and pull-request comments; runs job 1 (hot issues, into an
aligned subject) and job 2 (pull-request hotness). For every batch of job 2 it
looks up job 1's state at the epoch aligned with that batch and checks that it
explains job 2's output exactly, while "latest" may already be ahead.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from rich.console import Console

from epochstate.client import EpochStateClient
from epochstate.devtools.chain_demo.aligned import AlignedState, comments_by_issue, issue_comments_aligned
from epochstate.devtools.chain_demo.jobs import (
    HOT_ISSUES,
    PR_HOTNESS,
    Wiring,
    start_hot_issues,
    start_pr_hotness,
)
from epochstate.devtools.chain_demo.workload import CommentWriter, Workload
from epochstate.devtools.demo_services import start_services
from epochstate.devtools.log_files import LogFiles
from epochstate.devtools.query_shutdown import drain, stop_between_batches
from epochstate.devtools.spark_session import local_session

console = Console(highlight=False, soft_wrap=True)
FIRST_BATCH_TIMEOUT = 300.0  # Spark, two queries and their Python workers on a busy machine
MAX_RESTARTS = 5
DRAIN_TIMEOUT = 120.0  # a few batches of each job on a busy machine
STOP_TIMEOUT = 10.0


@dataclass
class ChainDemoOptions:
    workdir: Path
    duration: float = 60.0
    trigger_seconds: float = 2.0
    comments_per_second: float = 20.0


@dataclass
class Checked:
    batches: int = 0
    rows: int = 0
    mismatches: int = 0
    latest_ahead: int = 0
    failure: str | None = None  # why a job stopped


class Jobs:
    """The demo's streaming queries, upstream first; one that fails starts again from its
    checkpoint, a few times.

    On a busy machine a Python worker can miss Spark's fixed 10 s to connect back,
    which fails the query; a restart is what a job's supervisor would do, and the
    aligned source and sink keep it exactly once.
    """

    def __init__(self, starters: dict[str, Callable[[], Any]]) -> None:
        self._starters = starters
        self.queries = {name: start() for name, start in starters.items()}
        self.restarts = 0

    def restart_failed(self) -> str | None:
        """Start failed queries again; why the demo must stop, once they failed too often."""
        for name, query in self.queries.items():
            if query.isActive:
                continue
            reason = str(query.exception()).splitlines()[0]
            self.restarts += 1
            if self.restarts > MAX_RESTARTS:
                return f"job {name!r} failed {self.restarts} times, last: {reason}"
            console.print(f"[yellow]![/yellow] job {name!r} failed ({reason}); starting it again")
            self.queries[name] = self._starters[name]()
        return None

    def stop(self) -> None:
        """Stop every job between two of its batches, so that no batch is aborted.

        The jobs' inputs must have stopped. Upstream first, each job processes
        what it has (job 2 then reads every epoch job 1 registered); then,
        downstream first, each is stopped while it waits for its next trigger
        (see ``query_shutdown``). A job that does not settle is stopped anyway,
        and the demo says so.
        """
        with console.status("letting the jobs finish their batches, then stopping them"):
            for name, query in self.queries.items():
                why = drain(query, DRAIN_TIMEOUT)
                if why is not None:
                    console.print(f"[yellow]![/yellow] job {name!r} did not settle before stopping: {why}")
            for query in reversed(self.queries.values()):
                stop_between_batches(query, STOP_TIMEOUT)


def _spark(logs: LogFiles) -> Any:
    return local_session("epochstate-demo-chain", log4j_file=logs.spark, console_file=logs.spark_console)


def _create_subject_topic(bootstrap: str, partitions: int) -> None:
    """Create job 1's subject topic; this process's librdkafka log goes to Python logging (demo.log)."""
    from epochstate.spark_plugin.kafka.admin import TopicAdmin
    from epochstate.spark_plugin.kafka.config import ClientConfig

    # confluent-kafka takes a Logger under "logger" (else librdkafka prints on stderr);
    # ClientConfig types librdkafka's own settings only.
    config = {"bootstrap.servers": bootstrap, "logger": logging.getLogger("epochstate.demo.kafka")}
    TopicAdmin(cast(ClientConfig, config)).create_topic(HOT_ISSUES, partitions)


def run(options: ChainDemoOptions) -> int:
    """Run the demo; the exit code is 0 when every checked batch agreed with job 1's aligned state."""
    from kazoo.client import KazooClient

    from epochstate.spark_plugin.alignment import SubjectRegistry, register
    from epochstate.spark_plugin.alignment.connections import close_shared_clients
    from epochstate.spark_plugin.listener import attach

    directory = options.workdir.resolve() / f"run-{int(time.time())}"
    logs = LogFiles(directory / "logs").fresh()
    logs.route_python_logging()
    workload = Workload(comments_per_second=options.comments_per_second)
    with ExitStack() as stack:
        services = start_services(stack, directory, logs, console)
        zookeeper, broker, daemon = services.zookeeper, services.broker, services.daemon
        _create_subject_topic(broker.bootstrap, 2)
        writer = CommentWriter(directory / "comments", workload)
        wiring = Wiring(
            broker.bootstrap,
            zookeeper.connect_string,
            directory / "comments",
            directory / "checkpoints",
            options.trigger_seconds,
        )
        batches: queue.Queue[tuple[int, list[dict[str, Any]]]] = queue.Queue()
        with console.status("starting Spark and both jobs"):
            spark = _spark(logs)
            # Callbacks run backwards: the comments stop, then the jobs (between
            # batches), then Spark, whose Python workers hold ZooKeeper sessions and
            # Kafka clients, while the daemon, the broker and ZooKeeper still serve.
            stack.callback(close_shared_clients)
            stack.callback(spark.stop)
            register(spark)
            attach(
                spark, daemon.target, checkpoints={j: wiring.checkpoint(j) for j in (HOT_ISSUES, PR_HOTNESS)}
            )
            jobs = Jobs(
                {
                    HOT_ISSUES: lambda: start_hot_issues(spark, wiring, workload),
                    PR_HOTNESS: lambda: start_pr_hotness(
                        spark, wiring, lambda f, b: batches.put((b, [r.asDict() for r in f.collect()]))
                    ),
                }
            )
            stack.callback(jobs.stop)
            writer.start()
            stack.callback(writer.stop)
        console.print(
            f"[green]✓[/green] job 1 {HOT_ISSUES!r}: comments per issue -> subject {HOT_ISSUES!r} "
            f"(aligned sink), every {options.trigger_seconds:g} s\n"
            f"[green]✓[/green] job 2 {PR_HOTNESS!r}: subject (aligned) + pull-request comments "
            "-> hotness per pull request\n"
            f"  {workload.issues} issues over {workload.pull_requests} pull requests, "
            f"{options.comments_per_second:g} comments/s"
        )
        zk = KazooClient(hosts=zookeeper.connect_string)
        zk.start(timeout=30)
        stack.callback(zk.stop)
        client = stack.enter_context(EpochStateClient(daemon.target, timeout=60))
        checked = _follow(batches, jobs, client, SubjectRegistry(zk), workload, options.duration)
    if checked.failure is not None:
        console.print(f"[red]✗[/red] {checked.failure} (logs: {logs.directory})")
    ok = checked.batches > 0 and checked.mismatches == 0 and checked.failure is None
    mark = "[green]✓[/green]" if ok else "[red]✗[/red]"
    console.print(
        f"{mark} {checked.batches} batches of job 2 ({checked.rows} pull-request updates) checked "
        f"against job 1's state pinned to the aligned epoch: {checked.mismatches} mismatch(es); "
        f"'latest' was ahead of job 2 in {checked.latest_ahead} of them"
    )
    return 0 if ok else 1


def _follow(
    batches: queue.Queue[tuple[int, list[dict[str, Any]]]],
    jobs: Jobs,
    client: EpochStateClient,
    registry: Any,
    workload: Workload,
    duration: float,
) -> Checked:
    checked = Checked()
    deadline = time.monotonic() + FIRST_BATCH_TIMEOUT
    issues = list(range(workload.issues))
    while time.monotonic() < deadline:
        checked.failure = jobs.restart_failed()
        if checked.failure is not None:
            break
        try:
            batch, rows = batches.get(timeout=1.0)
        except queue.Empty:
            continue
        state = issue_comments_aligned(client, registry, HOT_ISSUES, HOT_ISSUES, PR_HOTNESS, batch, issues)
        if not rows or state is None:
            continue
        if checked.batches == 0:
            deadline = time.monotonic() + duration
        found = client.multi_get(HOT_ISSUES, [[i] for i in issues], epoch="latest")
        latest = comments_by_issue(issues, found)
        ahead = found[0].epoch > state.epoch
        checked.batches += 1
        checked.latest_ahead += ahead
        console.print(
            f"[bold]job 2 batch {batch}[/bold] read up to subject epoch {state.epoch} "
            f"(= job 1 epoch {state.epoch}); job 1's latest epoch is {found[0].epoch}"
        )
        for row in sorted(rows, key=lambda r: int(r["pr"])):
            checked.rows += 1
            checked.mismatches += _trace_row(row, state, latest, workload)
    return checked


def _trace_row(row: dict[str, Any], state: AlignedState, latest: dict[int, int], workload: Workload) -> bool:
    """Print one pull request's hotness and the pinned lookup that explains it; True on a mismatch."""
    pr = int(row["pr"])
    own_issues = workload.issues_of(pr)
    pinned = sum(state.comments.get(i, 0) for i in own_issues)
    now = sum(latest.get(i, 0) for i in own_issues)
    same = pinned == int(row["issue_comments"])
    mark = "[green]= pinned lookup ✓[/green]" if same else f"[red]≠ pinned lookup {pinned} ✗[/red]"
    note = "" if now == pinned else f"  (latest would say {now})"
    console.print(
        f"  PR {pr}: hotness {row['hotness']} = {row['pr_comments']} own + {row['issue_comments']} "
        f"on issues {own_issues} {mark}{note}"
    )
    return not same
