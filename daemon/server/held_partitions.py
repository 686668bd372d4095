"""Reads of a job this daemon holds only some Spark partitions of (a group's shards).

A key of a partition the daemon does not hold is refused with PARTITION_NOT_HELD,
never answered "absent": the daemon knows nothing about it. The key's partition is
Spark's own (:mod:`epochstate.core.partitioner`, as the routed client computes
it), worked out only for a store whose partitions are not all held, so a daemon
holding the whole job pays nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from epochstate.core import reasons
from epochstate.core.errors import EpochStateError
from epochstate.core.partition_ranges import holds_all
from epochstate.core.partitioner import partition_of
from epochstate.daemon.store.catalog import JobEntry, StoreHandle, StoreSchema


class PartitionNotHeld(EpochStateError):
    """A key of a Spark partition of the job that this daemon does not hold."""

    reason = reasons.PARTITION_NOT_HELD


def check_held(entry: JobEntry, handle: StoreHandle, schema: StoreSchema, encoded: Sequence[bytes]) -> None:
    """Refuse the read when a key (in the store encoding, of ``schema``) falls in a
    partition the job's data here does not cover.

    Raises:
        PartitionNotHeld: naming the first such key's partition and the partitions held.
    """
    held = entry.descriptor.partitions
    num_partitions = handle.descriptor.num_partitions
    if held is None or holds_all(held, num_partitions):
        return
    for key in encoded:
        partition = partition_of(schema.decode_key(key), schema.key, num_partitions)
        if not held.covers(partition):
            job = entry.descriptor.name
            raise PartitionNotHeld(
                f"job {job!r}: the key falls in Spark partition {partition} of {num_partitions}; "
                f"this daemon holds partitions {held} only (ask a replica of that partition's shard)",
                metadata={"job": job, "partition": str(partition), "heldPartitions": str(held)},
            )
