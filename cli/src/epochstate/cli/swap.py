"""``epochstate swap``: hot-swap an output subject from one aligned job to another.

``plan`` writes the swap (the jobs' sinks prepare and commit it in their own
epochs), ``status`` shows the subject's newest swap, ``abort`` stops one before
its commit. Straight on ZooKeeper, or with ``--target`` through a daemon's
``AlignmentAdmin`` (the admin role): the same output either way. Exit codes: 0
success; 2 bad usage; 3 unknown subject or no swap; 4 refused (the reason is
printed: JOBS_NOT_ALIGNED, SWAP_EPOCH_PASSED, NEW_TOO_FAR_BEHIND, SWAP_IN_FLIGHT,
SWAP_COMMITTED) or a bad name; 6 ZooKeeper (or the daemon) unavailable; 7 not
authenticated or not authorized (daemon).

With ``--json`` each command prints one JSON object: the swap, ``{"id", "subject",
"input", "from", "to", "epoch", "prepare_epoch", "state", "prepared",
"committed_epoch", "committed_by", "handover", "aborted_reason",
"aborted_detail", "planned_at_ms", "deadline_ms"}``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from epochstate.cli.align_control import AlignFailure
from epochstate.cli.console import fail
from epochstate.cli.output import print_document, print_line
from epochstate.cli.zookeeper_options import (
    AuthFileOpt,
    JsonOpt,
    RootOpt,
    TargetOpt,
    TimeoutOpt,
    ZooKeeperOpt,
)

if TYPE_CHECKING:
    from epochstate.core.swap.coordinator import SwapCoordinator
    from epochstate.core.swap.records import SwapRecord
    from epochstate.v1 import epochstate_pb2 as pb

swap_app = typer.Typer(
    name="swap",
    help="Hot-swap an output subject from one aligned job to another: plan, status, abort.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
T = TypeVar("T")
SwapRow = dict[str, Any]

SubjectOpt = Annotated[str, typer.Option("--subject", "-s", help="the output subject (Kafka topic)")]


def record_row(record: SwapRecord) -> SwapRow:
    aborted = record.aborted
    return {
        "id": record.id,
        "subject": record.subject,
        "input": record.input,
        "from": record.old,
        "to": record.new,
        "epoch": record.epoch,
        "prepare_epoch": record.prepare_epoch,
        "state": record.state,
        "prepared": dict(sorted(record.prepared.items())),
        "committed_epoch": record.committed_epoch,
        "committed_by": record.committed_by,
        "handover": record.handover,
        "aborted_reason": None if aborted is None else aborted.reason,
        "aborted_detail": None if aborted is None else aborted.detail,
        "planned_at_ms": record.planned_at_ms,
        "deadline_ms": record.deadline_ms,
    }


def message_row(swap: pb.Swap) -> SwapRow:
    """The row :func:`record_row` gives for the same swap."""
    return {
        "id": swap.id,
        "subject": swap.subject,
        "input": swap.input,
        "from": swap.from_job,
        "to": swap.to_job,
        "epoch": swap.epoch,
        "prepare_epoch": swap.prepare_epoch,
        "state": swap.state,
        "prepared": dict(sorted(swap.prepared.items())),
        "committed_epoch": swap.committed_epoch if swap.HasField("committed_epoch") else None,
        "committed_by": swap.committed_by or None,
        "handover": swap.handover if swap.HasField("handover") else None,
        "aborted_reason": swap.aborted_reason or None,
        "aborted_detail": swap.aborted_detail or None,
        "planned_at_ms": swap.planned_at_ms,
        "deadline_ms": swap.deadline_ms,
    }


def _on_zookeeper(
    zookeeper: str, root: str, timeout: float, auth_file: Path | None, action: Callable[[SwapCoordinator], T]
) -> T:
    from epochstate.cli.align_zookeeper import subjects_session
    from epochstate.core.swap.coordinator import SwapCoordinator
    from epochstate.core.swap.errors import SwapError, SwapNotFound
    from epochstate.core.swap.registry import SwapRegistry

    with subjects_session(zookeeper, root, timeout, auth_file) as subjects:
        try:
            return action(SwapCoordinator(subjects, SwapRegistry(subjects.client, root, timeout=timeout)))
        except SwapNotFound as error:
            raise AlignFailure(f"{error.reason}: {error}", 3) from None
        except SwapError as error:
            raise AlignFailure(f"{error.reason}: {error}", 4) from None


def _through_daemon(target: str, timeout: float, action: Callable[[Any], pb.Swap]) -> SwapRow:
    from epochstate.cli.align_daemon import DaemonControl

    return message_row(DaemonControl(target, timeout).call(lambda client: action(client.alignment)))


def _swap_row(
    where: tuple[str | None, str, str, float, Path | None],
    on_daemon: Callable[[Any], pb.Swap],
    on_zookeeper: Callable[[SwapCoordinator], SwapRow],
    daemon_timeout: float | None = None,
) -> SwapRow:
    """The swap row one call gives: through the daemon ``target`` when one is named, else
    straight on ZooKeeper. ``where``: (target, zookeeper, root, timeout, auth file)."""
    target, zookeeper, root, timeout, auth_file = where
    try:
        if target:
            return _through_daemon(target, timeout if daemon_timeout is None else daemon_timeout, on_daemon)
        return _on_zookeeper(zookeeper, root, timeout, auth_file, on_zookeeper)
    except AlignFailure as failure:
        raise fail(str(failure), failure.code) from None


def _show(row: SwapRow, as_json: bool) -> None:
    if as_json:
        print_document(row)
        return
    print_line(
        f"swap {row['id']} of {row['subject']!r}: {row['from']} -> {row['to']} at epoch {row['epoch']} "
        f"of {row['input']!r} (both prepare in {row['prepare_epoch']}): {row['state']}"
    )
    if row["prepared"]:
        print_line("  prepared: " + ", ".join(f"{job} in {epoch}" for job, epoch in row["prepared"].items()))
    if row["committed_epoch"] is not None:
        print_line(f"  committed in epoch {row['committed_epoch']} of {row['committed_by']}")
    if row["handover"] is not None:
        print_line(f"  {row['to']} writes output epochs from {row['handover'] + 1} on")
    if row["aborted_reason"] is not None:
        print_line(f"  aborted ({row['aborted_reason']}): {row['aborted_detail']}")


@swap_app.command()
def plan(
    subject: SubjectOpt,
    from_job: Annotated[str, typer.Option("--from", help="the job writing the subject now")],
    to_job: Annotated[str, typer.Option("--to", help="the job that takes it over")],
    at: Annotated[
        int | None, typer.Option("--at", min=0, help="the swap epoch of the input (default: the earliest)")
    ] = None,
    input: Annotated[
        str, typer.Option("--input", help="the input both read aligned (default: the only one)")
    ] = "",
    deadline: Annotated[
        float, typer.Option("--deadline", min=0.001, help="seconds for both jobs to prepare")
    ] = 60.0,
    wait: Annotated[
        float, typer.Option("--wait", help="seconds to wait for the commit (0: do not wait)")
    ] = 0.0,
    zookeeper: ZooKeeperOpt = "127.0.0.1:2181",
    root: RootOpt = "/epochstate",
    timeout: TimeoutOpt = 10.0,
    target: TargetOpt = None,
    zookeeper_auth_file: AuthFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Plan the swap of SUBJECT from --from to --to at input epoch --at: the old job writes up to it."""

    def planned(coordinator: SwapCoordinator) -> SwapRow:
        record = coordinator.plan(subject, from_job, to_job, at, input=input or None, deadline=deadline)
        return record_row(coordinator.wait(subject, record.id, wait) if wait > 0 else record)

    row = _swap_row(
        (target, zookeeper, root, timeout, zookeeper_auth_file),
        lambda admin: admin.plan_swap(
            subject, from_job, to_job, at, input=input, deadline=deadline, wait=wait
        ),
        planned,
        daemon_timeout=timeout + wait,
    )
    _show(row, as_json)


