"""The changes between two consecutive snapshots of a RocksDB store, from the
newest writes alone.

Spark builds version ``v`` by loading version ``v - 1`` into RocksDB and writing
the epoch's puts and removals, each with the next sequence number: the writes of
``v`` are exactly the sequence numbers after ``v - 1``'s last one, up to ``v``'s.
Only the keys they name can differ between the two versions. They live in the
table files ``v`` added (a file of ``v - 1`` holds only older sequence numbers),
and each keeps its sequence number unless a compaction dropped or renumbered it;
so when the files read hold an entry for every one of those sequence numbers
(numbers are unique), no write is missing, and the changes are those keys, each
with the value of its newest write, which is its value at ``v`` (``None``:
removed). Keys written with an unchanged value, or removed while absent, are
included, as in a changelog. When the count does not match, the caller compares
the whole states.

Both snapshots' last sequence numbers and live table files come from their
MANIFESTs (:mod:`rocksdb_manifest`); no database is opened. Files are read newest
level first (a commit's flush lands in level 0), and
reading stops as soon as every write is found, so a compaction's large output
is usually not read at all.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from epochstate.core.storage.location import Location
from epochstate.daemon.sources.errors import CorruptStateFile, MissingStateFile, UnsupportedCheckpoint
from epochstate.daemon.sources.rocksdb.manifest import LiveFile, ManifestFormatError, read_snapshot_manifest
from epochstate.daemon.sources.rocksdb.snapshot import LOG_DIR, SnapshotFile
from epochstate.daemon.sources.rocksdb.snapshot_zip import zip_errors
from epochstate.daemon.sources.rocksdb.sst import SstFormatError, SstWrites, sst_writes_after

log = logging.getLogger(__name__)


class Opened(NamedTuple):
    """What the diff needs of a snapshot it opened: its last sequence number and
    the table files it names (``dfs_path``); one without column families or WAL files."""

    sequence: int
    files: frozenset[str]


class ZipRead(NamedTuple):
    """A snapshot's zip as read: its bytes and, when the diff takes it, what the diff
    needs of it (:class:`Opened`, its live table files and the files its metadata
    names, both by local name)."""

    content: bytes
    opened: Opened | None
    live: dict[str, LiveFile]
    named: dict[str, SnapshotFile]


class PreviousZips:
    """The zip read for each partition's newest version, so the next version's
    changes need not read it again. Keyed by the zip's path alone: the diff takes
    only the earlier snapshot's last sequence number and file names from it, never
    its keys, so a zip rewritten since (a speculative twin of the same batch, with
    the same writes under other file names) only makes more files look added, and
    a count that does not match sends the caller to the whole states."""

    def __init__(self) -> None:
        self._known: dict[str, ZipRead] = {}

    def take(self, zip_path: Location) -> ZipRead | None:
        """What was recorded for ``zip_path``, forgotten (each is asked for once)."""
        return self._known.pop(str(zip_path), None)

    def peek(self, zip_path: Location) -> ZipRead | None:
        """What was recorded for ``zip_path``, kept."""
        return self._known.get(str(zip_path))

    def record(self, zip_path: Location, read: ZipRead) -> None:
        if len(self._known) > 4096:  # a store that is no longer followed in order
            self._known.clear()
        self._known[str(zip_path)] = read


def read_for_diff(zip_path: Location, content: bytes | None = None) -> ZipRead:
    """A snapshot's zip (one read, unless ``content`` is its bytes) and, unless the
    diff does not take it (WAL files, a MANIFEST the reader does not take), its last
    sequence number and table files.

    Raises:
        MissingStateFile: no such zip.
        CorruptStateFile: a damaged zip.
        UnsupportedCheckpoint: a store with column families.
    """
    if content is None:
        with zip_errors(zip_path):
            content = zip_path.read_bytes()
    try:
        metadata, manifest = read_snapshot_manifest(zip_path, content)
    except ManifestFormatError as err:
        log.info("%s; comparing whole snapshots", err)
        return ZipRead(content, None, {}, {})
    if metadata.column_families:
        raise UnsupportedCheckpoint(f"{zip_path}: a store with column families")
    if any(f.dfs_path.startswith(LOG_DIR + "/") for f in metadata.files):
        return ZipRead(content, None, {}, {})
    named = {f.local_name: f for f in metadata.files}
    live = {f.local_name: f for f in manifest.files.values()}
    if named.keys() != live.keys():
        log.info(
            "%s: its metadata and MANIFEST name different table files; comparing whole snapshots", zip_path
        )
        return ZipRead(content, None, {}, {})
    opened = Opened(manifest.last_sequence, frozenset(f.dfs_path for f in metadata.files))
    return ZipRead(content, opened, live, named)


def added_tables(before: Opened, after: ZipRead) -> list[str]:
    """The table files (``dfs_path``) ``after`` names that ``before`` does not."""
    return [f.dfs_path for f in after.named.values() if f.dfs_path not in before.files]


def newest_writes_changes(
    before: Opened, after_zip: Location, after_read: ZipRead
) -> list[tuple[bytes, bytes | None]] | None:
    """The raw changes from the snapshot ``before`` (version ``v - 1``, as read) to
    ``after_zip`` (``v``, same store directory, read as ``after_read``), each key once
    in key order; ``None`` when they cannot be told from the newest writes (see the
    module docstring; also for WAL files or a file the readers do not take).
    Neither snapshot is opened as a database: their MANIFESTs say what is needed.
    Table files are read through the storage's cache (their names are unique).

    Raises:
        MissingStateFile, CorruptStateFile: a table file ``after_zip`` names is
            missing or damaged.
    """
    after, live, named = after_read.opened, after_read.live, after_read.named
    if after is None:
        return None
    floor, kept = before
    writes = after.sequence - floor
    if writes < 0:
        return None
    # Newest first: lowest level, then highest file number.
    added = sorted(
        (f for name, f in live.items() if named[name].dfs_path not in kept),
        key=lambda f: (f.level, -f.number),
    )
    store_dir = after_zip.parent
    found: list[SstWrites] = []
    count = 0
    for table in added:
        if count >= writes:
            break
        file = named[table.local_name]
        path = store_dir / file.dfs_path
        try:
            data = path.local_path(immutable=True).read_bytes()
        except FileNotFoundError:
            raise MissingStateFile(f"{path}: named by {after_zip.name}, does not exist") from None
        if len(data) != file.size:
            raise CorruptStateFile(f"{path}: {len(data)} bytes, {after_zip.name} says {file.size}")
        try:
            read = sst_writes_after(data, table.smallest, table.largest, floor)
        except SstFormatError as err:
            log.info("%s: %s; comparing whole snapshots", path, err)
            return None
        found.append(read)
        count += len(read.keys)
    if count != writes:
        return None
    return _newest(found)


def _newest(found: list[SstWrites]) -> list[tuple[bytes, bytes | None]]:
    """Each key once, in key order, with the value of its newest write (its value at ``v``)."""
    if len(found) == 1 and len(set(found[0].keys)) == len(found[0].keys):
        # The usual epoch: one flushed file, each key written once, in key order.
        return list(zip(found[0].keys, found[0].values, strict=True))
    newest: dict[bytes, tuple[int, bytes | None]] = {}
    for read in found:
        for key, sequence, value in zip(read.keys, read.sequences, read.values, strict=True):
            known = newest.get(key)
            if known is None or known[0] < sequence:
                newest[key] = (sequence, value)
    return [(key, newest[key][1]) for key in sorted(newest)]
