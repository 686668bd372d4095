"""The source's offset: how far a query read a subject, as Spark stores it in its offsets log.

JSON (the form Spark writes to ``<checkpoint>/offsets/<batch>``)::

    {"subject": "<topic>", "epoch": <k or null>, "positions": {"<partition>": <offset>, ...}}

``positions`` are end offsets (exclusive). Aligned, ``epoch`` is the last subject
epoch read (-1 before the first) and ``positions`` the ends of the ranges of the
epochs read since the query started reading aligned; unaligned, ``epoch`` is null.
Spark decides whether there is new data by comparing offsets as JSON text, so
:meth:`SubjectOffset.to_json` always builds the same text for the same offset.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from epochstate.core.alignment.ranges import OffsetRange
from epochstate.core.alignment.records import SubjectEpoch
from epochstate.spark_plugin.alignment.errors import CorruptSubjectRecord


@dataclass(frozen=True)
class SubjectOffset:
    """Where a source stands in a subject: after epoch ``epoch`` (aligned) or at ``positions``."""

    subject: str
    epoch: int | None
    positions: Mapping[int, int] = field(default_factory=dict)

    @property
    def aligned(self) -> bool:
        return self.epoch is not None

    def after(self, epoch: SubjectEpoch) -> SubjectOffset:
        """The offset once subject epoch ``epoch`` is read too."""
        return SubjectOffset(self.subject, epoch.epoch, {**self.positions, **epoch.end_positions})

    def ranges_to(self, end: SubjectOffset, starts: Mapping[int, int]) -> list[OffsetRange]:
        """The non-empty ranges from here to ``end``; a partition new in ``end`` starts at ``starts``."""
        ranges = []
        for partition, stop in sorted(end.positions.items()):
            start = self.positions.get(partition, starts.get(partition, 0))
            if start < stop:
                ranges.append(OffsetRange(self.subject, partition, start, stop))
        return ranges

    def to_json(self) -> dict[str, Any]:
        """The offset as the dict PySpark serializes (key order fixed, partitions ascending)."""
        return {
            "subject": self.subject,
            "epoch": self.epoch,
            "positions": {str(p): self.positions[p] for p in sorted(self.positions)},
        }

    @classmethod
    def from_json(cls, value: Any) -> SubjectOffset:
        """The offset in ``value`` (a dict from Spark); CorruptSubjectRecord if it is not one."""
        try:
            epoch = value["epoch"]
            return cls(
                subject=str(value["subject"]),
                epoch=None if epoch is None else int(epoch),
                positions={int(p): int(o) for p, o in value["positions"].items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise CorruptSubjectRecord(f"not an epochstate-kafka offset: {value!r} ({error!r})") from error

    @classmethod
    def parse(cls, text: str | None, subject: str) -> SubjectOffset | None:
        """The offset in one line of Spark's offsets log if it is an offset of ``subject``, else None."""
        if not text:
            return None
        try:
            value = json.loads(text)
        except ValueError:
            return None
        if not isinstance(value, dict) or value.get("subject") != subject or "positions" not in value:
            return None
        return cls.from_json(value)


def limited(start: Mapping[int, int], latest: Mapping[int, int], max_offsets: int) -> dict[int, int]:
    """``latest``, moved back so that at most ``max_offsets`` offsets lie beyond ``start``.

    ``start`` should name every partition of ``latest`` (a missing one counts from 0).

    Each partition gets a share proportional to what it has available (rounded
    down, the remainder going to the partitions with most left), so a partition
    with data never waits for more than one trigger once the others caught up.
    """
    available = {p: max(0, end - start.get(p, 0)) for p, end in latest.items()}
    total = sum(available.values())
    if total <= max_offsets:
        return dict(latest)
    shares = {p: available[p] * max_offsets // total for p in available}
    left = max_offsets - sum(shares.values())
    for p in sorted(available, key=lambda p: (shares[p] - available[p], p)):
        if left == 0:
            break
        if shares[p] < available[p]:
            shares[p] += 1
            left -= 1
    return {
        p: start.get(p, 0) + shares[p] if available[p] else start.get(p, end) for p, end in latest.items()
    }