@swap_app.command()
def status(
    subject: SubjectOpt,
    zookeeper: ZooKeeperOpt = "127.0.0.1:2181",
    root: RootOpt = "/epochstate",
    timeout: TimeoutOpt = 10.0,
    target: TargetOpt = None,
    zookeeper_auth_file: AuthFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the newest swap of SUBJECT (one past its deadline unprepared is aborted first)."""
    row = _swap_row(
        (target, zookeeper, root, timeout, zookeeper_auth_file),
        lambda admin: admin.swap_status(subject),
        lambda coordinator: record_row(coordinator.status(subject)),
    )
    _show(row, as_json)


@swap_app.command()
def abort(
    subject: SubjectOpt,
    zookeeper: ZooKeeperOpt = "127.0.0.1:2181",
    root: RootOpt = "/epochstate",
    timeout: TimeoutOpt = 10.0,
    target: TargetOpt = None,
    zookeeper_auth_file: AuthFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Abort the swap of SUBJECT before its commit (refused, SWAP_COMMITTED, after it)."""
    row = _swap_row(
        (target, zookeeper, root, timeout, zookeeper_auth_file),
        lambda admin: admin.abort_swap(subject),
        lambda coordinator: record_row(coordinator.abort(subject)),
    )
    _show(row, as_json)
