"""What a new group job must pass before it is defined, whoever defines it.

``JobsAdmin.AddJob`` and a Spark listener's report (:mod:`reported_jobs`) define
jobs through the same checks, so they cannot drift apart:

- the name is a job name (:func:`job_name`);
- the checkpoint is given, carries no credentials or query in its URI, and lies
  under ``auth.checkpoint_roots`` when the daemon restricts them
  (:func:`allowed_checkpoint`);
- a job split into shards states how many Spark partitions it has, or they are
  learned from its checkpoint (:func:`placement`): every state store of a job has
  the same number (``spark.sql.shuffle.partitions`` when the query first ran),
  recorded in each operator's metadata.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from epochstate.core.errors import BadRequest
from epochstate.core.storage.errors import StorageError
from epochstate.core.storage.location import redact
from epochstate.core.zookeeper.errors import InvalidName
from epochstate.core.zookeeper.layout import check_name
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.daemon.sources.errors import SourceError


class CheckpointRoots(Protocol):
    """The checkpoints a caller may name (``security.checkpoints.CheckpointRoots``)."""

    def check(self, checkpoint: str) -> None:
        """Raises CheckpointNotAllowed for a checkpoint outside the roots."""


@dataclass(frozen=True)
class Placement:
    """How a new job is spread: replicas of each shard, shards, its Spark partitions
    (None: not stated, one shard)."""

    replicas: int
    shards: int
    partitions: int | None


def job_name(name: str) -> str:
    """``name`` when it is a job name. Raises BadRequest."""
    try:
        return check_name("job", name)
    except InvalidName as error:
        raise BadRequest(f"not a job name: {error}") from None


def allowed_checkpoint(checkpoint: str, roots: CheckpointRoots | None) -> str:
    """``checkpoint`` when a new job may name it (``roots`` None: any).

    Raises:
        BadRequest: no checkpoint, or credentials or a query in its URI.
        CheckpointNotAllowed: outside ``roots``.
    """
    if not checkpoint:
        raise BadRequest("a new job needs a checkpoint")
    if redact(checkpoint) != checkpoint:
        raise BadRequest("credentials or a query in the checkpoint URI are not accepted")
    if roots is not None:
        roots.check(checkpoint)  # the same check as FollowJob's (CHECKPOINT_NOT_ALLOWED)
    return checkpoint


def placement(checkpoint: str, replicas: int, shards: int, partitions: int) -> Placement:
    """The placement of a new job from a request's fields (0: the default: one replica,
    one shard, partitions not stated, or learned from the checkpoint for shards > 1).

    Raises:
        BadRequest: shards > 1 without partitions, and the checkpoint does not tell them.
    """
    shards = shards or 1
    stated = partitions or None
    if shards > 1 and stated is None:
        stated = spark_partitions(checkpoint)
    return Placement(replicas or 1, shards, stated)


def spark_partitions(checkpoint: str) -> int:
    """The number of partitions of the state stores in ``checkpoint``.

    Raises:
        BadRequest: the checkpoint cannot be read, holds no state yet, or its stores
            disagree; the message tells the admin to state the number instead.
    """
    where = redact(checkpoint)
    try:
        source = Checkpoint(checkpoint)
        counts = {store.num_partitions for op in source.operators() for store in op.stores}
        # The stores' metadata keeps the count they were first written with; the newest
        # committed epoch's is in its offset log entry (an offline repartition changes it).
        committed = source.committed_epochs()
        newest = source.state_partitions(committed[-1]) if counts and committed else None
        if newest is not None:
            counts = {newest}
    except (SourceError, StorageError) as error:
        raise BadRequest(
            f"cannot learn the number of Spark partitions from {where!r} ({error}); state it (partitions)"
        ) from error
    if not counts:
        raise BadRequest(
            f"the checkpoint {where!r} has no state store metadata yet, so its number of Spark "
            f"partitions is not known; state it (partitions, spark.sql.shuffle.partitions of the query)"
        )
    if len(counts) > 1:
        raise BadRequest(
            f"the state stores of {where!r} have different numbers of partitions "
            f"({', '.join(map(str, sorted(counts)))}); state the one to split into shards (partitions)"
        )
    return counts.pop()
