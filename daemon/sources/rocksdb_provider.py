"""Reading one store of one operator written by Spark's RocksDB state store provider.

Store version ``v`` is the state after epoch ``v - 1``. Each partition directory
(see :meth:`Checkpoint.store_dir`) holds, for the versions not yet purged:

* ``<v>.changelog`` -- the puts and removals of version ``v`` (see
  :mod:`rocksdb_changelog`), for every version while
  ``spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled`` is on;
* ``<v>.zip`` -- the whole state at ``v`` (see :mod:`rocksdb_snapshot`): for every
  version while changelog checkpointing is off, and otherwise now and then, written
  by background maintenance once ``minDeltasForSnapshot`` changelogs piled up.

So version ``v`` is the newest zip at or below ``v`` plus the changelogs after it.
The changes of a version come from its changelog; without one (changelog
checkpointing off) they are the difference between the states at ``v - 1`` and
``v``, which costs two snapshot reads. Keys and values are encoded as in
:mod:`rocksdb_rows`.

State checkpoint format version 2 (``spark.sql.streaming.stateStore.checkpointFormatVersion``),
which names files ``<v>_<uniqueId>.changelog|zip`` and records the ids in the commit
log, and stores with column families (transformWithState) are refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from epochstate.daemon.sources.changes import StateChange, decode_changes
from epochstate.daemon.sources.checkpoint import CHECKPOINT_FORMAT_CONF, COMPRESSION_CODEC_CONF, Checkpoint
from epochstate.daemon.sources.errors import (
    MissingCheckpointFile,
    MissingStateFile,
    UnsupportedCheckpoint,
)
from epochstate.daemon.sources.lz4stream import read_lz4_block_stream
from epochstate.daemon.sources.operators import DEFAULT_STORE, StoreInfo
from epochstate.daemon.sources.rocksdb_changelog import iter_changelog
from epochstate.daemon.sources.rocksdb_conf import LZ4_CODECS, check_rocksdb_conf
from epochstate.daemon.sources.rocksdb_rows import StateRowDecoder
from epochstate.daemon.sources.rocksdb_snapshot import SnapshotReader
from epochstate.daemon.sources.sparktypes import StructType
from epochstate.daemon.sources.statefile import StateRecord

CHANGELOG = "changelog"
ZIP = "zip"
_STATE_FILE = re.compile(r"(\d+)(_[^.]+)?\.(changelog|zip)")


class RocksDBStoreReader:
    """Reads the versions of one store (all its partitions), like
    :class:`HdfsStoreReader` and with the same guarantees: files are immutable once
    Spark has renamed them into place, so a version whose files exist reads the same
    every time; reads never write to the checkpoint (snapshots are opened from a
    scratch directory, ``scratch_dir`` or the system's temporary directory).
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        operator_id: int,
        store_name: str,
        num_partitions: int,
        key_schema: StructType,
        value_schema: StructType,
        *,
        num_cols_prefix_key: int | None = None,
        scratch_dir: Path | None = None,
    ) -> None:
        """Check the checkpoint's state format and compile the schemas.

        ``num_cols_prefix_key``: the store's, as in the operator metadata (looked up
        there when ``None``).

        Raises:
            UnsupportedCheckpoint: not the RocksDB provider (names
                ``spark.sql.streaming.stateStore.providerClass``), a row encoding other
                than ``unsaferow``, or state checkpoint format version 2.
            MissingCheckpointFile: the checkpoint has no epoch yet to read its conf from.
        """
        self._codec = check_rocksdb_conf(checkpoint)
        self.checkpoint = checkpoint
        self.operator_id = operator_id
        self.store_name = store_name
        self.num_partitions = num_partitions
        self.key_schema = key_schema
        self.value_schema = value_schema
        self.scratch_dir = scratch_dir
        if num_cols_prefix_key is None:
            recorded = _store_info(checkpoint, operator_id, store_name)
            num_cols_prefix_key = recorded.num_cols_prefix_key if recorded else 0
        self._keys = StateRowDecoder(key_schema, num_cols_prefix_key)
        self._values = StateRowDecoder(value_schema)

    @classmethod
    def open(
        cls,
        checkpoint: Checkpoint,
        operator_id: int,
        store_name: str = DEFAULT_STORE,
        *,
        scratch_dir: Path | None = None,
    ) -> RocksDBStoreReader:
        """A reader with partitions, schemas and prefix columns taken from the
        checkpoint itself.

        Raises:
            MissingCheckpointFile: unknown operator or store (or no schema file).
            UnsupportedCheckpoint, CorruptCheckpointFile: as for the constructor and
                :meth:`Checkpoint.store_schema`.
        """
        store = _store_info(checkpoint, operator_id, store_name)
        if store is not None:
            key, value = checkpoint.store_schema(operator_id, store_name)
            return cls(
                checkpoint,
                operator_id,
                store_name,
                store.num_partitions,
                key,
                value,
                num_cols_prefix_key=store.num_cols_prefix_key,
                scratch_dir=scratch_dir,
            )
        raise MissingCheckpointFile(f"{checkpoint.root}: no store {store_name!r} of operator {operator_id}")

    # Files.

    def _dir(self, partition: int) -> Path:
        return self.checkpoint.store_dir(self.operator_id, partition, self.store_name)

    def _path(self, partition: int, version: int, kind: str) -> Path:
        return self._dir(partition) / f"{version}.{kind}"

    def _versions(self, partition: int, kind: str) -> list[int]:
        directory = self._dir(partition)
        try:
            names = [p.name for p in directory.iterdir()]
        except FileNotFoundError:
            return []
        versions = []
        for name in names:
            match = _STATE_FILE.fullmatch(name)
            if match is None:
                continue
            if match.group(2):
                raise UnsupportedCheckpoint(
                    f"{directory / name}: state files with unique ids ({CHECKPOINT_FORMAT_CONF}=2)"
                )
            if match.group(3) == kind:
                versions.append(int(match.group(1)))
        return sorted(versions)

    def _missing(self, partition: int, path: Path) -> MissingStateFile:
        # Listing the directory tells a purged file from format 2's renamed ones.
        self._versions(partition, ZIP)
        return MissingStateFile(f"{path}: does not exist")

    def _changelog(self, partition: int, version: int) -> Iterator[StateRecord]:
        path = self._path(partition, version, CHANGELOG)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise self._missing(partition, path) from None
        if self._codec not in LZ4_CODECS:
            raise UnsupportedCheckpoint(
                f"{path}: {COMPRESSION_CODEC_CONF}={self._codec}; only lz4 is readable"
            )
        header, records = iter_changelog(read_lz4_block_stream(data, str(path)), str(path))
        if header.typed:
            raise UnsupportedCheckpoint(f"{path}: changelog v{header.version}: a store with column families")
        if header.lineage:
            raise UnsupportedCheckpoint(f"{path}: changelog with lineage ({CHECKPOINT_FORMAT_CONF}=2)")
        return records

    def _snapshot(self, partition: int, version: int) -> dict[bytes, bytes]:
        path = self._path(partition, version, ZIP)
        if not path.is_file():
            raise self._missing(partition, path)
        with SnapshotReader(path, self.scratch_dir) as snapshot:
            if snapshot.metadata.column_families:
                families = sorted(snapshot.metadata.column_families)
                raise UnsupportedCheckpoint(f"{path}: a store with column families {families}")
            return dict(snapshot.items())

    def _stale(self, partition: int, version: int) -> bool:
        """Whether ``<version>.zip`` predates ``<version>.changelog``.

        Maintenance uploads the snapshot a store instance took at commit. When a batch
        fails after its stores committed and then re-runs, the re-run overwrites the
        changelog, but the failed attempt's snapshot may stay. The changelog is the
        committed attempt's, so such a snapshot is skipped (it differs only for
        non-deterministic queries; Spark's own reader would use it).
        """
        try:
            snapshot = self._path(partition, version, ZIP).stat().st_mtime_ns
            return snapshot < self._path(partition, version, CHANGELOG).stat().st_mtime_ns
        except FileNotFoundError:
            return False

    def _raw_state(self, partition: int, version: int) -> dict[bytes, bytes]:
        if version < 0:
            raise ValueError(f"negative store version {version}")
        zips = [v for v in self._versions(partition, ZIP) if v <= version and not self._stale(partition, v)]
        state: dict[bytes, bytes] = {}
        base = 0
        if zips:
            base = zips[-1]
            state = self._snapshot(partition, base)
        for changelog in range(base + 1, version + 1):
            try:
                records = self._changelog(partition, changelog)
            except MissingStateFile as err:
                start = f"{base}.zip" if base else "the empty version 0"
                raise MissingStateFile(f"{err}; rebuilding version {version} from {start} needs it") from None
            for key, value in records:
                if value is None:
                    state.pop(key, None)
                else:
                    state[key] = value
        return state

    def _decode(
        self, partition: int, rows: Iterable[tuple[bytes, bytes | None]], where: Path
    ) -> Iterator[StateChange]:
        return decode_changes(partition, rows, self._keys, self._values, where)

    # Reading.

    def has_delta(self, version: int) -> bool:
        """Whether every partition has what :meth:`changes` reads for ``version``
        from files alone: the changelog, or the two snapshots at ``version - 1``
        (none needed for version 1) and ``version``."""
        for p in range(self.num_partitions):
            if self._path(p, version, CHANGELOG).is_file():
                continue
            if not self._path(p, version, ZIP).is_file():
                return False
            if version > 1 and not self._path(p, version - 1, ZIP).is_file():
                return False
        return True

    def has_full(self, version: int) -> bool:
        """Whether every partition has a usable ``<version>.zip``."""
        return all(
            self._path(p, version, ZIP).is_file() and not self._stale(p, version)
            for p in range(self.num_partitions)
        )

    def partition_changes(self, partition: int, version: int) -> Iterator[StateChange]:
        """The changes version ``version`` made in one partition: each changed key once,
        with its last operation. From the version's changelog, keys in the order they
        were first touched; a removal may name a key that was absent (Spark logs every
        removal it is asked for). Without a changelog, the difference between the
        snapshots of ``version - 1`` and ``version``: removals, then puts of keys whose
        value bytes changed, in key order.

        Raises:
            MissingStateFile: neither the changelog nor the snapshot of ``version``
                exists, or the state at ``version - 1`` cannot be rebuilt.
            CorruptStateFile: a file is damaged or does not match the schemas.
            UnsupportedCheckpoint: see the module docstring.
        """
        if version < 1:
            raise ValueError(f"store version {version} has no changes")
        path = self._path(partition, version, CHANGELOG)
        if path.is_file():
            last: dict[bytes, bytes | None] = {}
            for key, value in self._changelog(partition, version):
                last[key] = value
            return self._decode(partition, last.items(), path)
        if not self._path(partition, version, ZIP).is_file():
            raise self._missing(partition, path)
        after = self._snapshot(partition, version)
        before = self._raw_state(partition, version - 1)
        diff: list[tuple[bytes, bytes | None]] = [(k, None) for k in before if k not in after]
        diff.extend((k, v) for k, v in after.items() if before.get(k) != v)
        return self._decode(partition, diff, self._dir(partition))

    def changes(self, version: int) -> Iterator[StateChange]:
        """:meth:`partition_changes` of every partition, partition by partition.

        Raises:
            MissingStateFile, CorruptStateFile, UnsupportedCheckpoint: as for
                :meth:`partition_changes`.
        """
        for partition in range(self.num_partitions):
            yield from self.partition_changes(partition, version)

    def partition_state(self, partition: int, version: int) -> Iterator[StateChange]:
        """The whole state of one partition at ``version`` (only puts), rebuilt from the
        newest snapshot at or below ``version`` and the changelogs after it. Version 0
        is the empty state before the first epoch.

        Raises:
            ValueError: a negative version.
            MissingStateFile: a changelog needed after the snapshot (or a table file
                the snapshot names) does not exist.
            CorruptStateFile: a file is damaged or does not match the schemas.
            UnsupportedCheckpoint: see the module docstring.
        """
        state = self._raw_state(partition, version)
        return self._decode(partition, state.items(), self._dir(partition))

    def full_state(self, version: int) -> Iterator[StateChange]:
        """:meth:`partition_state` of every partition, partition by partition.

        Raises:
            ValueError, MissingStateFile, CorruptStateFile, UnsupportedCheckpoint: as
                for :meth:`partition_state`.
        """
        for partition in range(self.num_partitions):
            yield from self.partition_state(partition, version)


def _store_info(checkpoint: Checkpoint, operator_id: int, store_name: str) -> StoreInfo | None:
    for op in checkpoint.operators():
        if op.operator_id == operator_id:
            return next((store for store in op.stores if store.name == store_name), None)
    return None
