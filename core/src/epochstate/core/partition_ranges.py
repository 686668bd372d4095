"""Which Spark partitions of a job a daemon holds: ranges ``[first, last]``.

A daemon of a group follows the shards the leader gave it, each a range of the
job's Spark partitions; it reads, stores and serves only those. ``None`` stands
for the whole job everywhere a :class:`PartitionRanges` is optional: a daemon
outside a group, or one holding a shard that covers every partition.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Spark's numPartitions is a Java int: the last partition a key can fall in.
LAST_PARTITION = 2**31 - 2


@dataclass(frozen=True)
class PartitionRanges:
    """Disjoint, sorted, non-adjacent ranges ``[first, last]`` of Spark partitions
    (:meth:`of` merges whatever it is given into this form, so two equal sets of
    partitions compare equal)."""

    ranges: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, ranges: Iterable[tuple[int, int]]) -> PartitionRanges | None:
        """The ranges given, merged; None when they cover every partition
        (``[0, LAST_PARTITION]``).

        Raises:
            ValueError: no range, or one that is not ``0 <= first <= last <= LAST_PARTITION``.
        """
        merged: list[tuple[int, int]] = []
        for first, last in sorted((int(f), int(la)) for f, la in ranges):
            if not 0 <= first <= last <= LAST_PARTITION:
                raise ValueError(f"not a range of Spark partitions: [{first}, {last}]")
            if merged and first <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], last))
            else:
                merged.append((first, last))
        if not merged:
            raise ValueError("no range of Spark partitions")
        if merged == [(0, LAST_PARTITION)]:
            return None
        return cls(tuple(merged))

    def covers(self, partition: int) -> bool:
        """Whether ``partition`` is in one of the ranges."""
        return any(first <= partition <= last for first, last in self.ranges)

    def covers_all(self, num_partitions: int) -> bool:
        """Whether every partition of a store of ``num_partitions`` partitions is held."""
        return self.ranges[0][0] == 0 and self.ranges[0][1] >= num_partitions - 1

    def partitions(self, num_partitions: int) -> tuple[int, ...]:
        """The held partitions of a store of ``num_partitions`` partitions, in order."""
        return tuple(
            p for first, last in self.ranges for p in range(first, min(last, num_partitions - 1) + 1)
        )

    def to_json(self) -> list[list[int]]:
        return [[first, last] for first, last in self.ranges]

    def __str__(self) -> str:
        return ", ".join(shown_range(first, last) for first, last in self.ranges)


def shown_range(first: int, last: int) -> str:
    """``first-last``, ``first`` alone, or ``first and after`` for a range to the last partition."""
    if last == LAST_PARTITION:
        return f"{first} and after"
    return f"{first}-{last}" if first != last else str(first)


def held_partitions(ranges: PartitionRanges | None, num_partitions: int) -> tuple[int, ...]:
    """The partitions of a store of ``num_partitions`` partitions that ``ranges`` holds
    (``None``: all of them)."""
    if ranges is None:
        return tuple(range(num_partitions))
    return ranges.partitions(num_partitions)


def holds_all(ranges: PartitionRanges | None, num_partitions: int) -> bool:
    """Whether ``ranges`` (``None``: the whole job) holds every partition of a store."""
    return ranges is None or ranges.covers_all(num_partitions)


def shown(ranges: PartitionRanges | None) -> str:
    """``ranges`` for people: ``"0-3, 8"``, or ``"all"`` for the whole job."""
    return "all" if ranges is None else str(ranges)
