"""The raw state of one store of Spark's RocksDB provider at any version, rebuilt
from its files (see :mod:`store_dir` for which files hold what): the newest usable
snapshot at or below the version, then the changelogs after it; along the commit
log's lineage of unique ids with checkpoint format version 2. A format 1 snapshot
is used only when it is the committed attempt's (see :mod:`attempts`), decided from
content, never from modification times.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from epochstate.core.storage.location import Location
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.daemon.sources.errors import CorruptStateFile, MissingStateFile, UnsupportedCheckpoint
from epochstate.daemon.sources.rocksdb.attempts import (
    as_records,
    snapshot_sequence_disagreement,
    value_disagreement,
)
from epochstate.daemon.sources.rocksdb.changelog import DELETE, MERGE, ChangelogHeader, ChangelogRecord
from epochstate.daemon.sources.rocksdb.changelog_files import ChangelogFiles
from epochstate.daemon.sources.rocksdb.snapshot import SnapshotMetadata, SnapshotReader
from epochstate.daemon.sources.rocksdb.snapshot_zip import zip_errors
from epochstate.daemon.sources.rocksdb.store_dir import CHANGELOG, ZIP, StoreDirectory

log = logging.getLogger(__name__)

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


class StoreFiles:
    """The state files of one store (every partition), read as raw keys and values.
    Files are immutable once Spark has renamed them into place; nothing here writes
    to the checkpoint (snapshots are opened in ``scratch_dir``, or the system's
    temporary directory).

    ``column_families``: whether the store may use them (transformWithState). When
    false, a typed changelog or a snapshot with a column family mapping is refused
    rather than misread. ``merge_delimiter``: what list merges are joined with.
    ``codec``: the changelogs' compression codec, or a function of the version (see
    :class:`ChangelogFiles`).
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        operator_id: int,
        store_name: str,
        codec: str | Callable[[int], str],
        *,
        column_families: bool = False,
        merge_delimiter: bytes = LIST_DELIMITER,
        scratch_dir: Path | None = None,
    ) -> None:
        self.directory = StoreDirectory(checkpoint, operator_id, store_name, single_store=column_families)
        self.changelogs = ChangelogFiles(self.directory, codec, column_families=column_families)
        self.column_families = column_families
        self.merge_delimiter = merge_delimiter
        self.scratch_dir = scratch_dir
        # Per partition: the version and bytes of the newest zip a whole state was read
        # from (format 1), so the next version's diff need not read it again.
        self.last_zip: dict[int, tuple[int, bytes]] = {}
        # Partitions whose directory held no changelog when last listed.
        self.without_changelogs: set[int] = set()

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
        path = self.directory.path(partition, version, ZIP, unique_id)
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
        path = self.directory.path(partition, version, ZIP)
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
                    self.changelogs.changelog(partition, version)[1]
                    if self.column_families
                    else as_records(self.changelogs.changelog_rows(partition, version))
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
        names = self.directory.names(partition)
        changelogs = set(self.directory.versions_in(names, CHANGELOG))
        if not changelogs:
            self.without_changelogs.add(partition)
        for candidate in reversed([v for v in self.directory.versions_in(names, ZIP) if v <= version]):
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
                    for record in self.changelogs.changelog(partition, changelog)[1]:
                        apply_record(state, record, self.merge_delimiter)
                    continue
                rows = self.changelogs.changelog_rows(partition, changelog)
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
        unique_id = self.directory.unique_id(partition, version)
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
            if self.directory.path(partition, version, ZIP, unique_id).is_file():
                base = attempt
                break
            header, records = self.changelogs.changelog(partition, version, unique_id)
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
            path = self.directory.path(partition, version, CHANGELOG, unique_id)
            lineage = [v for v, _ in below]
            raise CorruptStateFile(f"{path}: lineage versions {lineage[::-1]} do not lead up to {version}")
        return below

    def has_delta(self, version: int, partitions: Iterable[int]) -> bool:
        """Whether each of ``partitions`` has the files that give the changes of ``version``
        alone: its changelog, or the snapshots at ``version - 1`` (none needed for
        version 1) and ``version``."""
        try:
            for p in partitions:
                if self.directory.path(p, version, CHANGELOG).is_file():
                    continue
                if not self.directory.path(p, version, ZIP).is_file():
                    return False
                if version > 1 and not self.directory.path(p, version - 1, ZIP).is_file():
                    return False
        except MissingStateFile:  # a commit entry naming the files is gone
            return False
        return True

    def has_full(self, version: int, partitions: Iterable[int]) -> bool:
        """Whether each of ``partitions`` has a usable ``<version>.zip`` (the committed
        attempt's), so the version can be loaded whole without any earlier file. Opens
        the zips (format 1 with changelogs) to tell."""
        try:
            for p in partitions:
                unique_id = self.directory.unique_id(p, version)
                if unique_id is not None:
                    if not self.directory.path(p, version, ZIP, unique_id).is_file():
                        return False
                    continue
                names = self.directory.names(p)
                if f"{version}.{ZIP}" not in names:
                    return False
                if self.committed_snapshot(p, version, f"{version}.{CHANGELOG}" in names) is None:
                    return False
        except MissingStateFile:  # a commit entry naming the files is gone
            return False
        return True
