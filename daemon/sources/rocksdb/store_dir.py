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

With state checkpoint format version 2 the files are ``<v>_<uniqueId>.changelog``
and ``<v>_<uniqueId>.zip``, one pair per attempt; the committed attempt's id comes
from the commit log (see :mod:`unique_ids`), never from the directory listing, so
a failed attempt's files are never read. Such a changelog names, in its lineage,
the id of every version back to the snapshot its writer started from; version
``v`` is rebuilt along that lineage: the newest of its snapshots that exists, then
its changelogs in order.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from epochstate.core.storage.location import Location
from epochstate.daemon.sources.checkpoint.checkpoint import (
    CHECKPOINT_FORMAT_CONF,
    COMPRESSION_CODEC_CONF,
    Checkpoint,
)
from epochstate.daemon.sources.errors import (
    CorruptStateFile,
    MissingStateFile,
    SourceError,
    UnsupportedCheckpoint,
)
from epochstate.daemon.sources.rocksdb.attempts import (
    as_records,
    snapshot_sequence_disagreement,
    value_disagreement,
)
from epochstate.daemon.sources.rocksdb.changelog import (
    DELETE,
    MERGE,
    ChangelogHeader,
    ChangelogRecord,
    iter_changelog,
    iter_changelog_ops,
)
from epochstate.daemon.sources.rocksdb.conf import LZ4_CODECS
from epochstate.daemon.sources.rocksdb.snapshot import SnapshotMetadata, SnapshotReader, zip_errors
from epochstate.daemon.sources.rocksdb.unique_ids import CommittedIds
from epochstate.daemon.sources.rows.lz4stream import read_lz4_block_stream

log = logging.getLogger(__name__)

CHANGELOG = "changelog"
ZIP = "zip"
_STATE_FILE = re.compile(r"([0-9]+)(_[^.]+)?\.(changelog|zip)")  # ASCII digits: \d also matches "٣"
# RocksDB's string-append merge operator joins with this under Spark's
# ``mergeOperatorVersion`` 1, and with nothing under version 2 (see conf).
LIST_DELIMITER = b","

RawState = dict[bytes, bytes]
# A store version and the unique id of its files (format 2).
Attempt = tuple[int, str]


def apply_record(state: RawState, record: ChangelogRecord, delimiter: bytes = LIST_DELIMITER) -> None:
    """Apply one changelog record to a raw state, as RocksDB would; a merge appends
    after ``delimiter``."""
    if record.op == DELETE:
        state.pop(record.key, None)
        return
    assert record.value is not None
    if record.op == MERGE:
        old = state.get(record.key)
        state[record.key] = record.value if old is None else old + delimiter + record.value
    else:
        state[record.key] = record.value


