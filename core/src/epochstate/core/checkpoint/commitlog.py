"""Spark's commit log entries (``<checkpoint>/commits/<epoch>``), one per committed epoch.

An entry is text: a version line, then one JSON object. Spark writes ``v1``
(``{"nextBatchWatermarkMs": ms}``), ``v2`` when state checkpoint format version 2
is on, adding ``"stateUniqueIds"``, and ``v3`` (Spark 4.1+, with sink metadata
besides). ``stateUniqueIds`` maps each stateful operator's id (a JSON string) to
one array per partition, each holding the unique id of every store of the operator
at the store version the epoch committed (``epoch + 1``), in the order of the
operator's stores (for a stream-stream join: left keyToNumValues, left
keyWithIndexToValue, right keyToNumValues, right keyWithIndexToValue).
"""

from __future__ import annotations

from dataclasses import dataclass

from epochstate.core import jsontext
from epochstate.core.checkpoint.errors import CorruptCheckpointFile, UnsupportedCheckpoint

COMMIT_LOG_VERSIONS = frozenset({"v1", "v2", "v3"})

# operator id -> per partition, per store: a unique id.
StateUniqueIds = dict[int, tuple[tuple[str, ...], ...]]


@dataclass(frozen=True, slots=True)
class CommitEntry:
    """What Spark recorded when an epoch committed. ``state_unique_ids`` is ``None``
    when the entry records none (state checkpoint format version 1)."""

    epoch: int
    next_batch_watermark_ms: int
    state_unique_ids: StateUniqueIds | None


def parse_commit_entry(epoch: int, text: str, source: str = "<text>") -> CommitEntry:
    """Parse the text of ``commits/<epoch>``.

    Raises:
        UnsupportedCheckpoint: a log version other than v1, v2 or v3.
        CorruptCheckpointFile: anything else that is not a well-formed entry.
    """
    version, _, rest = text.partition("\n")
    if version not in COMMIT_LOG_VERSIONS:
        if not version.startswith("v"):
            raise CorruptCheckpointFile(f"{source}: missing version line")
        raise UnsupportedCheckpoint(f"{source}: commit log version {version!r} (expected v1, v2 or v3)")
    try:
        meta = jsontext.loads(rest)
        if not isinstance(meta, dict):
            raise TypeError(f"commit metadata is {type(meta).__name__}, not an object")
        watermark = int(meta.get("nextBatchWatermarkMs", 0))
        raw_ids = meta.get("stateUniqueIds")
        ids = None if raw_ids is None else _unique_ids(raw_ids)
    except (ValueError, TypeError) as err:
        raise CorruptCheckpointFile(f"{source}: bad commit metadata: {err}") from err
    return CommitEntry(epoch, watermark, ids)


def _unique_ids(raw: object) -> StateUniqueIds:
    if not isinstance(raw, dict):
        raise TypeError("stateUniqueIds is not an object")
    ids: StateUniqueIds = {}
    for operator, partitions in raw.items():
        if not isinstance(partitions, list) or not all(isinstance(p, list) for p in partitions):
            raise TypeError(f"stateUniqueIds of operator {operator} is not an array of arrays")
        if not all(isinstance(i, str) and i for p in partitions for i in p):
            raise TypeError(f"stateUniqueIds of operator {operator} holds a non-string id")
        ids[int(operator)] = tuple(tuple(p) for p in partitions)
    return ids
