"""The source's side of the alignment protocol: what its next batch reads, given the newest command.

Where epochs start and when a position has passed one: ``epochstate.core.alignment.boundaries``
(shared with the coordinator). A source at position ``P`` aligns at epoch ``k``
with one batch that reads, unaligned, from ``P`` up to the start of ``k`` (its
end offset is aligned: "after epoch ``k - 1``"), followed by one batch per
subject epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from epochstate.core.alignment.boundaries import Boundaries
from epochstate.core.alignment.commands import Command, Report, State
from epochstate.spark_plugin.alignment.offsets import SubjectOffset

# How the next batch reads: unaligned up to the high watermarks, one subject epoch,
# nothing (waiting for the epoch before Align's), or unaligned up to the start of Align's epoch.
Step = Literal["unaligned", "aligned", "hold", "transition"]


@dataclass(frozen=True)
class Decision:
    """The next batch's step, its end when the decision fixes it, and the state to report."""

    step: Step
    state: State
    end: SubjectOffset | None = None
    subject_epoch: int | None = None
    refused: str | None = None

    def report(self, current: SubjectOffset, batch: int | None, command: Command | None) -> Report:
        return Report(
            state=self.state,
            position=dict(current.positions),
            subject_epoch=self.subject_epoch,
            batch=batch,
            answers=None if command is None else command.id,
            refused=self.refused,
        )


def decide(
    current: SubjectOffset, command: Command | None, boundaries: Boundaries, ready_before: bool
) -> Decision:
    """The next step of a source that stands at ``current`` and was last told ``command``.

    ``ready_before``: the source reported Ready to this very command already
    (Ready, once reached, stays until the next command). Without a command a
    source goes on as its newest batch read.
    """
    name = None if command is None else command.name
    if name == "abort" or (name is None and not current.aligned):
        return Decision("unaligned", "unaligned")
    if current.aligned and name in (None, "align"):
        # Aligned at or before Align's epoch: one batch per subject epoch from here on.
        return Decision("aligned", "aligned", subject_epoch=current.epoch)
    if name == "catch-up" or command is None or command.epoch is None:
        return _catching_up(current, boundaries, ready_before)
    k = command.epoch
    start = boundaries.start_of(k)
    if start is None:
        refused = boundaries.retired(k)
        if refused is None:
            return Decision("hold", "aligning")  # until epoch k - 1 is registered
    else:
        refused = boundaries.passed(current.positions, k)
    if refused is not None:
        caught = _catching_up(current, boundaries, ready_before=True)
        return Decision(caught.step, caught.state, subject_epoch=caught.subject_epoch, refused=refused)
    assert start is not None
    end = SubjectOffset(current.subject, k - 1, {**current.positions, **start})
    return Decision("transition", "aligning", end=end)


def _catching_up(current: SubjectOffset, boundaries: Boundaries, ready_before: bool) -> Decision:
    if ready_before:
        return Decision("unaligned", "ready")
    passed = boundaries.caught_up(current.positions)
    if passed is None:
        return Decision("unaligned", "catching-up")
    return Decision("unaligned", "ready", subject_epoch=None if passed < 0 else passed)
