"""Which key and value schemas are in force for a store at an epoch.

Spark writes a store's schema file when a query run first plans the store; a
restarted query whose schema changed in a way Spark accepts (or a store whose file
was rewritten) gets a new file before the run's first epoch commits. So the schema
in the file is in force from the first epoch that committed after the file was
written. The daemon records each schema it sees as a :class:`SchemaVersion` keyed
by that first epoch, written with that epoch, so every epoch keeps decoding and
serving with its own schema.

Limits: only schemas the daemon saw are known. Epochs that committed before a
schema file the daemon never saw the previous content of are read with the
newest file (as Spark's own state reader does).
"""

from __future__ import annotations

import json

from epochstate.core.sparktypes import type_to_json
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
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
    """Notices rewritten schema files. Not thread-safe: the ingest thread owns it."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        self._checkpoint = checkpoint
        # Per store id: the write time of the schema file last settled.
        self._settled: dict[int, int] = {}

    def change_at(self, handle: StoreHandle, epoch: int) -> tuple[SchemaVersion, int] | None:
        """A new schema version of ``handle`` in force from ``epoch`` with the file's
        write time, or None when the handle's newest schema is in force at ``epoch``.

        Call :meth:`settle` with the write time once the epoch is written.
        """
        d = handle.descriptor
        written = self._checkpoint.store_schema_written_ns(d.operator_id, d.store_name)
        if written is None or written == self._settled.get(d.store_id):
            return None
        if self._checkpoint.commit_time_ms(epoch) < written // 1_000_000:
            return None  # the file belongs to a later run: not in force yet
        found = schema_version(self._checkpoint, d.operator_id, d.store_name, epoch)
        if found.same_schemas(handle.latest.version):
            self._settled[d.store_id] = written
            return None
        return found, written

    def settle(self, store_id: int, written: int) -> None:
        self._settled[store_id] = written

    def forget(self) -> None:
        self._settled.clear()
