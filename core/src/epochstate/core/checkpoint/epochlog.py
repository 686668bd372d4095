"""Spark's offset log entries (``<checkpoint>/offsets/<epoch>``), one per epoch.

An entry is text: the line ``v1``; a JSON object with the batch's metadata
(``batchWatermarkMs``, ``batchTimestampMs``, ``conf``); then one line per source
of the query, in source order: the end offset as the source serialized it
(JSON text), or ``-`` when the source had no offset yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from epochstate.core import jsontext
from epochstate.core.checkpoint.errors import CorruptCheckpointFile, UnsupportedCheckpoint

_NO_OFFSET = "-"


@dataclass(frozen=True, slots=True)
class EpochLog:
    """What Spark planned for one epoch (micro-batch) before running it.

    ``source_offsets[i]`` is source ``i``'s *end* offset (JSON text as written by
    the source), ``None`` if it had none. The entry may exist before the epoch
    commits; an entry, once written, never changes.
    """

    epoch: int
    batch_watermark_ms: int
    batch_timestamp_ms: int
    conf: dict[str, str]
    source_offsets: tuple[str | None, ...]


class SourceRange(NamedTuple):
    """The offsets one source read in an epoch: ``(start, end]`` as JSON text.

    ``start`` is ``None`` for the first epoch or a source that had no offset.
    """

    start: str | None
    end: str | None


def parse_epoch_log(epoch: int, text: str, source: str = "<text>") -> EpochLog:
    """Parse the text of ``offsets/<epoch>``.

    Raises:
        UnsupportedCheckpoint: a log version other than ``v1``.
        CorruptCheckpointFile: anything else that is not a well-formed entry.
    """
    lines = text.split("\n")
    if not lines[0].startswith("v"):
        raise CorruptCheckpointFile(f"{source}: missing version line")
    if lines[0] != "v1":
        raise UnsupportedCheckpoint(f"{source}: offset log version {lines[0]!r} (expected v1)")
    if len(lines) < 2:
        raise CorruptCheckpointFile(f"{source}: missing batch metadata line")
    try:
        meta = jsontext.loads(lines[1])
        if not isinstance(meta, dict):
            raise TypeError(f"batch metadata is {type(meta).__name__}, not an object")
        conf = meta.get("conf", {})
        if not isinstance(conf, dict):
            raise TypeError("conf is not an object")
        watermark = int(meta.get("batchWatermarkMs", 0))
        timestamp = int(meta.get("batchTimestampMs", 0))
    except (ValueError, TypeError) as err:
        raise CorruptCheckpointFile(f"{source}: bad batch metadata: {err}") from err
    offsets = tuple(None if line == _NO_OFFSET else line for line in lines[2:])
    return EpochLog(
        epoch=epoch,
        batch_watermark_ms=watermark,
        batch_timestamp_ms=timestamp,
        conf={str(k): str(v) for k, v in conf.items()},
        source_offsets=offsets,
    )
