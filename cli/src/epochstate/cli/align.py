"""``epochstate align``: move sources of Kafka subjects between unaligned and aligned.

Talks to ZooKeeper directly (the coordinator is a recipe on the source znodes,
``epochstate.core.alignment.coordinator``), or with ``--target`` to a daemon's
``AlignmentAdmin`` service, which runs the same recipe: the same output either
way. Exit codes as the rest of the CLI: 0 success; 2 bad usage; 3 unknown subject
or source; 4 a command the source's state does not allow (or a bad name); 5 the
source did not answer within ``--wait``; 6 ZooKeeper (or the daemon) unavailable.

With ``--json`` each command prints exactly one JSON document:

* ``status``: an array of source rows, ``{"job", "mode", "state", "command",
  "command_id", "answered", "subject_epoch", "batch", "position", "refused",
  "updated_at_ms"}`` (:data:`epochstate.cli.align_control.SourceRow`).
* ``catch-up``, ``align``, ``abort``: ``{"subject", "job", "command",
  "command_id", "waited", "state", "batch"}``; ``state`` and ``batch`` are the
  source's answer, null unless ``--wait`` was given.
* ``prune``: ``{"horizon", "holds", "deleted", "mapping_entries"}``; ``holds`` a
  list of ``{"epoch", "reason"}``, ``deleted`` the deleted subject epochs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from epochstate.cli.align_control import AlignControl, AlignFailure, CommandKind
from epochstate.cli.console import fail
from epochstate.cli.output import print_document, print_line
from epochstate.cli.tables import print_table
from epochstate.cli.zookeeper_options import (
    AuthFileOpt,
    JsonOpt,
    RootOpt,
    TargetOpt,
    TimeoutOpt,
    ZooKeeperOpt,
)

align_app = typer.Typer(
    name="align",
    help="Align sources of Kafka subjects with the subject's epochs: catch-up, align, abort, status.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
T = TypeVar("T")

WaitOpt = Annotated[
    float, typer.Option("--wait", help="seconds to wait until the source did it (0: do not wait)")
]
Topic = Annotated[str, typer.Argument(help="the subject (Kafka topic)")]
Job = Annotated[str, typer.Argument(help="the reading job (the source's option job)")]


def _control(
    target: str | None, zookeeper: str, root: str, timeout: float, auth_file: Path | None
) -> AlignControl:
    if target:
        from epochstate.cli.align_daemon import DaemonControl

        return DaemonControl(target, timeout)
    from epochstate.cli.align_zookeeper import ZooKeeperControl

    return ZooKeeperControl(zookeeper, root, timeout, auth_file)


def _run(action: Callable[[], T]) -> T:
    try:
        return action()
    except AlignFailure as failure:
        raise fail(str(failure), failure.code) from None


def _show(value: Any) -> str:
    return "-" if value is None else str(value)


@align_app.command()
def status(
    topic: Topic,
    zookeeper: ZooKeeperOpt = "127.0.0.1:2181",
    root: RootOpt = "/epochstate",
    timeout: TimeoutOpt = 10.0,
    as_json: JsonOpt = False,
    target: TargetOpt = None,
    zookeeper_auth_file: AuthFileOpt = None,
) -> None:
    """Show each source of a subject: mode, state, newest command, last subject epoch, position."""
    control = _control(target, zookeeper, root, timeout, zookeeper_auth_file)
    rows = _run(lambda: control.status(topic))
    if as_json:
        print_document(rows)
        return
    table = []
    for r in rows:
        command = _show(r["command"]) + ("" if r["answered"] else " (not seen yet)")
        position = ", ".join(f"{p}:{o}" for p, o in r["position"].items()) or "-"
        table.append(
            (
                str(r["job"]),
                str(r["mode"]),
                str(r["state"]),
                command,
                _show(r["subject_epoch"]),
                _show(r["batch"]),
                position,
                _show(r["refused"]),
            )
        )
    headers = ("job", "mode", "state", "command", "subject epoch", "batch", "position", "refused")
    print_table(headers, table)


def _send(
    control: AlignControl,
    kind: CommandKind,
    topic: str,
    job: str,
    epoch: int | None,
    wait: float,
    as_json: bool,
) -> None:
    outcome = _run(lambda: control.command(kind, topic, job, epoch, wait))
    if as_json:
        print_document(
            {
                "subject": topic,
                "job": job,
                "command": outcome.command,
                "command_id": outcome.command_id,
                "waited": outcome.waited,
                "state": outcome.state,
                "batch": outcome.batch,
            }
        )
        return
    print_line(f"sent {outcome.command} (command {outcome.command_id}) to source {job!r} of {topic!r}")
    if outcome.waited:
        print_line(f"source {job!r} is {outcome.state} after batch {_show(outcome.batch)}")


@align_app.command("catch-up")
def catch_up(
    topic: Topic,
    job: Job,
    zookeeper: ZooKeeperOpt = "127.0.0.1:2181",
    root: RootOpt = "/epochstate",
    timeout: TimeoutOpt = 10.0,
    wait: WaitOpt = 0.0,
    target: TargetOpt = None,
    zookeeper_auth_file: AuthFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """CatchUp: the source reports ready once it has passed the subject's second-to-last epoch."""
    control = _control(target, zookeeper, root, timeout, zookeeper_auth_file)
    _send(control, "catch-up", topic, job, None, wait, as_json)


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
    target: TargetOpt = None,
    zookeeper_auth_file: AuthFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Align(k): a ready source reads up to the start of subject epoch k, then one batch per epoch."""
    control = _control(target, zookeeper, root, timeout, zookeeper_auth_file)
    _send(control, "align", topic, job, epoch, wait, as_json)


@align_app.command()
def abort(
    topic: Topic,
    job: Job,
    zookeeper: ZooKeeperOpt = "127.0.0.1:2181",
    root: RootOpt = "/epochstate",
    timeout: TimeoutOpt = 10.0,
    wait: WaitOpt = 0.0,
    target: TargetOpt = None,
    zookeeper_auth_file: AuthFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Abort: the source reads unaligned again, from where its newest batch ended."""
    control = _control(target, zookeeper, root, timeout, zookeeper_auth_file)
    _send(control, "abort", topic, job, None, wait, as_json)


