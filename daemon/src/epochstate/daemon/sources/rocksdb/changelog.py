"""Records of a decompressed RocksDB state store changelog (``<version>.changelog``).

With ``spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled`` on,
Spark's RocksDB provider writes every store version's puts and removals to a
changelog, compressed like HDFS-backed state files (see :mod:`lz4stream`). The
decompressed content is a ``java.io.DataOutputStream`` sequence, big-endian, in
one of four framings:

=======  =================================================  ==========================
version  header                                             records
=======  =================================================  ==========================
1        none                                               untyped (see :mod:`statefile`)
2        ``writeUTF("v2")``                                 typed
3        ``writeUTF("v3")``, ``writeUTF(lineage JSON)``     untyped
4        ``writeUTF("v4")``, ``writeUTF(lineage JSON)``     typed
=======  =================================================  ==========================

``writeUTF`` is a uint16 byte length and modified UTF-8. *Untyped* records are
exactly those of HDFS-backed delta files. A *typed* record starts with a type
byte: ``0x01`` put (int32 keySize, key, int32 valueSize, value), ``0x10`` delete
(int32 keySize, key, int32 -1), ``0x11`` merge (laid out like a put; appends to a
list value), and ``0x00`` ends the file. Spark writes typed records when the
store uses column families (transformWithState), and a lineage when state
checkpoint format version 2 gives every version a unique id; the lineage lists
``{"version", "checkpointUniqueId"}`` from the newest snapshot up to the
changelog's version minus one.

Version 1 has no header: its first two bytes are the high half of the first key
size (or of the end marker), which reads as the UTF string ``v<digits>`` only
for a first key of 161,328 bytes or more (Spark's own reader shares this limit).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from epochstate.core import jsontext
from epochstate.daemon.sources.errors import CorruptStateFile, UnsupportedCheckpoint
from epochstate.daemon.sources.rows.statefile import StateRecord, iter_records

_UTF_LENGTH = struct.Struct(">H")
_INT = struct.Struct(">i")
_EOF, _PUT, _DELETE, _MERGE = 0x00, 0x01, 0x10, 0x11
_TYPED = frozenset({2, 4})
_WITH_LINEAGE = frozenset({3, 4})


PUT, DELETE, MERGE = "put", "delete", "merge"


class ChangelogRecord(NamedTuple):
    """One record: ``op`` is :data:`PUT` (``value`` replaces the key's), :data:`DELETE`
    (``value`` is ``None``) or :data:`MERGE` (``value`` is appended to the key's
    value, after a ``,`` if it has one: RocksDB's string-append merge, which list
    state uses)."""

    op: str
    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class LineageItem:
    """A store version and the unique id its files carry (checkpoint format 2)."""

    version: int
    unique_id: str


@dataclass(frozen=True, slots=True)
class ChangelogHeader:
    """The framing of a changelog: ``version`` 1 to 4 (see the module docstring), the
    lineage (empty unless 3 or 4), and where the records start."""

    version: int
    lineage: tuple[LineageItem, ...]
    records_offset: int

    @property
    def typed(self) -> bool:
        """Whether records carry a type byte (versions 2 and 4)."""
        return self.version in _TYPED


def _read_utf(content: bytes, pos: int, source: str) -> tuple[str, int]:
    if pos + 2 > len(content):
        raise CorruptStateFile(f"{source}: offset {pos}: truncated header")
    (size,) = _UTF_LENGTH.unpack_from(content, pos)
    end = pos + 2 + size
    if end > len(content):
        raise CorruptStateFile(f"{source}: offset {pos}: truncated header")
    try:
        # Modified UTF-8 differs from UTF-8 only for NUL and supplementary characters,
        # neither of which occurs in a version tag or in lineage JSON.
        return content[pos + 2 : end].decode("utf-8"), end
    except UnicodeDecodeError as err:
        raise CorruptStateFile(f"{source}: offset {pos}: header is not UTF-8: {err}") from err


def _version_tag(content: bytes) -> int | None:
    """The version a ``writeUTF("v<n>")`` at the start names, ``None`` for version 1."""
    if len(content) < 4:
        return None
    (size,) = _UTF_LENGTH.unpack_from(content, 0)
    tag = content[2 : 2 + size]
    if size < 2 or len(tag) != size or tag[:1] != b"v" or not tag[1:].isdigit():
        return None
    return int(tag[1:])


def read_header(content: bytes, source: str = "<bytes>") -> ChangelogHeader:
    """The framing of a decompressed changelog.

    Raises:
        UnsupportedCheckpoint: a version tag other than v2, v3 or v4.
        CorruptStateFile: a truncated header or malformed lineage.
    """
    version = _version_tag(content)
    if version is None:
        return ChangelogHeader(1, (), 0)
    if version not in (2, 3, 4):
        raise UnsupportedCheckpoint(f"{source}: changelog version v{version}")
    pos = 2 + _UTF_LENGTH.unpack_from(content, 0)[0]
    lineage: tuple[LineageItem, ...] = ()
    if version in _WITH_LINEAGE:
        text, pos = _read_utf(content, pos, source)
        try:
            lineage = tuple(
                LineageItem(int(item["version"]), str(item["checkpointUniqueId"]))
                for item in jsontext.loads(text)
            )
        except (ValueError, KeyError, TypeError) as err:
            raise CorruptStateFile(f"{source}: malformed lineage {text[:200]!r}: {err!r}") from err
    return ChangelogHeader(version, lineage, pos)


def _iter_typed(content: bytes, pos: int, source: str) -> Iterator[ChangelogRecord]:
    unpack = _INT.unpack_from
    total = len(content)
    while True:
        if pos >= total:
            raise CorruptStateFile(f"{source}: offset {pos}: ends without the end record")
        kind = content[pos]
        if kind == _EOF:
            if pos + 1 != total:
                raise CorruptStateFile(
                    f"{source}: offset {pos}: {total - pos - 1} bytes after the end record"
                )
            return
        if kind not in (_PUT, _DELETE, _MERGE):
            raise CorruptStateFile(f"{source}: offset {pos}: unknown record type {kind:#04x}")
        if pos + 5 > total:
            raise CorruptStateFile(f"{source}: offset {pos}: truncated record")
        (key_size,) = unpack(content, pos + 1)
        key_end = pos + 5 + key_size
        if key_size < 0 or key_end + 4 > total:
            raise CorruptStateFile(f"{source}: offset {pos}: bad key size {key_size}")
        key = content[pos + 5 : key_end]
        (value_size,) = unpack(content, key_end)
        if kind == _DELETE:
            if value_size != -1:
                raise CorruptStateFile(f"{source}: offset {pos}: delete record with value size {value_size}")
            yield ChangelogRecord(DELETE, key, None)
            pos = key_end + 4
            continue
        value_end = key_end + 4 + value_size
        if value_size < 0 or value_end > total:
            raise CorruptStateFile(f"{source}: offset {pos}: bad value size {value_size}")
        yield ChangelogRecord(MERGE if kind == _MERGE else PUT, key, content[key_end + 4 : value_end])
        pos = value_end


def _without_merges(records: Iterator[ChangelogRecord], source: str) -> Iterator[StateRecord]:
    for record in records:
        if record.op == MERGE:
            raise UnsupportedCheckpoint(f"{source}: merge record (list state)")
        yield record.key, record.value


def iter_changelog_ops(
    content: bytes, source: str = "<bytes>"
) -> tuple[ChangelogHeader, Iterator[ChangelogRecord]]:
    """The header and the records of a decompressed changelog of any version, merges
    included, in file order. Untyped versions yield only puts and deletes.

    Raises (the header at once, records while iterating):
        UnsupportedCheckpoint: an unknown version.
        CorruptStateFile: anything malformed, with ``source`` and a byte offset.
    """
    header = read_header(content, source)
    if header.typed:
        return header, _iter_typed(content, header.records_offset, source)
    if header.records_offset == 0:
        untyped = iter_records(content, source)
    else:
        untyped = iter_records(
            content[header.records_offset :], f"{source} (records from byte {header.records_offset})"
        )
    return header, (ChangelogRecord(PUT if v is not None else DELETE, k, v) for k, v in untyped)


def iter_changelog(content: bytes, source: str = "<bytes>") -> tuple[ChangelogHeader, Iterator[StateRecord]]:
    """The header and the records of a decompressed changelog, in file order
    (a key may occur several times; the last record wins).

    Raises (the header at once, records while iterating):
        UnsupportedCheckpoint: an unknown version, or a merge record.
        CorruptStateFile: anything malformed, with ``source`` and a byte offset.
    """
    header = read_header(content, source)
    if header.typed:
        return header, _without_merges(_iter_typed(content, header.records_offset, source), source)
    if header.records_offset == 0:
        return header, iter_records(content, source)
    where = f"{source} (records from byte {header.records_offset})"
    return header, iter_records(content[header.records_offset :], where)
