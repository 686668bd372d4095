"""What ``epochstate align`` asks of a subject's sources, whichever way it reaches them.

Two ways, one answer: straight to ZooKeeper (:mod:`align_zookeeper`, the
coordinator recipe) or through a daemon's ``AlignmentAdmin`` service
(:mod:`align_daemon`, for hosts that may reach a daemon but not ZooKeeper). Both
give the same rows, outcomes and exit codes, so the commands print the same.

Exit codes: 3 unknown subject or source; 4 a command the source's state does not
allow, a refused command or a bad name; 5 the source did not answer within the
wait; 6 ZooKeeper (or the daemon) unavailable; 1 anything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

CommandKind = Literal["catch-up", "align", "abort"]

SourceRow = dict[str, Any]
"""One source of a subject: job, mode, state, command, command_id, answered,
subject_epoch, batch, position (partition as text -> end offset), refused,
updated_at_ms; ``None`` where there is nothing to show."""


class AlignFailure(Exception):
    """A request that did not succeed: the message for stderr and the exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class CommandOutcome:
    """A command as issued and, when waited for, the source's answer."""

    command: str  # as shown: "catch-up", "align(7)", "abort"
    command_id: int
    waited: bool
    state: str | None = None
    batch: int | None = None
    refused: str | None = None


@dataclass(frozen=True)
class PruneOutcome:
    """What retention keeps of a subject (epochs from ``horizon`` on), and removed."""

    horizon: int
    holds: tuple[tuple[int, str], ...]  # (from epoch, reason)
    deleted: tuple[int, ...] = ()
    mapping_entries: dict[str, int] = field(default_factory=dict)

    @property
    def binding(self) -> str:
        """Why the horizon is where it is: the reason of the lowest hold."""
        return min(self.holds)[1] if self.holds else "nothing holds it"


class AlignControl(Protocol):
    """The sources of subjects, as ``epochstate align`` drives them.

    Every method raises :class:`AlignFailure` with the exit code to use.
    """

    def status(self, topic: str) -> list[SourceRow]: ...

    def command(
        self, kind: CommandKind, topic: str, job: str, epoch: int | None, wait: float
    ) -> CommandOutcome: ...

    def prune(self, topic: str, keep: int, dry_run: bool) -> PruneOutcome: ...
