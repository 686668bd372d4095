"""A RocksDB snapshot's live table files and last sequence number, read from its
MANIFEST instead of opening the database.

Used by :mod:`rocksdb_snapshot_diff`, which needs only these facts of each snapshot
and would otherwise pay a database open (extract, link, open, close) per epoch. The
reader takes the subset of the format a snapshot of Spark's state store uses: one
column family (the default), no blob files, no extra data paths, an empty WAL. Any
record it does not understand raises :class:`ManifestFormatError`, and the caller
opens the database instead. Integrity comes from the zip entry's CRC-32, which
``zipfile`` checks on read; record checksums are not recomputed.

Format (facts from RocksDB's ``db/log_format.h`` and ``db/version_edit.h``): the
MANIFEST is a log of 32 KiB blocks; a record is a 7-byte header (uint32 masked
CRC32C, uint16 little-endian length, type byte: 1 full, 2 first, 3 middle, 4 last
fragment) and its payload, and a block's tail shorter than a header is zero
padding. Each record is a version edit: tagged fields, tag a varint. The fields
read here: 4 last sequence (varint), 6 deleted file (varint level, varint number),
103 new file (varint level, number, size, length-prefixed smallest and largest
internal keys, smallest and largest sequence, then custom fields, each a varint
tag and a length-prefixed value, ended by tag 1; a custom tag with bit 6 set may
not be ignored), 200 column family (varint id). Skipped: 2, 3, 9, 10
(file numbers), 5 compaction cursor, 201 column family add, 203 max column family,
and tags with bit 13 set (length-prefixed, safe to ignore) except 8196 and 8197
(legacy WAL records, not length-prefixed). The comparator (1) must be the bytewise
one and 8201 (user-defined timestamps persisted) must say 1; 300 (atomic group) is refused. A file
added while already live is refused, as RocksDB refuses it.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

from epochstate.core.errors import EpochStateError
from epochstate.core.storage.location import Location
from epochstate.daemon.sources.errors import CorruptStateFile
from epochstate.daemon.sources.rocksdb.snapshot import (
    METADATA,
    SnapshotMetadata,
    metadata_from_bytes,
)
from epochstate.daemon.sources.rocksdb.snapshot_zip import open_snapshot_zip, zip_errors

_BLOCK = 32 * 1024
_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_HEADER_FIELDS = struct.Struct("<IHB")

_LAST_SEQUENCE, _DELETED_FILE, _NEW_FILE4, _COLUMN_FAMILY = 4, 6, 103, 200
_SKIP_VARINT = frozenset({2, 3, 9, 10, 203})
_SKIP_SLICE = frozenset({201})
_COMPARATOR = 1
_BYTEWISE = b"leveldb.BytewiseComparator"
# Bit-13 tags whose bodies are not length-prefixed (legacy WAL addition and
# deletion), and user-defined timestamps (keys would not be plain bytewise).
_NOT_IGNORABLE = frozenset({8196, 8197})
_PERSIST_TIMESTAMPS = 8201
_COMPACT_CURSOR = 5
_SAFE_IGNORE = 1 << 13
_CUSTOM_TERMINATE = 1
_CUSTOM_MUST_UNDERSTAND = 1 << 6
_SEQUENCE_TRAILER = 8


class ManifestFormatError(EpochStateError):
    """A MANIFEST (or snapshot) this reader does not take; the caller opens the database."""


@dataclass(frozen=True, slots=True)
class LiveFile:
    """A table file of the snapshot's current version."""

    number: int
    level: int
    size: int
    smallest: bytes  # user key
    largest: bytes  # user key
    largest_sequence: int = 0

    @property
    def local_name(self) -> str:
        """The name the snapshot's ``metadata`` gives the file (``000045.sst``)."""
        return f"{self.number:06d}.sst"


