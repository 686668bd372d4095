"""The offset range: which records of one partition belong to an epoch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class OffsetRange:
    """The half-open offsets ``[start, end)`` of one topic partition.

    A range counts offsets, not records: compaction and transaction markers leave
    offsets without a record, so a range may hold fewer than ``size``
    records, never more. ``start == end`` is the empty range at ``start``.
    """

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if not self.topic:
            raise ValueError("an offset range needs a topic")
        if self.partition < 0:
            raise ValueError(f"partition must be >= 0, not {self.partition}")
        if not 0 <= self.start <= self.end:
            raise ValueError(f"need 0 <= start <= end, not [{self.start}, {self.end})")

    @property
    def size(self) -> int:
        """The number of offsets in the range (an upper bound of its records)."""
        return self.end - self.start

    def __contains__(self, offset: object) -> bool:
        return isinstance(offset, int) and self.start <= offset < self.end

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@[{self.start}, {self.end})"
