"""Which shape (key and value schemas, number of partitions) a store has at an epoch.

Schemas. Spark writes a store's schema file when a query run first plans the store
and the store has none; a restarted query whose schema changed in a way Spark
accepts keeps the old file. So a rewritten schema file is a new schema from that
run's first epoch on. A change is told from the file's content, never from its
time: the schema read (see :meth:`Checkpoint.store_schema`, read again whenever the
follower checks) against the newest one recorded. It is in force from the first
epoch ingested after the change was seen. Whether that epoch committed before the
rewrite cannot be told from content (object stores keep whole seconds): such an
epoch is read with the new schema, as Spark's own state reader reads every epoch
with the newest file. Epochs ingested before keep their schema.

Partitions. Spark plans every epoch's state stores with the partition count pinned
in that epoch's offset log entry (:meth:`Checkpoint.state_partitions`); an offline
repartition (Spark 4.2+) writes a batch with the new count and the stores' state
in the new layout. The count is read for every epoch, so each epoch is read, and
its keys are placed, with its own.

State variables. A transformWithState operator's stores are the state variables
its run declares (``_metadata/v2/<first batch of the run>``), read per epoch: a
variable the run of an epoch no longer declares has a shape that says it is
absent from that epoch on; declared again, it gets a shape of its schemas.

Each shape the daemon sees is recorded as a :class:`StoreShape` keyed by the first
epoch it is in force at, written with that epoch.
"""

from __future__ import annotations

import json

from epochstate.core.sparktypes import type_to_json
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.daemon.sources.errors import MissingCheckpointFile
from epochstate.daemon.store.catalog import StoreHandle
from epochstate.daemon.store.descriptors import StoreShape


def store_shape(
    checkpoint: Checkpoint, operator_id: int, store: str, first_epoch: int, num_partitions: int
) -> StoreShape:
    """The store's schema file and ``num_partitions`` as a shape in force from ``first_epoch``.

    Raises:
        MissingCheckpointFile, CorruptCheckpointFile, UnsupportedCheckpoint: see
            :meth:`Checkpoint.store_schema`.
    """
    key, value = checkpoint.store_schema(operator_id, store, first_epoch)
    return StoreShape(
        first_epoch, json.dumps(type_to_json(key)), json.dumps(type_to_json(value)), num_partitions
    )


class ShapeWatch:
    """Notices rewritten schema files by their content, and partition counts that
    change from one epoch to the next. Not thread-safe: the ingest thread owns it."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        self._checkpoint = checkpoint

    def change_at(self, handle: StoreHandle, epoch: int) -> StoreShape | None:
        """A new shape of ``handle`` in force from ``epoch``, or None when the handle's
        newest shape is the one the checkpoint has at ``epoch`` (a schema file that is
        gone, removed for the next run to write anew, changes nothing).

        Raises:
            MissingCheckpointFile, CorruptCheckpointFile, UnsupportedCheckpoint: see
                :meth:`Checkpoint.store_schema` and :meth:`Checkpoint.state_partitions`.
        """
        d, latest = handle.descriptor, handle.latest.version
        partitions = self._checkpoint.state_partitions(epoch) or latest.num_partitions
        if d.kind and not self._declared(d.operator_id, d.store_name, epoch):
            found = StoreShape(
                epoch, latest.key_schema_json, latest.value_schema_json, partitions, absent=True
            )
            return None if found.same_shape(latest) else found
        try:
            found = store_shape(self._checkpoint, d.operator_id, d.store_name, epoch, partitions)
        except MissingCheckpointFile:
            found = StoreShape(epoch, latest.key_schema_json, latest.value_schema_json, partitions)
        return None if found.same_shape(latest) else found

    def _declared(self, operator_id: int, store: str, epoch: int) -> bool:
        """Whether the run of ``epoch`` declares the state variable ``store``."""
        for operator in self._checkpoint.operators(epoch):
            if operator.operator_id == operator_id:
                return any(info.name == store for info in operator.stores)
        return False
