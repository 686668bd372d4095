"""Reading one store of one operator written by Spark's RocksDB state store provider.

The files and how a version is rebuilt from them are described in
:mod:`store_dir` and :mod:`store_files`. The changes of a version come from its changelog;
without one (changelog checkpointing off) they are the difference between the
states at ``v - 1`` and ``v``, which costs two snapshot reads. Keys and values are
encoded as in :mod:`rocksdb_rows`.

The settings of :mod:`conf` are checked per version, against the offset log of the
epoch that wrote it: a later run's settings never decide how an earlier epoch is
read. State checkpoint format version 2 is resolved per version (:mod:`unique_ids`).
Stores with column families (transformWithState) are read by :mod:`tws_reader`;
this reader refuses them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from epochstate.core.sparktypes import StructType
from epochstate.core.storage.location import Location
from epochstate.daemon.sources.changes import RawRows, RowFraming, StateChange, decode_changes
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.daemon.sources.checkpoint.operators import DEFAULT_STORE, StoreInfo
from epochstate.daemon.sources.errors import MissingCheckpointFile, MissingStateFile, SourceError
from epochstate.daemon.sources.rocksdb.conf import check_version_conf
from epochstate.daemon.sources.rocksdb.rows import StateRowDecoder
from epochstate.daemon.sources.rocksdb.snapshot_diff import (
    PreviousZips,
    ZipRead,
    added_tables,
    newest_writes_changes,
    read_for_diff,
)
from epochstate.daemon.sources.rocksdb.store_dir import CHANGELOG, ZIP
from epochstate.daemon.sources.rocksdb.store_files import StoreFiles


class RocksDBStoreReader:
    """Reads the versions of one store (all its partitions, or the ``partitions`` given:
    the files of the others are never read, listed or asked about), like
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
        partitions: Sequence[int] | None = None,
    ) -> None:
        """Compile the schemas. The state format is checked by each read, for the
        version read (see the module docstring).

        ``num_cols_prefix_key``: the store's, as in the operator metadata (looked up
        there when ``None``).
        """
        self._files = StoreFiles(
            checkpoint, operator_id, store_name, self._checked_codec, scratch_dir=scratch_dir
        )
        self.checkpoint = checkpoint
        self.operator_id = operator_id
        self.store_name = store_name
        self.num_partitions = num_partitions
        self.partitions = tuple(range(num_partitions)) if partitions is None else tuple(partitions)
        self.key_schema = key_schema
        self.value_schema = value_schema
        self.scratch_dir = scratch_dir
        if num_cols_prefix_key is None:
            recorded = _store_info(checkpoint, operator_id, store_name)
            num_cols_prefix_key = recorded.num_cols_prefix_key if recorded else 0
        self._keys = StateRowDecoder(key_schema, num_cols_prefix_key)
        self._values = StateRowDecoder(value_schema)
        # What the raw_* methods hand out: rows as stored, decoded by these.
        self.framing = RowFraming(version_byte=True, num_cols_prefix_key=num_cols_prefix_key)
        self._previous = PreviousZips()
        # Partitions whose newest version read had no changelog (changelog
        # checkpointing off): their next version's zip is looked for first.
        self._zips_first: set[int] = set()
        # Zips read by raw_changes before the partitions' diffs: partition -> (version, read).
        self._zips_read: dict[int, tuple[int, ZipRead]] = {}
        self.decode_key = self._keys.decode
        self.decode_value = self._values.decode

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
            UnsupportedCheckpoint, CorruptCheckpointFile: as for
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

    def _decode(
        self, partition: int, rows: Iterable[tuple[bytes, bytes | None]], where: Location | Path
    ) -> Iterator[StateChange]:
        return decode_changes(partition, rows, self._keys, self._values, where)

    def _dir(self, partition: int) -> Location:
        return self._files.directory.dir(partition)

    def _checked_codec(self, version: int) -> str:
        """Check the settings ``version`` was written with; its changelog's codec.

        Raises:
            UnsupportedCheckpoint: not the RocksDB provider (names
                ``spark.sql.streaming.stateStore.providerClass``), a row encoding other
                than ``unsaferow``, or row checksums.
            MissingCheckpointFile: the checkpoint has no offset log entry at all.
        """
        return check_version_conf(self._files.directory.checkpoint, version)

    # Reading.

    def has_delta(self, version: int) -> bool:
        """Whether every partition has what :meth:`changes` reads for ``version``
        from files alone: the changelog, or the two snapshots at ``version - 1``
        (none needed for version 1) and ``version``."""
        return self._files.has_delta(version, self.partitions)

    def read_ahead(self, version: int) -> None:
        """Start reading what :meth:`changes` of ``version`` reads first: every
        partition's changelog, or zip where the last version had none (see
        :meth:`Storage.read_ahead`)."""
        for p in self.partitions:
            zips_first = p in self._zips_first or p in self._files.without_changelogs
            try:
                path = self._files.directory.path(p, version, ZIP if zips_first else CHANGELOG)
            except MissingStateFile:  # which files cannot be told yet: read when asked
                continue
            path.storage.read_ahead(path.path)

    def has_full(self, version: int) -> bool:
        """Whether every partition has a usable ``<version>.zip``."""
        return self._files.has_full(version, self.partitions)

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
        return self._decode(*self._raw_partition_changes(partition, version))

    def _raw_partition_changes(self, partition: int, version: int) -> RawRows:
        if version < 1:
            raise ValueError(f"store version {version} has no changes")
        self._checked_codec(version)
        # Files are read without asking first whether they exist (on an object store,
        # a request each): the changelog, or, in a partition that had none last time,
        # the zip.
        files = self._files
        if partition in files.without_changelogs:  # a full load found none
            files.without_changelogs.discard(partition)
            self._zips_first.add(partition)
        zips_first = partition in self._zips_first
        if not zips_first:
            found_changelog = files.changelogs.changelog_rows_if_any(partition, version)
            if found_changelog is not None:
                # The last record of a key wins.
                return RawRows(partition, dict(found_changelog[1]).items(), found_changelog[0])
        after_zip = files.directory.path(partition, version, ZIP)
        ready = self._zips_read.pop(partition, None)
        try:
            after_read = ready[1] if ready is not None and ready[0] == version else read_for_diff(after_zip)
        except MissingStateFile:
            if zips_first:
                self._zips_first.discard(partition)
                return self._raw_partition_changes(partition, version)
            raise files.directory.missing(
                partition, files.directory.path(partition, version, CHANGELOG)
            ) from None
        self._zips_first.add(partition)
        before_zip = files.directory.path(partition, version - 1, ZIP)
        before_read = self._previous.take(before_zip) if version > 1 else None
        self._previous.record(after_zip, after_read)
        if before_read is None and version > 1:
            recent = files.last_zip.get(partition)  # the zip a full load just read
            content = recent[1] if recent is not None and recent[0] == version - 1 else None
            with contextlib.suppress(MissingStateFile):  # no earlier zip: compare whole states
                before_read = read_for_diff(before_zip, content)
        if before_read is not None and before_read.opened is not None:
            # Only the earlier zip's sequence number and file names are used, never its
            # keys: whether it is the committed attempt's does not matter here.
            found = newest_writes_changes(before_read.opened, after_zip, after_read)
            if found is not None:
                return RawRows(partition, found, self._dir(partition))
        # The whole states. Without changelogs, the earlier zip (when there is one) is
        # the state before: no failed attempt's snapshot can stand beside a changelog.
        after = files.snapshot(partition, version, content=after_read.content)[1]
        if version == 1:
            before: dict[bytes, bytes] = {}
        elif before_read is not None and zips_first:
            before = files.snapshot(partition, version - 1, content=before_read.content)[1]
        else:
            before = files.raw_state(partition, version - 1)
        diff: list[tuple[bytes, bytes | None]] = [(k, None) for k in before if k not in after]
        diff.extend((k, v) for k, v in after.items() if before.get(k) != v)
        return RawRows(partition, diff, self._dir(partition))

    def changes(self, version: int) -> Iterator[StateChange]:
        """:meth:`partition_changes` of each partition read, partition by partition.

        Raises:
            MissingStateFile, CorruptStateFile, UnsupportedCheckpoint: as for
                :meth:`partition_changes`.
        """
        for partition in self.partitions:
            yield from self.partition_changes(partition, version)

    def raw_changes(self, version: int) -> list[RawRows]:
        """:meth:`changes`, undecoded: each partition's files are read (and checked)
        before this returns.

        Raises:
            MissingStateFile, CorruptStateFile, UnsupportedCheckpoint: as for
                :meth:`partition_changes`.
        """
        self._read_tables_ahead(version)
        return [self._raw_partition_changes(p, version) for p in self.partitions]

    def _read_tables_ahead(self, version: int) -> None:
        """Partitions read from zips: read each one's zip now and start reading the
        table files it adds (see :meth:`Storage.read_ahead`), so that on an object
        store they arrive together rather than partition after partition."""
        if self._files.directory.checkpoint.root.is_local or version < 2:
            return
        self._zips_read.clear()
        for p in sorted(self._zips_first):
            after_zip = self._files.directory.path(p, version, ZIP)
            before = self._previous.peek(self._files.directory.path(p, version - 1, ZIP))
            try:
                read = read_for_diff(after_zip)
            except SourceError:
                continue  # read again, and its error raised, in order
            self._zips_read[p] = (version, read)
            if before is not None and before.opened is not None:
                for table in added_tables(before.opened, read):
                    path = after_zip.parent / table
                    path.storage.read_ahead(path.path)

    def raw_state(self, version: int) -> Iterator[RawRows]:
        """:meth:`full_state`, undecoded, partition by partition.

        Raises:
            ValueError, MissingStateFile, CorruptStateFile, UnsupportedCheckpoint: as
                for :meth:`partition_state`.
        """
        for partition in self.partitions:
            yield RawRows(partition, self._raw_state(partition, version).items(), self._dir(partition))

    def _raw_state(self, partition: int, version: int) -> dict[bytes, bytes]:
        if version >= 1:
            self._checked_codec(version)
        return self._files.raw_state(partition, version)

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
        """:meth:`partition_state` of each partition read, partition by partition.

        Raises:
            ValueError, MissingStateFile, CorruptStateFile, UnsupportedCheckpoint: as
                for :meth:`partition_state`.
        """
        for partition in self.partitions:
            yield from self.partition_state(partition, version)


def _store_info(checkpoint: Checkpoint, operator_id: int, store_name: str) -> StoreInfo | None:
    for op in checkpoint.operators():
        if op.operator_id == operator_id:
            return next((store for store in op.stores if store.name == store_name), None)
    return None
