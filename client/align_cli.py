"""``epochstate align``: move sources of Kafka subjects between unaligned and aligned.

Talks to ZooKeeper directly (the coordinator is a recipe on the source znodes,
``epochstate.daemon.alignment.coordinator``). Exit codes as the rest of
the CLI: 0 success; 2 bad usage; 3 unknown subject or source; 4 a command the
source's state does not allow (or a bad name); 5 the source did not answer
within ``--wait``; 6 ZooKeeper unavailable.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from epochstate.daemon.alignment.commands import Command
    from epochstate.daemon.alignment.coordinator import AlignmentCoordinator, SourceStatus

align_app = typer.Typer(
    name="align",
    help="Align sources of Kafka subjects with the subject's epochs: catch-up, align, abort, status.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)
T = TypeVar("T")

ZooKeeperOpt = Annotated[
    str,
    typer.Option(
        "--zookeeper",
        "-z",
        envvar="EPOCHSTATE_ZOOKEEPER",
        help="ZooKeeper connect string: host:port,... and an optional /chroot",
    ),
]
RootOpt = Annotated[str, typer.Option("--root", help="the epochstate root znode")]
WaitOpt = Annotated[
    float, typer.Option("--wait", help="seconds to wait until the source did it (0: do not wait)")
]
TimeoutOpt = Annotated[float, typer.Option("--timeout", help="seconds to wait for ZooKeeper")]
Topic = Annotated[str, typer.Argument(help="the subject (Kafka topic)")]
Job = Annotated[str, typer.Argument(help="the reading job (the source's option job)")]


def _exit_code(error: Exception) -> int:
    from epochstate.daemon.alignment import errors

    table: list[tuple[type[Exception], int]] = [
        (errors.SubjectNotFound, 3),
        (errors.SourceNotFound, 3),
        (errors.InvalidTransition, 4),
        (errors.InvalidOption, 4),
        (errors.NotAnswered, 5),
        (errors.RegistryUnavailable, 6),
    ]
    return next((code for kind, code in table if isinstance(error, kind)), 1)


def _fail(message: str, code: int) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}", highlight=False, markup=True)
    return typer.Exit(code)


@contextmanager
def _coordinator(zookeeper: str, root: str, timeout: float) -> Iterator[AlignmentCoordinator]:
    try:
        from kazoo.handlers.threading import KazooTimeoutError

        from epochstate.daemon.alignment.coordinator import AlignmentCoordinator
        from epochstate.daemon.alignment.errors import AlignmentError
        from epochstate.daemon.alignment.layout import SubjectLayout
        from epochstate.daemon.alignment.subjects import SubjectRegistry
        from epochstate.daemon.registry.client import new_client
    except ImportError as error:
        raise _fail(f"align needs the spark extra: pip install 'epochstate[spark]' ({error})", 1) from None
    try:
        SubjectLayout(root)
    except AlignmentError as error:
        raise _fail(f"--root: {error}", 2) from None
    client = new_client(zookeeper)
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        client.close()
        raise _fail(f"ZooKeeper {zookeeper} did not answer within {timeout:g} s", 6) from None
    try:
        yield AlignmentCoordinator(SubjectRegistry(client, root, timeout=timeout))
    except AlignmentError as error:
        raise _fail(str(error), _exit_code(error)) from None
    finally:
        client.stop()
        client.close()


def _row(status: SourceStatus) -> dict[str, Any]:
    record, report = status.record, status.record.report
    command = record.command
    return {
        "job": status.job,
        "mode": record.mode,
        "state": status.state,
        "command": None if command is None else str(command),
        "command_id": None if command is None else command.id,
        "answered": status.answered,
        "subject_epoch": None if report is None else report.subject_epoch,
        "batch": None if report is None else report.batch,
        "position": {} if report is None else {str(p): o for p, o in sorted(report.position.items())},
        "refused": None if report is None else report.refused,
        "updated_at_ms": record.updated_at_ms,
    }


def _show(value: Any) -> str:
    return "-" if value is None else str(value)


@align_app.command()
def status(
    topic: Topic,
    zookeeper: ZooKeeperOpt = "127.0.0.1:2181",
    root: RootOpt = "/epochstate",
    timeout: TimeoutOpt = 10.0,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """Show each source of a subject: mode, state, newest command, last subject epoch, position."""
    with _coordinator(zookeeper, root, timeout) as coordinator:
        rows = [_row(s) for s in coordinator.status(topic)]
    if as_json:
        out.print_json(json.dumps(rows))
        return
    table = Table("job", "mode", "state", "command", "subject epoch", "batch", "position", "refused")
    for r in rows:
        command = _show(r["command"]) + ("" if r["answered"] else " (not seen yet)")
        position = ", ".join(f"{p}:{o}" for p, o in r["position"].items()) or "-"
        table.add_row(
            r["job"],
            r["mode"],
            r["state"],
            command,
            _show(r["subject_epoch"]),
            _show(r["batch"]),
            position,
            _show(r["refused"]),
        )
    out.print(table)


def _send(
    zookeeper: str,
    root: str,
    timeout: float,
    wait: float,
    topic: str,
    job: str,
    issue: Callable[[AlignmentCoordinator], Command],
) -> None:
    with _coordinator(zookeeper, root, timeout) as coordinator:
        command = issue(coordinator)
        out.print(f"sent {command} (command {command.id}) to source {job!r} of {topic!r}", highlight=False)
        if wait <= 0:
            return
        report = coordinator.wait(topic, job, command, wait)
    if report.refused is not None:
        raise _fail(f"source {job!r} refused {command}: {report.refused}", 4)
    out.print(f"source {job!r} is {report.state} after batch {_show(report.batch)}", highlight=False)


@align_app.command("catch-up")
def catch_up(
    topic: Topic,
    job: Job,
    zookeeper: ZooKeeperOpt = "127.0.0.1:2181",
    root: RootOpt = "/epochstate",
    timeout: TimeoutOpt = 10.0,
    wait: WaitOpt = 0.0,
) -> None:
    """CatchUp: the source reports ready once it has passed the subject's second-to-last epoch."""
    _send(zookeeper, root, timeout, wait, topic, job, lambda c: c.catch_up(topic, job))


