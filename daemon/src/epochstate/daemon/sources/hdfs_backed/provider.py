"""Reading one store of one operator written by Spark's HDFS-backed state store provider.

Store version ``v`` is the state after epoch ``v - 1``. Each partition directory
holds ``<v>.delta`` (the puts and removals of version ``v``) for every version
that has not been purged, and now and then ``<v>.snapshot`` (the whole state at
``v``, written by background maintenance). Both are lz4 block streams of state
file records (see :mod:`lz4stream` and :mod:`statefile`).

The state format (:meth:`Checkpoint.ensure_hdfs_backed`) is checked per version,
against the offset log of the epoch that wrote it (or, that entry purged, the
oldest one left: Spark pins these settings for the checkpoint's life), so a later
run's settings never decide how an earlier epoch is read.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from epochstate.core.sparktypes import StructType
from epochstate.core.storage.location import Location
from epochstate.daemon.sources.changes import RawRows, RowFraming, StateChange, decode_changes
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.daemon.sources.checkpoint.operators import DEFAULT_STORE
from epochstate.daemon.sources.errors import (
    MissingCheckpointFile,
    MissingStateFile,
    UnsupportedCheckpoint,
)
from epochstate.daemon.sources.rows.lz4stream import read_lz4_block_stream
from epochstate.daemon.sources.rows.statefile import iter_records
from epochstate.daemon.sources.rows.unsaferow import RowDecoder

log = logging.getLogger(__name__)

DELTA = "delta"
SNAPSHOT = "snapshot"


class HdfsStoreReader:
    """Reads the versions of one store: all its partitions, or the ``partitions`` given
    (the files of the others are never read, listed or asked about).

    Files are immutable once Spark has renamed them into place, so any version
    whose files exist reads the same every time. Reads never write.
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
        partitions: Sequence[int] | None = None,
    ) -> None:
        """Compile the schemas. The state format is checked by each read, for the
        version read (see the module docstring)."""
        self.checkpoint = checkpoint
        self.operator_id = operator_id
        self.store_name = store_name
        self.num_partitions = num_partitions
        self.partitions = tuple(range(num_partitions)) if partitions is None else tuple(partitions)
        self.key_schema = key_schema
        self.value_schema = value_schema
        self._keys = RowDecoder(key_schema)
        self._values = RowDecoder(value_schema)
        # What the raw_* methods hand out: bare UnsafeRows, decoded by these.
        self.framing = RowFraming()
        self.decode_key = self._keys.decode
        self.decode_value = self._values.decode
        self._checked: set[int] = set()  # store versions whose epoch's settings passed

    @classmethod
    def open(
        cls, checkpoint: Checkpoint, operator_id: int, store_name: str = DEFAULT_STORE
    ) -> HdfsStoreReader:
        """A reader with partitions and schemas taken from the checkpoint itself.

        Raises:
            MissingCheckpointFile: unknown operator or store (or no schema file).
            UnsupportedCheckpoint, CorruptCheckpointFile: as for
                :meth:`Checkpoint.store_schema`.
        """
        for op in checkpoint.operators():
            if op.operator_id != operator_id:
                continue
            for store in op.stores:
                if store.name == store_name:
                    key, value = checkpoint.store_schema(operator_id, store_name)
                    return cls(checkpoint, operator_id, store_name, store.num_partitions, key, value)
        raise MissingCheckpointFile(f"{checkpoint.root}: no store {store_name!r} of operator {operator_id}")

    def _check(self, version: int) -> None:
        """Check the settings store version ``version`` was written with.

        Raises:
            UnsupportedCheckpoint: not the HDFS-backed provider with lz4 (names
                ``spark.sql.streaming.stateStore.providerClass``), or row checksums.
            MissingCheckpointFile: the checkpoint has no offset log entry at all.
        """
        if version < 1 or version in self._checked:
            return
        epoch = version - 1
        try:
            try:
                self.checkpoint.ensure_hdfs_backed(epoch)
            except MissingCheckpointFile:
                planned = self.checkpoint.planned_epochs()
                if not planned:
                    raise
                epoch = planned[0]
                self.checkpoint.ensure_hdfs_backed(epoch)
        except UnsupportedCheckpoint as error:
            raise UnsupportedCheckpoint(f"{error} (the settings of epoch {epoch})") from error
        self._checked.add(version)

    def _path(self, partition: int, version: int, kind: str) -> Location:
        return self.checkpoint.store_dir(self.operator_id, partition, self.store_name) / (f"{version}.{kind}")

    def _records(self, path: Location, allow_removals: bool) -> Iterator[tuple[bytes, bytes | None]]:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise MissingStateFile(f"{path}: does not exist") from None
        content = read_lz4_block_stream(data, str(path))
        return iter_records(content, str(path), allow_removals)

    def _decode(
        self, partition: int, rows: Iterable[tuple[bytes, bytes | None]], path: Location | Path
    ) -> Iterator[StateChange]:
        return decode_changes(partition, rows, self._keys, self._values, path)

    def has_delta(self, version: int) -> bool:
        """Whether each partition read has its ``<version>.delta`` (so :meth:`changes` can run)."""
        return all(self._path(p, version, DELTA).is_file() for p in self.partitions)

    def read_ahead(self, version: int) -> None:
        """Start reading what :meth:`changes` of ``version`` reads (every partition's
        delta read), on an object store (see :meth:`Storage.read_ahead`)."""
        for p in self.partitions:
            path = self._path(p, version, DELTA)
            path.storage.read_ahead(path.path)

    def has_full(self, version: int) -> bool:
        """Whether each partition read has a usable ``<version>.snapshot`` (one that agrees
        with its delta: see :meth:`_committed_snapshot`); reads them to tell."""
        for p in self.partitions:
            names = self._names(p)
            if f"{version}.{SNAPSHOT}" not in names:
                return False
            if self._committed_snapshot(p, version, f"{version}.{DELTA}" in names) is None:
                return False
        return True

    def partition_changes(self, partition: int, version: int) -> Iterator[StateChange]:
        """The changes version ``version`` made in one partition: each changed key once,
        with its last operation, in the order keys were first touched.

        Raises:
            MissingStateFile: no ``<version>.delta`` (purged, or not written yet).
            CorruptStateFile: the delta is damaged or does not match the schemas.
            UnsupportedCheckpoint: the epoch that wrote ``version`` ran with a state
                format this reader refuses (see :meth:`_check`).
        """
        return self._decode(*self._raw_partition_changes(partition, version))

    def _raw_partition_changes(self, partition: int, version: int) -> RawRows:
        self._check(version)
        path = self._path(partition, version, DELTA)
        # The last record of a key wins.
        return RawRows(partition, dict(self._records(path, allow_removals=True)).items(), path)

    def changes(self, version: int) -> Iterator[StateChange]:
        """:meth:`partition_changes` of each partition read, partition by partition.

        Raises:
            MissingStateFile, CorruptStateFile, UnsupportedCheckpoint: as for :meth:`partition_changes`.
        """
        for partition in self.partitions:
            yield from self.partition_changes(partition, version)

    def raw_changes(self, version: int) -> list[RawRows]:
        """:meth:`changes`, undecoded: each partition's files are read (and checked)
        before this returns.

        Raises:
            MissingStateFile, CorruptStateFile, UnsupportedCheckpoint: as for :meth:`partition_changes`.
        """
        return [self._raw_partition_changes(p, version) for p in self.partitions]

    def raw_state(self, version: int) -> Iterator[RawRows]:
        """:meth:`full_state`, undecoded, partition by partition.

        Raises:
            ValueError, MissingStateFile, CorruptStateFile, UnsupportedCheckpoint: as for
                :meth:`partition_state`.
        """
        for partition in self.partitions:
            yield self._raw_partition_state(partition, version)

    def _names(self, partition: int) -> list[str]:
        directory = self.checkpoint.store_dir(self.operator_id, partition, self.store_name)
        return directory.names()

    @staticmethod
    def _versions_in(names: list[str], kind: str) -> list[int]:
        suffix = "." + kind
        stems = (n[: -len(suffix)] for n in names if n.endswith(suffix))
        return sorted(int(s) for s in stems if s.isdigit() and s.isascii())

    def partition_state(self, partition: int, version: int) -> Iterator[StateChange]:
        """The whole state of one partition at ``version`` (only puts), rebuilt from the
        newest snapshot at or below ``version`` and the deltas after it. Version 0 is
        the empty state before the first epoch.

        Raises:
            ValueError: a negative version.
            MissingStateFile: a delta needed after the snapshot does not exist.
            CorruptStateFile: a snapshot or delta is damaged or does not match the schemas.
            UnsupportedCheckpoint: as for :meth:`partition_changes`.
        """
        return self._decode(*self._raw_partition_state(partition, version))

    def _raw_partition_state(self, partition: int, version: int) -> RawRows:
        if version < 0:
            raise ValueError(f"negative store version {version}")
        self._check(version)
        names = self._names(partition)  # one listing decides which files exist
        deltas = set(self._versions_in(names, DELTA))
        state: dict[bytes, bytes | None] = {}
        first_delta = 1
        for base in reversed([v for v in self._versions_in(names, SNAPSHOT) if v <= version]):
            found = self._committed_snapshot(partition, base, base in deltas)
            if found is not None:
                state = found
                first_delta = base + 1
                break
        for delta in range(first_delta, version + 1):
            for key, value in self._records(self._path(partition, delta, DELTA), True):
                if value is None:
                    state.pop(key, None)
                else:
                    state[key] = value
        where = self.checkpoint.store_dir(self.operator_id, partition, self.store_name)
        return RawRows(partition, state.items(), where)

    def _committed_snapshot(
        self, partition: int, version: int, has_delta: bool
    ) -> dict[bytes, bytes | None] | None:
        """Every key of ``<version>.snapshot``, or ``None`` when it is not the committed
        attempt's.

        Spark's maintenance task snapshots whatever version it holds in memory. When
        a batch fails after its state stores committed (e.g. in the sink), that may be
        the failed attempt's state; the re-run then rewrites the delta but not the
        snapshot, and another executor's snapshot may even come later. The delta is
        the committed attempt's, so a snapshot is used only when every key the delta
        writes holds, in the snapshot, the value of its last write there (absent
        after a removal): decided from content, as object stores keep modification
        times in whole seconds. (Spark's own state reader prefers the snapshot and so
        can return the failed attempt's state; the two differ only for
        non-deterministic queries.)

        Raises:
            MissingStateFile, CorruptStateFile: the snapshot is gone or damaged, or the
                delta is damaged.
        """
        snapshot = self._path(partition, version, SNAPSHOT)
        state: dict[bytes, bytes | None] = dict(self._records(snapshot, False))
        if not has_delta:
            return state
        try:
            written = dict(self._records(self._path(partition, version, DELTA), True))
        except MissingStateFile:
            return state  # purged meanwhile: nothing to disagree with
        for key, value in written.items():
            if state.get(key) != value:
                log.warning(
                    "%s is not the committed attempt's snapshot (key %r differs from %s.%s); not used",
                    snapshot,
                    key[:40],
                    version,
                    DELTA,
                )
                return None
        return state

    def full_state(self, version: int) -> Iterator[StateChange]:
        """:meth:`partition_state` of each partition read, partition by partition.

        Raises:
            ValueError, MissingStateFile, CorruptStateFile, UnsupportedCheckpoint: as for
                :meth:`partition_state`.
        """
        for partition in self.partitions:
            yield from self.partition_state(partition, version)
