"""Positions: what an epoch had read, per Kafka topic-partition.

An epoch's end position comes from its sources' end offsets (Spark's offsets log):
Spark's Kafka source writes ``{"<topic>": {"<partition>": offset}}``, the
epochstate Kafka source ``{"subject": "<topic>", "positions": {"<partition>":
offset}}``. Offsets are positions: the next record to read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from epochstate.core import jsontext
from epochstate.daemon.store.descriptors import EpochRecord

Position = dict[tuple[str, int], int]
# A Kafka partition number as a JSON key: ASCII digits only (``str.isdigit`` also
# takes "²", which ``int`` refuses), at most as many as an int32 has.
_PARTITION = re.compile(r"-?[0-9]{1,10}")


def _parse(text: str | None) -> Position:
    if not text:
        return {}
    try:
        obj: Any = jsontext.loads(text)
    except ValueError:
        return {}
    if not isinstance(obj, dict):
        return {}
    found: Position = {}
    if isinstance(obj.get("subject"), str) and isinstance(obj.get("positions"), dict):
        for partition, offset in obj["positions"].items():
            if _PARTITION.fullmatch(str(partition)) and isinstance(offset, int):
                found[(obj["subject"], int(partition))] = offset
        return found
    for topic, partitions in obj.items():
        if isinstance(partitions, dict):
            for partition, offset in partitions.items():
                if _PARTITION.fullmatch(str(partition)) and isinstance(offset, int):
                    found[(topic, int(partition))] = offset
    return found


def end_position(record: EpochRecord) -> Position:
    """Per topic-partition, what the epoch had read when it committed."""
    out: Position = {}
    for source in record.sources:
        out.update(_parse(source.end_offset_json))
    return out


def start_position(record: EpochRecord) -> Position:
    """Per topic-partition, where the epoch started (the previous epoch's end)."""
    out: Position = {}
    for source in record.sources:
        out.update(_parse(source.start_offset_json))
    return out


def covers(have: Position, wanted: Position) -> bool:
    return all(have.get(tp, -1) >= offset for tp, offset in wanted.items())


def describe(position: Iterable[tuple[tuple[str, int], int]]) -> str:
    return ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(position))
