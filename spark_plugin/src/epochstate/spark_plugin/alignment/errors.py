"""Errors of the aligned Kafka sink and source.

The registry's and the coordinator's errors live with them in
``epochstate.core.alignment.errors`` and are re-exported here: the sink and
source raise them too, under the same root ``AlignmentError``.
"""

from __future__ import annotations

from epochstate.core.alignment.errors import (
    AlignmentError,
    CorruptSubjectRecord,
    EpochWrittenByAnotherQuery,
    InvalidOption,
    InvalidSubjectName,
    InvalidTransition,
    NotAnswered,
    RegistryUnavailable,
    SourceNotFound,
    SubjectNotFound,
)

__all__ = [
    "AlignmentError",
    "CheckpointMismatch",
    "CorruptSubjectRecord",
    "EpochWrittenByAnotherQuery",
    "InvalidOption",
    "InvalidSubjectName",
    "InvalidTransition",
    "NotAnswered",
    "RegistryUnavailable",
    "SourceNotFound",
    "SubjectNotFound",
    "TooFewPartitions",
]


class TooFewPartitions(AlignmentError):
    """A write task has no Kafka partition of its own.

    Each task of the aligned sink writes only to the partition with its own
    number, so the topic needs at least as many partitions as the batch has
    tasks: repartition the stream to at most that many partitions, or add
    partitions to the topic.
    """


class CheckpointMismatch(AlignmentError):
    """The ``checkpointLocation`` given to the source is not the query's own.

    The aligned source learns where the query stands from the query's offsets
    log, so the option must name the same path as the query's checkpoint.
    """