@align_app.command()
def prune(
    topic: Topic,
    keep: Annotated[int, typer.Option("--keep", min=2, help="the newest subject epochs always kept")] = 100,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="only show what would be kept and why")] = False,
    zookeeper: ZooKeeperOpt = "127.0.0.1:2181",
    root: RootOpt = "/epochstate",
    timeout: TimeoutOpt = 10.0,
    as_json: JsonOpt = False,
    target: TargetOpt = None,
    zookeeper_auth_file: AuthFileOpt = None,
) -> None:
    """Apply the subject's retention: delete epochs (and mapping entries) no source or daemon needs.

    The aligned sink does this itself as it writes (option subjectRetention).
    """
    control = _control(target, zookeeper, root, timeout, zookeeper_auth_file)
    pruned = _run(lambda: control.prune(topic, keep, dry_run))
    if as_json:
        holds = [{"epoch": epoch, "reason": reason} for epoch, reason in pruned.holds]
        answer = {"horizon": pruned.horizon, "holds": holds, "deleted": list(pruned.deleted)}
        print_document(answer | {"mapping_entries": pruned.mapping_entries})
        return
    print_line(f"subject {topic!r} keeps epochs from {pruned.horizon}: {pruned.binding}")
    for epoch, reason in pruned.holds:
        print_line(f"  from {epoch}: {reason}")
    if not dry_run:
        span = f"{pruned.deleted[0]}..{pruned.deleted[-1]}" if pruned.deleted else "none"
        print_line(f"deleted epochs {span}, {sum(pruned.mapping_entries.values())} mapping entries")
