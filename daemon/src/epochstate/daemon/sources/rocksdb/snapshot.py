"""Snapshots of Spark's RocksDB state store: ``<version>.zip`` and the table files it names.

A store directory (one partition of one store) holds, per snapshot version::

    <version>.zip             a RocksDB checkpoint without its table files: CURRENT,
                              MANIFEST-<n>, OPTIONS-<n>, the (empty) WAL <n>.log, and
                              ``metadata``
    SSTs/<n>-<uuid>.sst       table files, shared by every zip that names them
    logs/<n>-<uuid>.log       archived WAL files, for the rare checkpoint that has any

``metadata`` is the line ``v1`` and a JSON object: ``sstFiles`` and ``logFiles``
(each ``{"localFileName", "dfsSstFileName" | "dfsLogFileName", "sizeBytes"}``,
``logFiles`` left out when empty), ``numKeys``, and for stores with column families
``columnFamilyMapping`` (name -> id), empty otherwise.

To read a snapshot: extract the zip into a scratch directory, link every named file
there under its local name (the MANIFEST refers to them by number), open the
database read-only and iterate its default column family.

Table files may hold list state's merge operands unresolved; RocksDB resolves them
on read with the merge operator the ``OPTIONS`` file names. That file says only
``StringAppendOperator``, which RocksDB builds with its default delimiter ``,``,
while Spark's merge operator version 2 joins with nothing; so the extracted
``OPTIONS`` file is given the store's delimiter before the database is opened.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from rocksdict import AccessType, Options, Rdict

from epochstate.core import jsontext
from epochstate.core.storage.location import Location
from epochstate.daemon.sources.errors import CorruptStateFile, MissingStateFile, UnsupportedCheckpoint
from epochstate.daemon.sources.rocksdb.snapshot_zip import open_snapshot_zip, plain_entry_name

METADATA = "metadata"
_MERGE_OPERATOR = re.compile(r"^(\s*merge_operator=)StringAppendOperator\s*$", re.MULTILINE)
SST_DIR = "SSTs"
LOG_DIR = "logs"


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    """A file a snapshot needs beside its zip: ``dfs_name`` in the store directory's
    ``SSTs/`` or ``logs/``, to be placed as ``local_name``."""

    local_name: str
    dfs_path: str
    size: int


@dataclass(frozen=True, slots=True)
class SnapshotMetadata:
    """What a snapshot's ``metadata`` file records."""

    files: tuple[SnapshotFile, ...]
    num_keys: int
    column_families: dict[str, int]


def parse_snapshot_metadata(text: str, source: str = "<text>") -> SnapshotMetadata:
    """Parse a snapshot's ``metadata`` file.

    Raises:
        UnsupportedCheckpoint: a format version other than ``v1``.
        CorruptStateFile: malformed JSON, fields or file names.
    """
    version, _, body = text.partition("\n")
    if version != "v1":
        raise UnsupportedCheckpoint(f"{source}: snapshot metadata version {version[:20]!r}")
    try:
        obj = jsontext.loads(body)
        files = [
            SnapshotFile(
                plain_entry_name(f["localFileName"], source),
                f"{directory}/{plain_entry_name(f[dfs_key], source)}",
                int(f["sizeBytes"]),
            )
            for key, dfs_key, directory in (
                ("sstFiles", "dfsSstFileName", SST_DIR),
                ("logFiles", "dfsLogFileName", LOG_DIR),
            )
            for f in obj.get(key, ())
        ]
        families = {str(k): int(v) for k, v in (obj.get("columnFamilyMapping") or {}).items()}
        num_keys = int(obj.get("numKeys", -1))
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise CorruptStateFile(f"{source}: bad snapshot metadata: {err!r}") from err
    return SnapshotMetadata(tuple(files), num_keys, families)


@dataclass(frozen=True, slots=True)
class TableFile:
    """What RocksDB records for a table file of an open snapshot."""

    level: int
    num_entries: int
    smallest: bytes
    largest: bytes


def read_snapshot_metadata(zip_path: Location) -> SnapshotMetadata:
    """The ``metadata`` of a snapshot, without extracting the rest.

    Raises:
        MissingStateFile: no such zip.
        UnsupportedCheckpoint, CorruptStateFile: as for :func:`parse_snapshot_metadata`,
            or a zip that cannot be read.
    """
    with open_snapshot_zip(zip_path) as archive:
        try:
            raw = archive.read(METADATA)  # checks the entry's CRC-32
        except KeyError:
            raise CorruptStateFile(f"{zip_path}: no {METADATA} entry") from None
    return metadata_from_bytes(raw, zip_path)


