"""Where the epochs of a subject start, and whether a source position has passed them.

Positions are per Kafka partition, end offsets (exclusive). The *start* of
subject epoch ``k`` is the end position of epoch ``k - 1`` (empty for ``k = 0``):
every registered record of an epoch before ``k`` lies below it, every record of
``k`` and later at or above it, because the writer writes a batch only after
it registered the one before.

A source at position ``P`` *has passed* epoch ``k`` when ``P`` lies beyond the
start of ``k`` in some partition: aligning at ``k`` would read some of ``k``'s
records twice. A partition without a record in the subject before ``k`` counts
as starting at offset 0, so a source that read records there (not written
through the sink) cannot align at ``k``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from epochstate.core.alignment.records import SubjectEpoch

Position = Mapping[int, int]
# Epochs kept decoded: a reader needs the newest few (the oldest are evicted first).
_CACHED_EPOCHS = 64


class EpochSource(Protocol):
    """The registered subject epochs (SubjectRegistry, or a test's double)."""

    def get_epoch(self, topic: str, epoch: int) -> SubjectEpoch | None: ...

    def epochs(self, topic: str) -> list[int]: ...


class Boundaries:
    """Where the epochs of subject ``topic`` start; registered epochs are cached (they never change)."""

    def __init__(self, epochs: EpochSource, topic: str) -> None:
        self._epochs = epochs
        self.topic = topic
        self._known: dict[int, SubjectEpoch] = {}

    def epoch(self, k: int) -> SubjectEpoch | None:
        found = self._known.get(k)
        if found is None:
            found = self._epochs.get_epoch(self.topic, k)
            if found is not None:
                if len(self._known) >= _CACHED_EPOCHS:
                    self._known.pop(min(self._known))
                self._known[k] = found
        return found

    def registered(self) -> list[int]:
        return self._epochs.epochs(self.topic)

    def start_of(self, k: int) -> Position | None:
        """The start of epoch ``k``; None while epoch ``k - 1`` is not registered."""
        if k == 0:
            return {}
        before = self.epoch(k - 1)
        return None if before is None else before.end_position

    def retired(self, k: int) -> str | None:
        """Why the start of epoch ``k`` can never be known (None: it is, or it may still be).

        Epoch ``k - 1`` is older than the oldest registered epoch: it was registered
        once (epochs are written in order from 0) and retention deleted it.
        """
        if k == 0 or self.epoch(k - 1) is not None:
            return None
        registered = self.registered()
        if registered and k - 1 < registered[0]:
            return (
                f"subject epoch {k - 1}, whose end is where epoch {k} starts, is older than the "
                f"subject's retention (its oldest epoch is {registered[0]})"
            )
        return None

    def passed(self, position: Position, k: int) -> str | None:
        """Why ``position`` has passed epoch ``k`` (None: it has not, or ``k``'s start is not known yet)."""
        start = self.start_of(k)
        if start is None:
            return None
        for partition, offset in sorted(position.items()):
            if offset > start.get(partition, 0):
                return (
                    f"partition {partition} is at offset {offset}, past the start of subject epoch {k} "
                    f"at {start.get(partition, 0)}"
                )
        return None

    def caught_up(self, position: Position) -> int | None:
        """The second-to-last registered epoch if ``position`` has passed its end, else None.

        With fewer than two registered epochs there is nothing to catch up on: -1.
        """
        registered = self.registered()
        if len(registered) < 2:
            return -1
        target = registered[-2]
        epoch = self.epoch(target)
        if epoch is None:  # registered epochs are never removed while a source catches up
            return None
        behind = any(position.get(p, 0) < offset for p, offset in epoch.end_position.items())
        return None if behind else target

    def first_not_passed(self, position: Position) -> int:
        """The first subject epoch that ``position`` has not passed: the earliest safe Align.

        Registered epochs are checked from the newest back. When even the start of
        the epoch after the newest lies behind ``position`` (the source read records
        of an epoch not registered yet), the one after that: its records are
        written only once the epoch in between is registered.
        """
        registered = self.registered()
        newest = registered[-1] if registered else -1
        if self.passed(position, newest + 1) is not None:
            return newest + 2
        best = newest + 1
        oldest = registered[0] if registered else 0
        for k in range(newest, oldest - 1, -1):
            if self.start_of(k) is None or self.passed(position, k) is not None:
                break
            best = k
        return best
