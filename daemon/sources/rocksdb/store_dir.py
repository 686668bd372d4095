"""The files of one store of Spark's RocksDB provider, as raw keys and values.

Store version ``v`` is the state after epoch ``v - 1``. Each partition directory
(see :meth:`Checkpoint.store_dir`) holds, for the versions not yet purged:

* ``<v>.changelog`` -- the puts, deletes (and, for list state, merges) of version
  ``v`` (see :mod:`rocksdb_changelog`), for every version while
  ``spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled`` is on;
* ``<v>.zip`` -- the whole state at ``v`` (see :mod:`rocksdb_snapshot`): for every
  version while changelog checkpointing is off, and otherwise now and then, written
  by background maintenance once ``minDeltasForSnapshot`` changelogs piled up (and
  at once when a version creates a column family).

So version ``v`` is the newest zip at or below ``v`` plus the changelogs after it.
This module rebuilds that raw state; decoding keys and values is the readers' job.
"""

from __future__ import annotations

import re
from pathlib import Path

from epochstate.core.storage.location import Location
from epochstate.daemon.sources.checkpoint.checkpoint import (
    CHECKPOINT_FORMAT_CONF,
    COMPRESSION_CODEC_CONF,
    Checkpoint,
)
from epochstate.daemon.sources.errors import MissingStateFile, UnsupportedCheckpoint
from epochstate.daemon.sources.rocksdb.changelog import (
    DELETE,
    MERGE,
    ChangelogHeader,
    ChangelogRecord,
    iter_changelog,
    iter_changelog_ops,
)
from epochstate.daemon.sources.rocksdb.conf import LZ4_CODECS
from epochstate.daemon.sources.rocksdb.snapshot import SnapshotMetadata, SnapshotReader
from epochstate.daemon.sources.rows.lz4stream import read_lz4_block_stream

CHANGELOG = "changelog"
ZIP = "zip"
_STATE_FILE = re.compile(r"(\d+)(_[^.]+)?\.(changelog|zip)")
LIST_DELIMITER = b","

RawState = dict[bytes, bytes]


def apply_record(state: RawState, record: ChangelogRecord) -> None:
    """Apply one changelog record to a raw state, as RocksDB would."""
    if record.op == DELETE:
        state.pop(record.key, None)
        return
    assert record.value is not None
    if record.op == MERGE:
        old = state.get(record.key)
        state[record.key] = record.value if old is None else old + LIST_DELIMITER + record.value
    else:
        state[record.key] = record.value


