"""The one physical RocksDB store of a transformWithState operator, shared by the
readers of its state variables.

All variables live in the operator's ``default`` store, each in a *virtual* column
family: every key starts with the family's 2-byte id (little-endian). Which id
belongs to which family is recorded only in the snapshots' ``metadata``
(``columnFamilyMapping``); Spark takes a snapshot at once whenever a version creates
a family, and never reuses an id, so the union of the mappings of the snapshots in
a partition directory names every id its files use.

Ingest reads a version's variables one after the other, so the raw state of the
newest version read is kept per partition and advanced in place by the next
version's changelog: each changelog and snapshot is read once per version, not
once per variable.
"""

from __future__ import annotations

import threading
import weakref

from epochstate.daemon.sources.errors import MissingStateFile
from epochstate.daemon.sources.rocksdb.changelog import ChangelogRecord
from epochstate.daemon.sources.rocksdb.snapshot import read_snapshot_metadata
from epochstate.daemon.sources.rocksdb.store_dir import CHANGELOG, ZIP
from epochstate.daemon.sources.rocksdb.store_files import RawState, StoreFiles, apply_record

_FAMILY_ID_BYTES = 2


class ColumnFamilyStore:
    """Raw state of every partition of one physical store, with a cache of the
    newest version read. Thread-safe; returned states must not be modified."""

    def __init__(self, files: StoreFiles) -> None:
        self.files = files
        self._lock = threading.Lock()
        self._states: dict[int, tuple[int, RawState]] = {}
        self._touched: dict[int, tuple[int, list[bytes]]] = {}
        self._mappings: dict[tuple[int, str], dict[str, int]] = {}

    # Column family ids.

    def family_prefix(self, partition: int, family: str) -> bytes:
        """The 2-byte key prefix of ``family`` in one partition.

        Raises:
            MissingStateFile: no snapshot of the partition maps the family (yet).
            CorruptStateFile: a snapshot's metadata is damaged.
        """
        with self._lock:
            for name in self._zip_names(partition):
                mapping = self._mapping(partition, name)
                if family in mapping:
                    return mapping[family].to_bytes(_FAMILY_ID_BYTES, "little")
        raise MissingStateFile(
            f"{self.files.directory.dir(partition)}: no snapshot maps column family {family!r} yet"
        )

    def _zip_names(self, partition: int) -> list[str]:
        # Newest first: the newest snapshot maps every family still in use.
        return self.files.directory.zip_names(partition)

    def _mapping(self, partition: int, name: str) -> dict[str, int]:
        cached = self._mappings.get((partition, name))
        if cached is not None:
            return cached
        path = self.files.directory.dir(partition) / name
        try:
            mapping = read_snapshot_metadata(path).column_families
        except MissingStateFile:
            return {}  # purged meanwhile; the newer snapshots map the same ids
        self._mappings[(partition, name)] = mapping
        return mapping

    # Raw state.

    def state(self, partition: int, version: int) -> RawState:
        """The raw state of one partition at ``version``.

        Raises:
            ValueError: a negative version.
            MissingStateFile, UnsupportedCheckpoint, CorruptStateFile: as for
                :meth:`StoreFiles.raw_state`.
        """
        with self._lock:
            cached = self._states.get(partition)
            if cached is not None and cached[0] == version:
                return cached[1]
            if cached is not None and cached[0] == version - 1:
                records = self.files.changelogs.changelog_if_any(partition, version)
                if records is not None:
                    return self._advance(partition, version, cached[1], records)[1]
            state = self.files.raw_state(partition, version)
            self._states[partition] = (version, state)
            self._touched.pop(partition, None)
            return state

    def delta(self, partition: int, version: int) -> tuple[list[bytes], RawState]:
        """The keys ``version`` touched (each once) and the raw state at ``version``.
        A touched key absent from the state was removed (or never there: Spark logs
        every removal it is asked for).

        Raises:
            ValueError: a version below 1.
            MissingStateFile: neither the changelog nor the snapshot of ``version``
                exists, or the state at ``version - 1`` cannot be rebuilt.
            UnsupportedCheckpoint, CorruptStateFile: as for :class:`StoreFiles`.
        """
        if version < 1:
            raise ValueError(f"store version {version} has no changes")
        with self._lock:
            touched = self._touched.get(partition)
            cached = self._states.get(partition)
            if touched is not None and touched[0] == version and cached is not None and cached[0] == version:
                return touched[1], cached[1]
            records = self.files.changelogs.changelog_if_any(partition, version)
            if records is not None:
                if cached is None or cached[0] != version - 1:
                    cached = (version - 1, self.files.raw_state(partition, version - 1))
                return self._advance(partition, version, cached[1], records)
            try:
                after = self.files.snapshot(partition, version)[1]
            except MissingStateFile:
                if self.files.directory.path(partition, version, ZIP).is_file():
                    raise  # a table file the zip names is gone
                raise self.files.directory.missing(
                    partition, self.files.directory.path(partition, version, CHANGELOG)
                ) from None
            before = cached[1] if cached is not None and cached[0] == version - 1 else None
            if before is None:
                before = self.files.raw_state(partition, version - 1)
            keys = [k for k in before if k not in after]
            keys.extend(k for k, v in after.items() if before.get(k) != v)
            self._states[partition] = (version, after)
            self._touched[partition] = (version, keys)
            return keys, after

    def _advance(
        self, partition: int, version: int, state: RawState, records: list[ChangelogRecord]
    ) -> tuple[list[bytes], RawState]:
        # The changelog was read whole before the state changes, so a damaged file
        # leaves the cached state as it was.
        self._states.pop(partition, None)
        delimiter = self.files.merge_delimiter
        for record in records:
            apply_record(state, record, delimiter)
        keys = list(dict.fromkeys(r.key for r in records))
        self._states[partition] = (version, state)
        self._touched[partition] = (version, keys)
        return keys, state


_SHARED: weakref.WeakValueDictionary[tuple[str, int, str], ColumnFamilyStore] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def shared_store(files: StoreFiles) -> ColumnFamilyStore:
    """The one :class:`ColumnFamilyStore` of ``files``' store while any reader holds it."""
    where = files.directory
    key = (str(where.checkpoint.root), where.operator_id, where.store_name)
    with _SHARED_LOCK:
        store = _SHARED.get(key)
        if store is None:
            store = ColumnFamilyStore(files)
            _SHARED[key] = store
        return store
