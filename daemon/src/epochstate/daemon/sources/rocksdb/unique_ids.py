"""Which attempt's files hold a store version: the unique ids of checkpoint format 2.

With ``spark.sql.streaming.stateStore.checkpointFormatVersion=2`` every attempt at
a store version writes its own files, ``<version>_<uniqueId>.changelog`` and
``<version>_<uniqueId>.zip``, so a failed attempt's files stay beside the committed
one's. Only the commit log tells them apart: ``commits/<epoch>`` records, per
operator, partition and store, the unique id of the version the epoch committed
(``epoch + 1``; see :mod:`commitlog`). The setting itself is not recorded in the
offset log, so the commit entry decides: one with ``stateUniqueIds`` means format 2
for that version, one without means format 1 (files named ``<version>.<kind>``).

An entry is read only when it may name ids: Spark's ids are UUIDs (36
characters), so an entry the commit log listing shows shorter than
:data:`SMALLEST_WITH_IDS` bytes names none (a format 1 entry, ``v1`` and the
watermark, is about 40 bytes). On an object store this spares one request per
version.
"""

from __future__ import annotations

import threading

from epochstate.core.checkpoint.commitlog import CommitEntry
from epochstate.daemon.sources.checkpoint.checkpoint import CHECKPOINT_FORMAT_CONF, Checkpoint
from epochstate.daemon.sources.errors import (
    CorruptCheckpointFile,
    MissingCheckpointFile,
    MissingStateFile,
)

# The shortest entry naming one id: 'v2\n{"stateUniqueIds":{"0":[["' + 36 + '"]]}}'.
SMALLEST_WITH_IDS = len('v2\n{"stateUniqueIds":{"0":[["') + 36 + len('"]]}}')


class CommittedIds:
    """The unique id of each committed version of one store, per partition.

    Commit entries never change once written, so answers are cached.
    ``single_store``: the operator has one physical store (the ids hold one per
    partition), as for transformWithState, whose state variables share it.
    """

    def __init__(
        self, checkpoint: Checkpoint, operator_id: int, store_name: str, *, single_store: bool
    ) -> None:
        self.checkpoint = checkpoint
        self.operator_id = operator_id
        self.store_name = store_name
        self.single_store = single_store
        self._lock = threading.Lock()
        self._entries: dict[int, CommitEntry] = {}
        self._index: int | None = 0 if single_store else None
        self._uses_ids: bool | None = None  # the format does not change within a query

    def unique_id(self, partition: int, version: int) -> str | None:
        """The unique id of the committed ``version`` of the store in ``partition``;
        ``None`` when it was written with checkpoint format 1 (bare version names).
        Version 0 (the empty state) has no files and no id.

        Raises:
            MissingStateFile: the commit entry of ``version - 1`` is gone (purged) or
                not written yet while the query uses format 2, so which files hold the
                version cannot be told.
            CorruptCheckpointFile: the entry's ids do not fit the operator's stores.
        """
        if version < 1:
            return None
        size = self.checkpoint.commit_size(version - 1)
        if size is not None and size < SMALLEST_WITH_IDS:
            return None
        entry = self._entry(version - 1)
        if entry is None:
            if self._newest_uses_ids():
                raise MissingStateFile(
                    f"{self.checkpoint.root}/commits/{version - 1}: does not exist; the unique id of "
                    f"store version {version} ({CHECKPOINT_FORMAT_CONF}=2) is recorded only there"
                )
            return None
        if entry.state_unique_ids is None:
            return None
        where = f"{self.checkpoint.root}/commits/{entry.epoch}"
        partitions = entry.state_unique_ids.get(self.operator_id)
        if partitions is None or partition >= len(partitions):
            raise CorruptCheckpointFile(
                f"{where}: no unique id of operator {self.operator_id} partition {partition}"
            )
        ids = partitions[partition]
        index = self._store_index(len(ids), where)
        return ids[index]

    def _entry(self, epoch: int) -> CommitEntry | None:
        with self._lock:
            cached = self._entries.get(epoch)
        if cached is not None:
            return cached
        try:
            entry = self.checkpoint.commit_entry(epoch)
        except MissingCheckpointFile:
            return None
        with self._lock:
            self._entries[epoch] = entry
        return entry

    def _newest_uses_ids(self) -> bool:
        if self._uses_ids is not None:
            return self._uses_ids
        newest = self.checkpoint.latest_committed()
        if newest is None:
            return False
        entry = self._entry(newest)
        if entry is None:
            return False
        self._uses_ids = entry.state_unique_ids is not None
        return self._uses_ids

    def _store_index(self, num_ids: int, where: str) -> int:
        if num_ids == 1:
            return 0
        if self._index is None:
            # The ids follow the order of the operator's stores in its metadata.
            stores = next(
                (op.stores for op in self.checkpoint.operators() if op.operator_id == self.operator_id), ()
            )
            names = [s.name for s in stores]
            if self.store_name not in names:
                raise CorruptCheckpointFile(
                    f"{where}: operator {self.operator_id} has no store {self.store_name!r}"
                )
            self._index = names.index(self.store_name)
        if self._index >= num_ids:
            raise CorruptCheckpointFile(
                f"{where}: {num_ids} unique ids for operator {self.operator_id}, store "
                f"{self.store_name!r} is number {self._index + 1}"
            )
        return self._index
