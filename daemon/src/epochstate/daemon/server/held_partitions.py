"""Reads of a job this daemon holds only some Spark partitions of (a group's shards).

A daemon never answers "absent" for a key it knows nothing about: a key of a
partition it does not hold is refused with PARTITION_NOT_HELD. The key's partition
is Spark's own (:mod:`epochstate.core.partitioner`) over the columns Spark shuffles
the store's rows by (:mod:`epochstate.core.shuffle_keys`), worked out only for a store whose
partitions are not all held, so a daemon holding the whole job pays nothing.

For a store whose shuffle columns this daemon cannot tell, a key found is answered
(its data was ingested from a partition held here, and a key lives in one
partition only) and a key not found is refused, never called "absent".
"""

from __future__ import annotations

from collections.abc import Sequence

from epochstate.core import reasons
from epochstate.core.errors import EpochStateError
from epochstate.core.partition_ranges import PartitionRanges, holds_all
from epochstate.core.partitioner import partition_of
from epochstate.core.shuffle_keys import shuffle_fields
from epochstate.core.sparktypes import StructType
from epochstate.daemon.store.catalog import JobEntry, StoreHandle, StoreSchema


class PartitionNotHeld(EpochStateError):
    """A key of a Spark partition of the job that this daemon does not hold."""

    reason = reasons.PARTITION_NOT_HELD


def partition_fields(handle: StoreHandle, schema: StoreSchema) -> int | None:
    """How many leading key fields Spark shuffles the store's rows by (None: not known
    here; see :mod:`epochstate.core.shuffle_keys`)."""
    d = handle.descriptor
    return shuffle_fields(d.operator_name, d.store_name, d.kind, len(schema.key.fields))


def check_held(
    entry: JobEntry,
    handle: StoreHandle,
    schema: StoreSchema,
    encoded: Sequence[bytes],
    found: Sequence[bytes | None],
) -> None:
    """Refuse a read whose answer would speak of a partition the job's data here does
    not cover: a key (in the store encoding, of ``schema``, looked up as ``found``) of
    another partition, or a key not found whose partition cannot be told. Partitions
    are those of ``schema``, the shape of the epoch read.

    Raises:
        PartitionNotHeld: naming the first such key's partition and the partitions held.
    """
    held = entry.descriptor.partitions
    num_partitions = schema.num_partitions  # the read epoch's: a repartition moves keys
    if held is None or holds_all(held, num_partitions):
        return
    fields = partition_fields(handle, schema)
    if fields is None:
        if any(payload is None for payload in found):
            raise _not_held(entry, held, None, num_partitions)
        return
    shuffled = StructType(schema.key.fields[:fields])
    for key in encoded:
        partition = partition_of(schema.decode_key(key)[:fields], shuffled, num_partitions)
        if not held.covers(partition):
            raise _not_held(entry, held, partition, num_partitions)


def _not_held(
    entry: JobEntry, held: PartitionRanges, partition: int | None, num_partitions: int
) -> PartitionNotHeld:
    job = entry.descriptor.name
    where = (
        f"the key falls in Spark partition {partition} of {num_partitions}"
        if partition is not None
        else "the key is not here, and which partition it falls in cannot be told for this store"
    )
    return PartitionNotHeld(
        f"job {job!r}: {where}; this daemon holds partitions {held} only (ask a replica of the key's shard)",
        metadata={
            "job": job,
            "partition": "" if partition is None else str(partition),
            "heldPartitions": str(held),
        },
    )