@align_app.command()
def align(
    topic: Topic,
    job: Job,
    epoch: Annotated[
        int | None, typer.Option("--epoch", "-e", min=0, help="subject epoch k (default: the first safe one)")
    ] = None,
    zookeeper: ZooKeeperOpt = "127.0.0.1:2181",
    root: RootOpt = "/epochstate",
    timeout: TimeoutOpt = 10.0,
    wait: WaitOpt = 0.0,
) -> None:
    """Align(k): a ready source reads up to the start of subject epoch k, then one batch per epoch."""
    _send(zookeeper, root, timeout, wait, topic, job, lambda c: c.align(topic, job, epoch))


@align_app.command()
def abort(
    topic: Topic,
    job: Job,
    zookeeper: ZooKeeperOpt = "127.0.0.1:2181",
    root: RootOpt = "/epochstate",
    timeout: TimeoutOpt = 10.0,
    wait: WaitOpt = 0.0,
) -> None:
    """Abort: the source reads unaligned again, from where its newest batch ended."""
    _send(zookeeper, root, timeout, wait, topic, job, lambda c: c.abort(topic, job))


@align_app.command()
def prune(
    topic: Topic,
    keep: Annotated[int, typer.Option("--keep", min=2, help="the newest subject epochs always kept")] = 100,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="only show what would be kept and why")] = False,
    zookeeper: ZooKeeperOpt = "127.0.0.1:2181",
    root: RootOpt = "/epochstate",
    timeout: TimeoutOpt = 10.0,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of text")] = False,
) -> None:
    """Apply the subject's retention: delete epochs (and mapping entries) no source or daemon needs.

    The aligned sink does this itself as it writes (option subjectRetention).
    """
    from epochstate.daemon.alignment.retention import SubjectRetention

    with _coordinator(zookeeper, root, timeout) as coordinator:
        coordinator.require_subject(topic)
        retention = SubjectRetention(coordinator.registry, keep)
        deleted: tuple[int, ...] = ()
        entries: dict[str, int] = {}
        if dry_run:
            plan = retention.plan(topic)
        else:
            pruned = retention.prune(topic)
            plan, deleted, entries = pruned.plan, pruned.epochs, dict(pruned.mapping_entries)
    if as_json:
        holds = [{"epoch": h.epoch, "reason": h.reason} for h in plan.holds]
        answer = {"horizon": plan.horizon, "holds": holds, "deleted": list(deleted)}
        out.print_json(json.dumps(answer | {"mapping_entries": entries}))
        return
    out.print(f"subject {topic!r} keeps epochs from {plan.horizon}: {plan.binding.reason}", highlight=False)
    for hold in sorted(plan.holds, key=lambda h: h.epoch):
        out.print(f"  from {hold.epoch}: {hold.reason}", highlight=False)
    if not dry_run:
        span = f"{deleted[0]}..{deleted[-1]}" if deleted else "none"
        out.print(f"deleted epochs {span}, {sum(entries.values())} mapping entries", highlight=False)
