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
from epochstate.daemon.sources.rocksdb.sst import SstFormatError, SstWrites, sst_writes_after

log = logging.getLogger(__name__)


class Opened(NamedTuple):
    """What the diff needs of a snapshot it opened: its last sequence number and
    the table files it names (``dfs_path``); one without column families or WAL files."""

    sequence: int
    files: frozenset[str]


class SequenceCache:
    """Snapshots already opened (:class:`Opened`), so the next version's changes need
    not open or even read this one again. Keyed by the zip's path, size and mtime: a
    batch that re-runs rewrites its zip."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, int, str], Opened] = {}

    @staticmethod
    def _key(zip_path: Location) -> tuple[str, int, str]:
        stat = zip_path.stat()
        return str(zip_path), stat.st_size, stat.tag

    def take(self, zip_path: Location) -> Opened | None:
        """What was recorded for ``zip_path``, forgotten (each is asked for once)."""
        try:
            return self._known.pop(self._key(zip_path), None)
        except FileNotFoundError:
            return None

    def record(self, zip_path: Location, opened: Opened) -> None:
        if len(self._known) > 4096:  # a store that is no longer followed in order
            self._known.clear()
        self._known[self._key(zip_path)] = opened


def _opened(zip_path: Location) -> tuple[Opened, dict[str, LiveFile], dict[str, SnapshotFile]] | None:
    """A snapshot's last sequence number, live table files (by local name) and the
    files its metadata names (by local name); ``None`` for a snapshot the diff does
    not take (column families, WAL files, a MANIFEST the reader does not take)."""
    try:
        metadata, manifest = read_snapshot_manifest(zip_path)
    except ManifestFormatError as err:
        log.info("%s; comparing whole snapshots", err)
        return None
    if metadata.column_families:
        raise UnsupportedCheckpoint(f"{zip_path}: a store with column families")
    if any(f.dfs_path.startswith(LOG_DIR + "/") for f in metadata.files):
        return None
    named = {f.local_name: f for f in metadata.files}
    live = {f.local_name: f for f in manifest.files.values()}
    if named.keys() != live.keys():
        log.info(
            "%s: its metadata and MANIFEST name different table files; comparing whole snapshots", zip_path
        )
        return None
    opened = Opened(manifest.last_sequence, frozenset(f.dfs_path for f in metadata.files))
    return opened, live, named


def newest_writes_changes(
    before_zip: Location, after_zip: Location, sequences: SequenceCache | None = None
) -> list[tuple[bytes, bytes | None]] | None:
    """The raw changes from the snapshot ``before_zip`` (version ``v - 1``) to
    ``after_zip`` (``v``, same store directory), each key once in key order; ``None``
    when they cannot be told from the newest writes (see the module docstring; also
    for WAL files, column families or a file the readers do not take).
    ``sequences`` spares reading ``before_zip`` when it was ``after_zip`` of the
    previous call. Neither snapshot is opened as a database: their MANIFESTs say
    what is needed.

    Raises:
        MissingStateFile, CorruptStateFile: a zip or a table file it names is missing
            or damaged.
    """
    before = sequences.take(before_zip) if sequences is not None else None
    if before is None:
        found_before = _opened(before_zip)
        if found_before is None:
            return None
        before = found_before[0]
    found_after = _opened(after_zip)
    if found_after is None:
        return None
    after, live, named = found_after
    if sequences is not None:
        sequences.record(after_zip, after)
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
            data = path.read_bytes()
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
