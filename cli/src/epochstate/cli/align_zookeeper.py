""":class:`AlignControl` straight on ZooKeeper: the coordinator recipe on the source
znodes (``epochstate.core.alignment.coordinator``), run in this process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from epochstate.cli.align_control import (
    AlignFailure,
    CommandKind,
    CommandOutcome,
    PruneOutcome,
    SourceRow,
)
from epochstate.cli.zookeeper_session import connect

if TYPE_CHECKING:
    from epochstate.core.alignment.commands import Command
    from epochstate.core.alignment.coordinator import AlignmentCoordinator, SourceStatus
    from epochstate.core.alignment.subjects import SubjectRegistry


def exit_code(error: Exception) -> int:
    from epochstate.core.alignment import errors

    table: list[tuple[type[Exception], int]] = [
        (errors.SubjectNotFound, 3),
        (errors.SourceNotFound, 3),
        (errors.InvalidTransition, 4),
        (errors.InvalidOption, 4),
        (errors.NotAnswered, 5),
        (errors.RegistryUnavailable, 6),
    ]
    return next((code for kind, code in table if isinstance(error, kind)), 1)


def source_row(status: SourceStatus) -> SourceRow:
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


@contextmanager
def subjects_session(
    zookeeper: str, root: str, timeout: float, auth_file: Path | None
) -> Iterator[SubjectRegistry]:
    """One ZooKeeper session for one command, closed when it ends. The errors of the
    alignment and swap recipes become :class:`AlignFailure` with their exit code:
    a bad ``--root`` 2, an unknown subject 3, a refused command 4, no answer 5,
    ZooKeeper unavailable 6, access denied 1."""
    from epochstate.core.alignment.errors import AlignmentError
    from epochstate.core.alignment.layout import SubjectLayout
    from epochstate.core.alignment.subjects import SubjectRegistry
    from epochstate.core.zookeeper.errors import AccessDenied, RegistryError, RegistryUnavailable

    try:
        SubjectLayout(root)
    except AlignmentError as error:
        raise AlignFailure(f"--root: {error}", 2) from None
    client = connect(zookeeper, auth_file, timeout)
    try:
        yield SubjectRegistry(client, root, timeout=timeout)
    except AlignmentError as error:
        raise AlignFailure(str(error), exit_code(error)) from None
    except AccessDenied as error:
        raise AlignFailure(str(error), 1) from None
    except RegistryUnavailable as error:
        raise AlignFailure(str(error), 6) from None
    except RegistryError as error:
        raise AlignFailure(str(error), 4) from None
    finally:
        client.stop()
        client.close()


class ZooKeeperControl:
    """Each call connects to ZooKeeper, does its work and disconnects."""

    def __init__(self, zookeeper: str, root: str, timeout: float, auth_file: Path | None = None) -> None:
        self._zookeeper, self._root, self._timeout = zookeeper, root, timeout
        self._auth_file = auth_file

    @contextmanager
    def _coordinator(self) -> Iterator[AlignmentCoordinator]:
        try:
            from epochstate.core.alignment.coordinator import AlignmentCoordinator
        except ImportError as error:
            needs = f"align needs the spark extra: pip install 'epochstate[spark]' ({error})"
            raise AlignFailure(needs, 1) from None
        with subjects_session(self._zookeeper, self._root, self._timeout, self._auth_file) as subjects:
            yield AlignmentCoordinator(subjects)

    def status(self, topic: str) -> list[SourceRow]:
        with self._coordinator() as coordinator:
            return [source_row(s) for s in coordinator.status(topic)]

    def command(
        self, kind: CommandKind, topic: str, job: str, epoch: int | None, wait: float
    ) -> CommandOutcome:
        issue: dict[CommandKind, Callable[[AlignmentCoordinator], Command]] = {
            "catch-up": lambda c: c.catch_up(topic, job),
            "align": lambda c: c.align(topic, job, epoch),
            "abort": lambda c: c.abort(topic, job),
        }
        with self._coordinator() as coordinator:
            command = issue[kind](coordinator)
            if wait <= 0:
                return CommandOutcome(str(command), command.id, waited=False)
            report = coordinator.wait(topic, job, command, wait)
        if report.refused is not None:
            raise AlignFailure(f"source {job!r} refused {command}: {report.refused}", 4)
        return CommandOutcome(str(command), command.id, True, report.state, report.batch)

    def prune(self, topic: str, keep: int, dry_run: bool) -> PruneOutcome:
        from epochstate.core.alignment.retention import SubjectRetention

        with self._coordinator() as coordinator:
            coordinator.require_subject(topic)
            retention = SubjectRetention(coordinator.registry, keep)
            deleted: tuple[int, ...] = ()
            entries: dict[str, int] = {}
            if dry_run:
                plan = retention.plan(topic)
            else:
                pruned = retention.prune(topic)
                plan, deleted, entries = pruned.plan, pruned.epochs, dict(pruned.mapping_entries)
        holds = tuple(sorted((h.epoch, h.reason) for h in plan.holds))
        return PruneOutcome(plan.horizon, holds, deleted, entries)
