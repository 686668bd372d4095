"""The number of Spark partitions of a job, learned from its checkpoint's state metadata.

A job split into shards must state how many Spark partitions it has. An admin may
leave that to the daemon: every state store of a job has the same number of
partitions (``spark.sql.shuffle.partitions`` when the query first ran), recorded
in each operator's metadata.
"""

from __future__ import annotations

from epochstate.core.errors import BadRequest
from epochstate.core.storage.errors import StorageError
from epochstate.core.storage.location import redact
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.daemon.sources.errors import SourceError


def spark_partitions(checkpoint: str) -> int:
    """The number of partitions of the state stores in ``checkpoint``.

    Raises:
        BadRequest: the checkpoint cannot be read, holds no state yet, or its stores
            disagree; the message tells the admin to state the number instead.
    """
    where = redact(checkpoint)
    try:
        counts = {store.num_partitions for op in Checkpoint(checkpoint).operators() for store in op.stores}
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
