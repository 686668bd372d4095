"""Which key and value schemas are in force for a store at an epoch.

Spark writes a store's schema file when a query run first plans the store and the
store has none; a restarted query whose schema changed in a way Spark accepts
keeps the old file. So a rewritten file (removed, then written by the next run)
is a new schema from that run's first epoch on. The daemon records each schema
it sees as a :class:`SchemaVersion` keyed by the first epoch it is in force at,
written with that epoch, so every epoch keeps decoding and serving with its own.

A change is told from the file's content, never from its time: the schema read
(see :meth:`Checkpoint.store_schema`, read again whenever the follower checks)
against the newest one recorded. It is in force from the first epoch ingested
after the change was seen. Whether that epoch committed before the rewrite cannot
be told from content (object stores keep whole seconds): such an epoch is read
with the new schema, as Spark's own state reader reads every epoch with the newest
file. Epochs ingested before keep their schema.
"""

from __future__ import annotations

import json

from epochstate.core.sparktypes import type_to_json
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.daemon.sources.errors import MissingCheckpointFile
from epochstate.daemon.store.catalog import StoreHandle
from epochstate.daemon.store.descriptors import SchemaVersion


def schema_version(checkpoint: Checkpoint, operator_id: int, store: str, first_epoch: int) -> SchemaVersion:
    """The store's schema file as a version in force from ``first_epoch``.

    Raises:
        MissingCheckpointFile, CorruptCheckpointFile, UnsupportedCheckpoint: see
            :meth:`Checkpoint.store_schema`.
    """
    key, value = checkpoint.store_schema(operator_id, store)
    return SchemaVersion(first_epoch, json.dumps(type_to_json(key)), json.dumps(type_to_json(value)))


class SchemaWatch:
    """Notices rewritten schema files by their content. Not thread-safe: the ingest
    thread owns it."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        self._checkpoint = checkpoint

    def change_at(self, handle: StoreHandle, epoch: int) -> SchemaVersion | None:
        """A new schema version of ``handle`` in force from ``epoch``, or None when the
        handle's newest schema is the one in the checkpoint (or the file is gone:
        removed for the next run to write anew).

        Raises:
            CorruptCheckpointFile, UnsupportedCheckpoint: see :meth:`Checkpoint.store_schema`.
        """
        d = handle.descriptor
        try:
            found = schema_version(self._checkpoint, d.operator_id, d.store_name, epoch)
        except MissingCheckpointFile:
            return None
        return None if found.same_schemas(handle.latest.version) else found