class StoreDirectory:
    """The state files of one store (every partition). Files are immutable once
    Spark has renamed them into place; nothing here writes to the checkpoint
    (snapshots are opened in ``scratch_dir``, or the system's temporary directory).

    ``column_families``: whether the store may use them (transformWithState). When
    false, a typed changelog or a snapshot with a column family mapping is refused
    rather than misread.
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        operator_id: int,
        store_name: str,
        codec: str,
        *,
        column_families: bool = False,
        scratch_dir: Path | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.operator_id = operator_id
        self.store_name = store_name
        self.codec = codec
        self.column_families = column_families
        self.scratch_dir = scratch_dir

    def dir(self, partition: int) -> Location:
        return self.checkpoint.store_dir(self.operator_id, partition, self.store_name)

    def path(self, partition: int, version: int, kind: str) -> Location:
        return self.dir(partition) / f"{version}.{kind}"

    def versions(self, partition: int, kind: str) -> list[int]:
        """The versions with a ``kind`` file, ascending.

        Raises:
            UnsupportedCheckpoint: files named with unique ids (checkpoint format 2).
        """
        directory = self.dir(partition)
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

    def missing(self, partition: int, path: Location) -> MissingStateFile:
        # Listing the directory tells a purged file from format 2's renamed ones.
        self.versions(partition, ZIP)
        return MissingStateFile(f"{path}: does not exist")

    def changelog(self, partition: int, version: int) -> tuple[ChangelogHeader, list[ChangelogRecord]]:
        """The records of ``<version>.changelog``, read whole (so a damaged file fails
        before any record is used).

        Raises:
            MissingStateFile: no such file.
            UnsupportedCheckpoint: not lz4, a lineage (format 2), or typed records
                (merges) in a store without column families.
            CorruptStateFile: the file is damaged.
        """
        path, content = self._changelog_content(partition, version)
        header, records = iter_changelog_ops(content, str(path))
        self._check_header(path, header)
        return header, list(records)

    def changelog_rows(self, partition: int, version: int) -> list[tuple[bytes, bytes | None]]:
        """The records of ``<version>.changelog`` of a store without column families, as
        (key, value) pairs in file order, value ``None`` for a delete; read whole.

        Raises:
            MissingStateFile, UnsupportedCheckpoint, CorruptStateFile: as for
                :meth:`changelog` (which this is, without a record object per row).
        """
        path, content = self._changelog_content(partition, version)
        header, records = iter_changelog(content, str(path))
        self._check_header(path, header)
        return list(records)

    def _changelog_content(self, partition: int, version: int) -> tuple[Location, bytes]:
        path = self.path(partition, version, CHANGELOG)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise self.missing(partition, path) from None
        if self.codec not in LZ4_CODECS:
            raise UnsupportedCheckpoint(
                f"{path}: {COMPRESSION_CODEC_CONF}={self.codec}; only lz4 is readable"
            )
        return path, read_lz4_block_stream(data, str(path))

    def _check_header(self, path: Location, header: ChangelogHeader) -> None:
        if header.typed and not self.column_families:
            raise UnsupportedCheckpoint(f"{path}: changelog v{header.version}: a store with column families")
        if header.lineage:
            raise UnsupportedCheckpoint(f"{path}: changelog with lineage ({CHECKPOINT_FORMAT_CONF}=2)")

    def snapshot(self, partition: int, version: int) -> tuple[SnapshotMetadata, RawState]:
        """The metadata and every key of ``<version>.zip``.

        Raises:
            MissingStateFile: the zip or a table file it names does not exist.
            UnsupportedCheckpoint: column families in a store that should have none.
            CorruptStateFile: the zip or the database is damaged.
        """
        path = self.path(partition, version, ZIP)
        if not path.is_file():
            raise self.missing(partition, path)
        with SnapshotReader(path, self.scratch_dir) as snapshot:
            if snapshot.metadata.column_families and not self.column_families:
                families = sorted(snapshot.metadata.column_families)
                raise UnsupportedCheckpoint(f"{path}: a store with column families {families}")
            return snapshot.metadata, dict(snapshot.items())

    def stale(self, partition: int, version: int) -> bool:
        """Whether ``<version>.zip`` predates ``<version>.changelog``.

        Maintenance uploads the snapshot a store instance took at commit. When a batch
        fails after its stores committed and then re-runs, the re-run overwrites the
        changelog, but the failed attempt's snapshot may stay. The changelog is the
        committed attempt's, so such a snapshot is skipped (it differs only for
        non-deterministic queries; Spark's own reader would use it).
        """
        try:
            snapshot = self.path(partition, version, ZIP)
            changelog = self.path(partition, version, CHANGELOG).stat()
            return not snapshot.stat().written_after(changelog, snapshot.mtime_resolution_ns)
        except FileNotFoundError:
            return False

    def base_snapshot(self, partition: int, version: int) -> int:
        """The newest usable snapshot version at or below ``version``; 0 (the empty
        state) when there is none."""
        zips = [v for v in self.versions(partition, ZIP) if v <= version and not self.stale(partition, v)]
        return zips[-1] if zips else 0

    def replay(self, partition: int, state: RawState, start: int, version: int) -> None:
        """Apply the changelogs of versions ``start + 1 .. version`` to ``state`` (the
        raw state at ``start``), in place.

        Raises:
            MissingStateFile: a changelog is missing (``state`` is then unchanged by it).
            UnsupportedCheckpoint, CorruptStateFile: as for :meth:`changelog`.
        """
        for changelog in range(start + 1, version + 1):
            try:
                if self.column_families:
                    for record in self.changelog(partition, changelog)[1]:
                        apply_record(state, record)
                    continue
                rows = self.changelog_rows(partition, changelog)
            except MissingStateFile as err:
                origin = f"{start}.zip" if start else "the empty version 0"
                raise MissingStateFile(
                    f"{err}; rebuilding version {version} from {origin} needs it"
                ) from None
            # Without column families there are only puts and deletes.
            for key, value in rows:
                if value is None:
                    state.pop(key, None)
                else:
                    state[key] = value

    def raw_state(self, partition: int, version: int) -> RawState:
        """The raw state of one partition at ``version`` (0: empty), from the newest
        usable snapshot at or below it and the changelogs after that.

        Raises:
            ValueError: a negative version.
            MissingStateFile, UnsupportedCheckpoint, CorruptStateFile: see
                :meth:`snapshot` and :meth:`replay`.
        """
        if version < 0:
            raise ValueError(f"negative store version {version}")
        base = self.base_snapshot(partition, version)
        state: RawState = self.snapshot(partition, base)[1] if base else {}
        self.replay(partition, state, base, version)
        return state

    def has_delta(self, version: int, num_partitions: int) -> bool:
        """Whether every partition has the files that give the changes of ``version``
        alone: its changelog, or the snapshots at ``version - 1`` (none needed for
        version 1) and ``version``."""
        for p in range(num_partitions):
            if self.path(p, version, CHANGELOG).is_file():
                continue
            if not self.path(p, version, ZIP).is_file():
                return False
            if version > 1 and not self.path(p, version - 1, ZIP).is_file():
                return False
        return True

    def has_full(self, version: int, num_partitions: int) -> bool:
        """Whether every partition has a usable (not stale) ``<version>.zip``, so the
        version can be loaded whole without any earlier file."""
        return all(
            self.path(p, version, ZIP).is_file() and not self.stale(p, version) for p in range(num_partitions)
        )
