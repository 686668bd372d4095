""":class:`AlignControl` through a daemon's ``epochstate.v1.AlignmentAdmin`` service,
for hosts that reach a daemon but not ZooKeeper (the daemon runs the same
coordinator recipe on its own ZooKeeper session)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from epochstate.cli.align_control import (
    AlignFailure,
    CommandKind,
    CommandOutcome,
    PruneOutcome,
    SourceRow,
)
from epochstate.cli.connection import connect
from epochstate.cli.console import client_error_line
from epochstate.client import errors
from epochstate.client.client import EpochStateClient
from epochstate.v1 import epochstate_pb2 as pb

T = TypeVar("T")

# Most specific first: NoZooKeeper and CommandRefused are FailedPrecondition too.
_EXIT_CODES: list[tuple[type[errors.EpochStateClientError], int]] = [
    (errors.NotFound, 3),
    (errors.NoZooKeeper, 6),
    (errors.FailedPrecondition, 4),
    (errors.InvalidArgument, 4),
    (errors.DeadlineExceeded, 5),
    (errors.Unavailable, 6),
    (errors.Unauthenticated, 7),
    (errors.PermissionDenied, 7),
]


def source_row(source: pb.AlignmentSource) -> SourceRow:
    """The row :mod:`align_zookeeper` shows for the same source."""
    has_command = source.HasField("command")
    return {
        "job": source.job,
        "mode": source.mode,
        "state": source.state,
        "command": _command_text(source.command) if has_command else None,
        "command_id": source.command.id if has_command else None,
        "answered": source.answered,
        "subject_epoch": source.subject_epoch if source.HasField("subject_epoch") else None,
        "batch": source.batch if source.HasField("batch") else None,
        "position": {str(p): o for p, o in sorted(source.position.items())},
        "refused": source.refused or None,
        "updated_at_ms": source.updated_at_ms,
    }


def _command_text(command: pb.AlignmentCommand) -> str:
    return f"{command.name}({command.epoch})" if command.HasField("epoch") else command.name


class DaemonControl:
    """Each call is one RPC to the daemon at ``target``."""

    def __init__(self, target: str, timeout: float) -> None:
        self._target, self._timeout = target, timeout

    def call(self, action: Callable[[EpochStateClient], T]) -> T:
        """``action`` on a client of the daemon; its errors as AlignFailure with the CLI's exit code."""
        try:
            with connect(self._target, self._timeout) as client:
                return action(client)
        except errors.EpochStateClientError as error:
            code = next((c for kind, c in _EXIT_CODES if isinstance(error, kind)), 1)
            raise AlignFailure(f"daemon {self._target}: {client_error_line(error)}", code) from None

    def status(self, topic: str) -> list[SourceRow]:
        subjects = self.call(lambda c: c.alignment.status(topic, timeout=self._timeout))
        return [source_row(s) for subject in subjects for s in subject.sources]

    def command(
        self, kind: CommandKind, topic: str, job: str, epoch: int | None, wait: float
    ) -> CommandOutcome:
        def send(client: EpochStateClient) -> pb.AlignmentCommandResponse:
            if kind == "catch-up":
                return client.alignment.catch_up(topic, job, wait=wait)
            if kind == "align":
                return client.alignment.align(topic, job, epoch, wait=wait)
            return client.alignment.abort(topic, job, wait=wait)

        response = self.call(send)
        text, command_id = _command_text(response.command), response.command.id
        if wait <= 0:
            return CommandOutcome(text, command_id, waited=False)
        source = response.source
        batch = source.batch if source.HasField("batch") else None
        return CommandOutcome(text, command_id, True, source.state, batch)

    def prune(self, topic: str, keep: int, dry_run: bool) -> PruneOutcome:
        response = self.call(
            lambda c: c.alignment.prune(topic, keep=keep, dry_run=dry_run, timeout=self._timeout)
        )
        holds = tuple(sorted((h.epoch, h.reason) for h in response.holds))
        return PruneOutcome(
            response.horizon, holds, tuple(response.deleted_epochs), dict(response.mapping_entries)
        )