class StoreDirectory:
    """The state files of one store (every partition). Files are immutable once
    Spark has renamed them into place; nothing here writes to the checkpoint
    (snapshots are opened in ``scratch_dir``, or the system's temporary directory).

    ``column_families``: whether the store may use them (transformWithState). When
    false, a typed changelog or a snapshot with a column family mapping is refused
    rather than misread. ``merge_delimiter``: what list merges are joined with.

    Every method taking a version finds its files by the committed attempt's unique
    id (format 2) or by the bare version (format 1), as the commit log says.
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        operator_id: int,
        store_name: str,
        codec: str,
        *,
        column_families: bool = False,
        merge_delimiter: bytes = LIST_DELIMITER,
        scratch_dir: Path | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.operator_id = operator_id
        self.store_name = store_name
        self.codec = codec
        self.column_families = column_families
        self.merge_delimiter = merge_delimiter
        self.scratch_dir = scratch_dir
        self.ids = CommittedIds(checkpoint, operator_id, store_name, single_store=column_families)
        # Per partition: the version and bytes of the newest zip a whole state was read
        # from (format 1), so the next version's diff need not read it again.
        self.last_zip: dict[int, tuple[int, bytes]] = {}
        # Partitions whose directory held no changelog when last listed.
        self.without_changelogs: set[int] = set()

    def dir(self, partition: int) -> Location:
        return self.checkpoint.store_dir(self.operator_id, partition, self.store_name)

    def unique_id(self, partition: int, version: int) -> str | None:
        """The unique id of the committed ``version``'s files, ``None`` for format 1.

        Raises:
            MissingStateFile, CorruptCheckpointFile: see :meth:`CommittedIds.unique_id`.
        """
        return self.ids.unique_id(partition, version)

    def path(self, partition: int, version: int, kind: str, unique_id: str | None = None) -> Location:
        """The ``kind`` file of ``version``: of the attempt ``unique_id`` if given,
        else of the committed attempt.

        Raises:
            MissingStateFile, CorruptCheckpointFile: as for :meth:`unique_id`.
        """
        if unique_id is None:
            unique_id = self.unique_id(partition, version)
        name = f"{version}.{kind}" if unique_id is None else f"{version}_{unique_id}.{kind}"
        return self.dir(partition) / name

    def _names(self, partition: int) -> list[str]:
        try:
            return [p.name for p in self.dir(partition).iterdir()]
        except FileNotFoundError:
            return []

    def versions(self, partition: int, kind: str) -> list[int]:
        """The versions with a ``kind`` file named by the bare version (format 1), ascending."""
        return self._versions_in(self._names(partition), kind)

    @staticmethod
    def _versions_in(names: list[str], kind: str) -> list[int]:
        versions = []
        for name in names:
            match = _STATE_FILE.fullmatch(name)
            if match is not None and not match.group(2) and match.group(3) == kind:
                versions.append(int(match.group(1)))
        return sorted(versions)

    def zip_names(self, partition: int) -> list[str]:
        """The names of every snapshot in the directory, of any attempt, newest version first."""
        found = []
        for name in self._names(partition):
            match = _STATE_FILE.fullmatch(name)
            if match is not None and match.group(3) == ZIP:
                found.append((int(match.group(1)), name))
        return [name for _, name in sorted(found, reverse=True)]

    def missing(self, partition: int, path: Location) -> SourceError:
        """The error for a state file ``path`` that does not exist: a format 1 name
        while the directory holds only files with unique ids means the commit log
        lost the ids (refused); otherwise it is missing."""
        if "_" not in path.name:
            names = [_STATE_FILE.fullmatch(n) for n in self._names(partition)]
            if any(m and m.group(2) for m in names) and not any(m and not m.group(2) for m in names):
                return UnsupportedCheckpoint(
                    f"{path}: does not exist, but state files with unique ids do "
                    f"({CHECKPOINT_FORMAT_CONF}=2) and the commit log records none"
                )
        return MissingStateFile(f"{path}: does not exist")

    def changelog(
        self, partition: int, version: int, unique_id: str | None = None
    ) -> tuple[ChangelogHeader, list[ChangelogRecord]]:
        """The records of ``version``'s changelog (of the attempt ``unique_id`` if
        given, else of the committed one), read whole (so a damaged file fails before
        any record is used).

        Raises:
            MissingStateFile: no such file.
            UnsupportedCheckpoint: not lz4, a lineage in a file without a unique id,
                or typed records (merges) in a store without column families.
            CorruptStateFile: the file is damaged.
        """
        path, content = self._changelog_content(partition, version, unique_id)
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

    def changelog_if_any(self, partition: int, version: int) -> list[ChangelogRecord] | None:
        """The records of :meth:`changelog` (of the committed attempt), or ``None`` when
        the file does not exist (one read: nothing is asked before it).

        Raises:
            MissingStateFile: the commit entry naming the file is gone (format 2).
            UnsupportedCheckpoint, CorruptStateFile: as for :meth:`changelog`.
        """
        found = self._content_if_any(partition, version)
        if found is None:
            return None
        header, records = iter_changelog_ops(found[1], str(found[0]))
        self._check_header(found[0], header)
        return list(records)

    def changelog_rows_if_any(
        self, partition: int, version: int
    ) -> tuple[Location, list[tuple[bytes, bytes | None]]] | None:
        """:meth:`changelog_rows` and the file's location, or ``None`` when the file does
        not exist (one read: nothing is asked before it).

        Raises:
            MissingStateFile: the commit entry naming the file is gone (format 2).
            UnsupportedCheckpoint, CorruptStateFile: as for :meth:`changelog`.
        """
        found = self._content_if_any(partition, version)
        if found is None:
            return None
        header, records = iter_changelog(found[1], str(found[0]))
        self._check_header(found[0], header)
        return found[0], list(records)

    def _content_if_any(self, partition: int, version: int) -> tuple[Location, bytes] | None:
        path = self.path(partition, version, CHANGELOG)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        return path, self._decompress(path, data)

    def _changelog_content(
        self, partition: int, version: int, unique_id: str | None = None
    ) -> tuple[Location, bytes]:
        path = self.path(partition, version, CHANGELOG, unique_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise self.missing(partition, path) from None
        return path, self._decompress(path, data)

    def _decompress(self, path: Location, data: bytes) -> bytes:
        if self.codec not in LZ4_CODECS:
            raise UnsupportedCheckpoint(
                f"{path}: {COMPRESSION_CODEC_CONF}={self.codec}; only lz4 is readable"
            )
        return read_lz4_block_stream(data, str(path))

    def _check_header(self, path: Location, header: ChangelogHeader) -> None:
        if header.typed and not self.column_families:
            raise UnsupportedCheckpoint(f"{path}: changelog v{header.version}: a store with column families")
        if header.lineage and "_" not in path.name:
            raise UnsupportedCheckpoint(f"{path}: changelog with lineage ({CHECKPOINT_FORMAT_CONF}=2)")

    def snapshot(
        self, partition: int, version: int, unique_id: str | None = None, content: bytes | None = None
    ) -> tuple[SnapshotMetadata, RawState]:
        """The metadata and every key of ``version``'s zip (of the attempt
        ``unique_id`` if given, else of the committed one). ``content``: the zip's
        bytes, when already read.

        Raises:
            MissingStateFile: the zip or a table file it names does not exist.
            UnsupportedCheckpoint: column families in a store that should have none.
            CorruptStateFile: the zip or the database is damaged.
        """
        path = self.path(partition, version, ZIP, unique_id)
        with SnapshotReader(path, self.scratch_dir, self.merge_delimiter, content) as snapshot:
            self._check_families(path, snapshot.metadata)
            return snapshot.metadata, dict(snapshot.items())

    def _check_families(self, path: Location, metadata: SnapshotMetadata) -> None:
        if metadata.column_families and not self.column_families:
            families = sorted(metadata.column_families)
            raise UnsupportedCheckpoint(f"{path}: a store with column families {families}")

    def committed_snapshot(self, partition: int, version: int, has_changelog: bool) -> RawState | None:
        """Every key of ``<version>.zip`` (format 1), or ``None`` when the zip is not the
        committed attempt's: when ``has_changelog``, its content must agree with
        ``<version>.changelog`` (see :mod:`attempts`).

        Raises:
            MissingStateFile, UnsupportedCheckpoint, CorruptStateFile: as for
                :meth:`snapshot`, or a damaged changelog.
        """
        path = self.path(partition, version, ZIP)
        with zip_errors(path):
            content = path.local_path().read_bytes()
        self.last_zip[partition] = (version, content)
        with SnapshotReader(path, self.scratch_dir, self.merge_delimiter, content) as snapshot:
            self._check_families(path, snapshot.metadata)
            state = dict(snapshot.items())
            if not has_changelog:
                return state
            try:
                records = (
                    self.changelog(partition, version)[1]
                    if self.column_families
                    else as_records(self.changelog_rows(partition, version))
                )
            except MissingStateFile:
                return state  # purged meanwhile: nothing to disagree with
            reason = value_disagreement(state, records, self.merge_delimiter)
            if reason is None:
                reason = snapshot_sequence_disagreement(snapshot, records)
        if reason is not None:
            log.warning("%s is not the committed attempt's snapshot (%s); not used", path, reason)
            return None
        return state

    def usable_snapshot(self, partition: int, version: int) -> tuple[int, RawState]:
        """The newest snapshot at or below ``version`` that is the committed attempt's,
        and its raw state; ``(0, {})`` (the empty version 0) when there is none. One
        listing of the directory; zips are opened newest first until one is usable.

        Raises:
            MissingStateFile, UnsupportedCheckpoint, CorruptStateFile: as for
                :meth:`committed_snapshot`.
        """
        names = self._names(partition)
        changelogs = set(self._versions_in(names, CHANGELOG))
        if not changelogs:
            self.without_changelogs.add(partition)
        for candidate in reversed([v for v in self._versions_in(names, ZIP) if v <= version]):
            state = self.committed_snapshot(partition, candidate, candidate in changelogs)
            if state is not None:
                return candidate, state
        return 0, {}

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
                        apply_record(state, record, self.merge_delimiter)
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
        unique_id = self.unique_id(partition, version)
        if unique_id is not None:
            return self._raw_state_along_lineage(partition, (version, unique_id))
        base, state = self.usable_snapshot(partition, version)
        self.replay(partition, state, base, version)
        return state

    def _raw_state_along_lineage(self, partition: int, target: Attempt) -> RawState:
        """Format 2: from the newest snapshot on ``target``'s lineage, then the
        lineage's changelogs up to ``target``'s."""
        replay: list[tuple[Attempt, list[ChangelogRecord]]] = []  # newest first
        pending = [target]  # attempts to look at, newest first
        base: Attempt | None = None
        while pending:
            version, unique_id = attempt = pending.pop(0)
            if self.path(partition, version, ZIP, unique_id).is_file():
                base = attempt
                break
            header, records = self.changelog(partition, version, unique_id)
            replay.append((attempt, records))
            if version == 1:
                break
            if not pending:
                pending = self._lineage_below(partition, attempt, header)
        state: RawState = self.snapshot(partition, base[0], base[1])[1] if base else {}
        for _, records in reversed(replay):
            for record in records:
                apply_record(state, record, self.merge_delimiter)
        return state

    def _lineage_below(self, partition: int, attempt: Attempt, header: ChangelogHeader) -> list[Attempt]:
        """The attempts ``attempt``'s changelog names below itself, newest first:
        consecutive versions down from ``version - 1``."""
        version, unique_id = attempt
        below = [(item.version, item.unique_id) for item in reversed(header.lineage)]
        expected = list(range(version - 1, version - 1 - len(below), -1))
        if not below or [v for v, _ in below] != expected:
            path = self.path(partition, version, CHANGELOG, unique_id)
            lineage = [v for v, _ in below]
            raise CorruptStateFile(f"{path}: lineage versions {lineage[::-1]} do not lead up to {version}")
        return below

    def has_delta(self, version: int, num_partitions: int) -> bool:
        """Whether every partition has the files that give the changes of ``version``
        alone: its changelog, or the snapshots at ``version - 1`` (none needed for
        version 1) and ``version``."""
        try:
            for p in range(num_partitions):
                if self.path(p, version, CHANGELOG).is_file():
                    continue
                if not self.path(p, version, ZIP).is_file():
                    return False
                if version > 1 and not self.path(p, version - 1, ZIP).is_file():
                    return False
        except MissingStateFile:  # a commit entry naming the files is gone
            return False
        return True

    def has_full(self, version: int, num_partitions: int) -> bool:
        """Whether every partition has a usable ``<version>.zip`` (the committed
        attempt's), so the version can be loaded whole without any earlier file. Opens
        the zips (format 1 with changelogs) to tell."""
        try:
            for p in range(num_partitions):
                unique_id = self.unique_id(p, version)
                if unique_id is not None:
                    if not self.path(p, version, ZIP, unique_id).is_file():
                        return False
                    continue
                names = self._names(p)
                if f"{version}.{ZIP}" not in names:
                    return False
                if self.committed_snapshot(p, version, f"{version}.{CHANGELOG}" in names) is None:
                    return False
        except MissingStateFile:  # a commit entry naming the files is gone
            return False
        return True
