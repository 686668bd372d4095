"""What the store records about an ingested epoch, read from the checkpoint's logs."""

from __future__ import annotations

from epochstate.core.checkpoint.epochlog import SourceRange
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.daemon.sources.errors import MissingCheckpointFile
from epochstate.daemon.store.descriptors import EpochRecord
from epochstate.daemon.store.descriptors import SourceRange as SourcePosition


def epoch_record(checkpoint: Checkpoint, epoch: int, ingested_at_ms: int) -> EpochRecord:
    """The record of committed ``epoch``: commit time, watermark, source positions.

    Raises:
        MissingCheckpointFile: the epoch's offsets or commit log entry is gone.
    """
    log_entry = checkpoint.epoch_log(epoch)
    try:
        positions = checkpoint.source_positions(epoch)
    except MissingCheckpointFile:
        # The previous offsets entry was purged: the start is unknown.
        positions = tuple(SourceRange(None, end) for end in log_entry.source_offsets)
    return EpochRecord(
        epoch=epoch,
        committed_at_ms=checkpoint.commit_time_ms(epoch),
        ingested_at_ms=ingested_at_ms,
        watermark_ms=log_entry.batch_watermark_ms,
        sources=tuple(SourcePosition(f"source-{i}", p.start, p.end) for i, p in enumerate(positions)),
    )