@dataclass(frozen=True, slots=True)
class Manifest:
    """What the MANIFEST says of the current version: its live table files by
    number and the sequence number of its last write."""

    last_sequence: int
    files: dict[int, LiveFile]


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def varint(self) -> int:
        result = shift = 0
        buf = self.buf
        while True:
            if self.pos >= len(buf):
                raise ManifestFormatError("a varint runs past its record")
            byte = buf[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result
            shift += 7
            if shift > 63:
                raise ManifestFormatError("varint too long")

    def slice(self) -> bytes:
        length = self.varint()
        end = self.pos + length
        if end > len(self.buf):
            raise ManifestFormatError("a field runs past its record")
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def done(self) -> bool:
        return self.pos >= len(self.buf)


def _records(data: bytes) -> list[bytes]:
    """The payloads of the log's records, fragments joined."""
    records: list[bytes] = []
    pending: list[bytes] | None = None
    pos = 0
    while pos < len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:
            pos += left  # block trailer
            continue
        if pos + _HEADER > len(data):
            raise ManifestFormatError("a record header runs past the end")
        _, length, kind = _HEADER_FIELDS.unpack_from(data, pos)
        if kind == 0 and length == 0:
            pos += left  # preallocated zeros to the block's end
            continue
        start = pos + _HEADER
        end = start + length
        if end > len(data) or length > left - _HEADER:
            raise ManifestFormatError(f"record at {pos} runs past its block")
        payload = data[start:end]
        pos = end
        if kind == _FULL and pending is None:
            records.append(payload)
        elif kind == _FIRST and pending is None:
            pending = [payload]
        elif kind == _MIDDLE and pending is not None:
            pending.append(payload)
        elif kind == _LAST and pending is not None:
            pending.append(payload)
            records.append(b"".join(pending))
            pending = None
        else:
            raise ManifestFormatError(f"record type {kind} at {pos - length - _HEADER}")
    if pending is not None:
        raise ManifestFormatError("the last record is cut short")
    return records


def _user_key(internal: bytes) -> bytes:
    if len(internal) < _SEQUENCE_TRAILER:
        raise ManifestFormatError("an internal key shorter than its trailer")
    return internal[:-_SEQUENCE_TRAILER]


def _new_file(reader: _Reader) -> LiveFile:
    level = reader.varint()
    number = reader.varint()
    size = reader.varint()
    smallest = _user_key(reader.slice())
    largest = _user_key(reader.slice())
    reader.varint()  # smallest sequence
    largest_sequence = reader.varint()
    while True:
        tag = reader.varint()
        if tag == _CUSTOM_TERMINATE:
            break
        if tag & _CUSTOM_MUST_UNDERSTAND:
            raise ManifestFormatError(f"new-file field {tag} (e.g. another data path)")
        reader.slice()
    return LiveFile(number, level, size, smallest, largest, largest_sequence)


def parse_manifest(data: bytes) -> Manifest:
    """The current version a MANIFEST describes.

    Raises:
        ManifestFormatError: a record or field outside the subset this reader takes,
            or a damaged log.
    """
    files: dict[int, LiveFile] = {}
    last_sequence: int | None = None
    for record in _records(data):
        reader = _Reader(record)
        while not reader.done():
            tag = reader.varint()
            if tag == _NEW_FILE4:
                added = _new_file(reader)
                if added.number in files:
                    raise ManifestFormatError(f"file {added.number} added while live")
                files[added.number] = added
            elif tag == _DELETED_FILE:
                level = reader.varint()
                gone = files.pop(reader.varint(), None)
                if gone is None or gone.level != level:
                    raise ManifestFormatError("a deleted file that is not live at its level")
            elif tag == _LAST_SEQUENCE:
                last_sequence = reader.varint()
            elif tag == _COLUMN_FAMILY:
                if reader.varint() != 0:
                    raise ManifestFormatError("an edit of a column family other than the default")
            elif tag in _SKIP_VARINT:
                reader.varint()
            elif tag == _PERSIST_TIMESTAMPS:
                if reader.slice() != b"\x01":
                    raise ManifestFormatError("user-defined timestamps not persisted in keys")
            elif tag == _COMPARATOR:
                if reader.slice() != _BYTEWISE:
                    raise ManifestFormatError("a comparator other than the bytewise one")
            elif tag in _SKIP_SLICE or (tag & _SAFE_IGNORE and tag not in _NOT_IGNORABLE):
                reader.slice()
            elif tag == _COMPACT_CURSOR:
                reader.varint()
                reader.slice()
            else:
                raise ManifestFormatError(f"version edit field {tag}")
    if last_sequence is None:
        raise ManifestFormatError("no last sequence number")
    return Manifest(last_sequence, files)


def read_snapshot_manifest(
    zip_path: Location, content: bytes | None = None
) -> tuple[SnapshotMetadata, Manifest]:
    """A snapshot's ``metadata`` and the version its MANIFEST describes, read from
    the zip in memory (nothing extracted, no database opened); ``content``: the zip's
    bytes, when already read.

    Raises:
        ManifestFormatError: a MANIFEST or WAL this reader does not take.
        MissingStateFile, CorruptStateFile: no such zip, or a damaged one.
    """
    # One whole read: the zip is small (table files live beside it), and on an object
    # store one request beats a ranged read of the directory and then the entries.
    with zip_errors(zip_path):
        data = zip_path.read_bytes() if content is None else content
    with open_snapshot_zip(zip_path, io.BytesIO(data)) as archive:
        entries = {info.filename: info for info in archive.infolist()}
        if METADATA not in entries or "CURRENT" not in entries:
            raise CorruptStateFile(f"{zip_path}: no {METADATA} or CURRENT entry")
        if any(name.endswith(".log") and info.file_size for name, info in entries.items()):
            raise ManifestFormatError(f"{zip_path}: a WAL with writes not in any table file")
        raw_metadata = archive.read(METADATA)  # each read checks the entry's CRC-32
        current = archive.read("CURRENT").decode("ascii", "replace").strip()
        if not current.startswith("MANIFEST-") or current not in entries:
            raise CorruptStateFile(f"{zip_path}: CURRENT names {current[:40]!r}, not in the zip")
        manifest = archive.read(current)
    metadata = metadata_from_bytes(raw_metadata, zip_path)
    try:
        return metadata, parse_manifest(manifest)
    except ManifestFormatError as err:
        raise ManifestFormatError(f"{zip_path}:{current}: {err}") from err
