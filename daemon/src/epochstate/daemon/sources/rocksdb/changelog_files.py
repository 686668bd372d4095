"""Reading the changelogs of one store of Spark's RocksDB provider, whole and checked:
compressed with the codec of the epoch that wrote them (see :mod:`codecs`), with a
header that fits the store (no typed records without column families, no lineage in
a file named without a unique id).
"""

from __future__ import annotations

from collections.abc import Callable

from epochstate.core.storage.location import Location
from epochstate.daemon.sources.checkpoint.checkpoint import CHECKPOINT_FORMAT_CONF
from epochstate.daemon.sources.errors import UnsupportedCheckpoint
from epochstate.daemon.sources.rocksdb.changelog import (
    ChangelogHeader,
    ChangelogRecord,
    iter_changelog,
    iter_changelog_ops,
)
from epochstate.daemon.sources.rocksdb.store_dir import CHANGELOG, StoreDirectory
from epochstate.daemon.sources.rows.codecs import decompress


class ChangelogFiles:
    """The changelogs in ``directory``, compressed with ``codec`` (one for every version,
    or a function of the version: the codec of the epoch that wrote it).
    ``column_families``: whether the store may use them (typed records are refused
    otherwise)."""

    def __init__(
        self, directory: StoreDirectory, codec: str | Callable[[int], str], *, column_families: bool
    ) -> None:
        self.directory = directory
        self._codec = codec
        self.column_families = column_families

    def codec(self, version: int) -> str:
        """The compression codec of ``version``'s changelog."""
        return self._codec if isinstance(self._codec, str) else self._codec(version)

    def changelog(
        self, partition: int, version: int, unique_id: str | None = None
    ) -> tuple[ChangelogHeader, list[ChangelogRecord]]:
        """The records of ``version``'s changelog (of the attempt ``unique_id`` if
        given, else of the committed one), read whole (so a damaged file fails before
        any record is used).

        Raises:
            MissingStateFile: no such file.
            UnsupportedCheckpoint: a codec :mod:`codecs` does not read, a lineage in a
                file without a unique id, or typed records (merges) in a store without column families.
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
        path = self.directory.path(partition, version, CHANGELOG)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        return path, self._decompress(path, data, version)

    def _changelog_content(
        self, partition: int, version: int, unique_id: str | None = None
    ) -> tuple[Location, bytes]:
        path = self.directory.path(partition, version, CHANGELOG, unique_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise self.directory.missing(partition, path) from None
        return path, self._decompress(path, data, version)

    def _decompress(self, path: Location, data: bytes, version: int) -> bytes:
        return decompress(self.codec(version), data, str(path))

    def _check_header(self, path: Location, header: ChangelogHeader) -> None:
        if header.typed and not self.column_families:
            raise UnsupportedCheckpoint(f"{path}: changelog v{header.version}: a store with column families")
        if header.lineage and "_" not in path.name:
            raise UnsupportedCheckpoint(f"{path}: changelog with lineage ({CHECKPOINT_FORMAT_CONF}=2)")