def metadata_from_bytes(raw: bytes, zip_path: Location) -> SnapshotMetadata:
    """The parsed ``metadata`` entry of ``zip_path``.

    Raises:
        UnsupportedCheckpoint, CorruptStateFile: as for :func:`parse_snapshot_metadata`,
            or bytes that are not UTF-8.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorruptStateFile(f"{zip_path}: metadata is not UTF-8") from err
    return parse_snapshot_metadata(text, f"{zip_path}:{METADATA}")


class SnapshotReader:
    """One snapshot opened read-only, as a context manager::

        with SnapshotReader(store_dir / "7.zip") as snapshot:
            for key, value in snapshot.items(): ...

    Nothing in the store directory is written or moved; the extracted files live
    in a scratch directory that ``__exit__`` removes.
    """

    def __init__(
        self,
        zip_path: Location,
        scratch_root: Path | None = None,
        merge_delimiter: bytes = b",",
        content: bytes | None = None,
    ) -> None:
        """``merge_delimiter``: what list merges are joined with (see the module
        docstring); ``content``: the zip's bytes, when already read."""
        self.zip_path = zip_path
        self._content = content
        self._merge_delimiter = merge_delimiter
        self._scratch_root = scratch_root
        self._scratch: str | None = None
        self._db: Rdict | None = None
        self.metadata = SnapshotMetadata((), 0, {})

    def __enter__(self) -> SnapshotReader:
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _extract(self, directory: str) -> str:
        content = None if self._content is None else io.BytesIO(self._content)
        with open_snapshot_zip(self.zip_path, content) as archive:
            if METADATA not in archive.namelist():
                raise CorruptStateFile(f"{self.zip_path}: no {METADATA} entry")
            # Reading every entry checks its CRC-32.
            archive.extractall(directory)
        metadata = Path(directory, METADATA)
        try:
            text = metadata.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise CorruptStateFile(f"{self.zip_path}: metadata is not UTF-8") from err
        metadata.unlink()
        return text

    def _open(self) -> None:
        self._scratch = tempfile.mkdtemp(prefix="rocksdb-snapshot-", dir=self._scratch_root)
        text = self._extract(self._scratch)
        self.metadata = parse_snapshot_metadata(text, f"{self.zip_path}:{METADATA}")
        store_dir = self.zip_path.parent
        for f in self.metadata.files:
            target = store_dir / f.dfs_path
            try:
                # Names with a unique id: never rewritten, so a cached copy is used as is.
                local = target.local_path(immutable=True)
                size = local.stat().st_size
            except FileNotFoundError:
                raise MissingStateFile(f"{target}: named by {self.zip_path.name}, does not exist") from None
            if size != f.size:
                raise CorruptStateFile(f"{target}: {size} bytes, {self.zip_path.name} says {f.size}")
            # Table files are immutable and only read: a link spares copying them.
            os.symlink(local.resolve(), os.path.join(self._scratch, f.local_name))
        self._set_merge_delimiter(self._scratch)
        options = Options(raw_mode=True)
        options.set_paranoid_checks(True)
        try:
            self._db = Rdict(self._scratch, options, access_type=AccessType.read_only())
        except Exception as err:  # rocksdict raises plain Exception with RocksDB's status
            for f in self.metadata.files:
                if not (store_dir / f.dfs_path).is_file():
                    # Purged by Spark's maintenance while we were opening it.
                    raise MissingStateFile(f"{store_dir / f.dfs_path}: removed while reading") from err
            raise CorruptStateFile(f"{self.zip_path}: RocksDB cannot open the snapshot: {err}") from err

    def _set_merge_delimiter(self, directory: str) -> None:
        delimiter = self._merge_delimiter.decode("ascii")
        for name in os.listdir(directory):
            if not name.startswith("OPTIONS-"):
                continue
            path = Path(directory, name)
            text = path.read_text(encoding="utf-8", errors="surrogateescape")
            replaced = _MERGE_OPERATOR.sub(
                lambda m: f"{m.group(1)}{{id=StringAppendOperator;delimiter={delimiter}}}", text
            )
            if replaced != text:
                path.write_text(replaced, encoding="utf-8", errors="surrogateescape")

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every key and value of the default column family, in key order (raw bytes).

        Raises:
            CorruptStateFile: RocksDB reports an error (e.g. a block checksum
                mismatch) while iterating.
        """
        if self._db is None:
            raise RuntimeError("snapshot is not open")
        # rocksdict's items() ends silently on a read error; a bare iterator's
        # status() reports it.
        it = self._db.iter()
        it.seek_to_first()
        valid, key, value, step = it.valid, it.key, it.value, it.next
        while valid():
            yield key(), value()
            step()
        try:
            it.status()
        except Exception as err:
            raise CorruptStateFile(f"{self.zip_path}: RocksDB read error: {err}") from err

    def table_files(self) -> dict[str, TableFile]:
        """The table files the database has open, by local name, as RocksDB records them."""
        if self._db is None:
            raise RuntimeError("snapshot is not open")
        return {
            str(f["name"]).lstrip("/"): TableFile(
                int(f["level"]), int(f["num_entries"]), bytes(f["start_key"]), bytes(f["end_key"])
            )
            for f in self._db.live_files()
        }

    def extracted(self, name: str) -> Path:
        """A file of the opened snapshot by its local name: one extracted from the zip
        (``CURRENT``, ``MANIFEST-<n>``) or a table file (a local copy)."""
        if self._scratch is None:
            raise RuntimeError("snapshot is not open")
        return Path(self._scratch, name)

    def latest_sequence(self) -> int:
        """The sequence number of the snapshot's last write."""
        if self._db is None:
            raise RuntimeError("snapshot is not open")
        return int(self._db.latest_sequence_number())

    def close(self) -> None:
        """Close the database and remove the scratch directory (idempotent)."""
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
