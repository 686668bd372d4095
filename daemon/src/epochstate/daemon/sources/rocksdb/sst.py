"""The entries of a RocksDB table file (``.sst``) newer than a sequence number,
read without opening a database.

Used to read a snapshot's newest writes (see :mod:`rocksdb_snapshot_diff`). Every
block read is checked against its checksum (a file whose checksum type this
reader does not compute is refused), and every file against what RocksDB records
for it: the entry count of its properties block, keys in order, the first and last
key equal to the smallest and largest its MANIFEST records. Anything it does not understand raises
:class:`SstFormatError`, and the caller compares whole snapshots instead.

Block-based table layout (facts from RocksDB's format documentation and source): a
footer at the end (format version >= 1: checksum type byte, the metaindex and index
block handles as varints padded to 40 bytes, uint32 format version, 8-byte magic);
each block is followed by a 5-byte trailer: the compression type byte and a
little-endian uint32 checksum of the stored block and that byte (XXH3: the low 32
bits of XXH3-64 of the block, xor the type byte times 0x6B9083D9; xxHash64: the low
32 bits of XXH64 of block and byte; format versions >= 6 mix in the block's
offset and are not taken). A block is a
run of prefix-compressed entries (varint shared, varint non-shared, varint value
length, key delta, value), then uint32 restart offsets and their uint32 count.
LZ4 blocks (format version >= 2) start with the varint decompressed size.
Index entries (format version >= 4, restart interval 1) omit the value length
and hold a block handle (varint offset, varint size). Keys of data blocks are
internal keys: user key, then 8 bytes of ``sequence << 8 | type``. The metaindex block
(general layout, with value lengths) maps ``rocksdb.properties`` to the properties
block's handle; that block maps property names to values, ``rocksdb.num.entries``
a varint.
"""

from __future__ import annotations

import struct
from itertools import compress, repeat
from operator import rshift
from typing import NamedTuple

import lz4.block
import xxhash

from epochstate.core.errors import EpochStateError

_MAGIC = 0x88E241B785F4CFF7
_FOOTER = 53
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_NO_COMPRESSION, _LZ4 = 0x0, 0x4
_XXHASH64, _XXH3 = 0x3, 0x4
_XXH3_LAST_BYTE = 0x6B9083D9
_LOW32 = 0xFFFFFFFF
# LZ4 expands a block at most about 255-fold (a literal run of one byte, repeated).
_LZ4_MAX_RATIO = 255
_DELETIONS = frozenset({0x0, 0x7})
_TYPE_MASK = 0xFF
# Value, deletion, single deletion: the only entry types a store without column
# families writes. A merge or range deletion is refused (the caller falls back).
_POINT_TYPES = frozenset({0x0, 0x1, 0x7})
_PROPERTIES = b"rocksdb.properties"
_NUM_ENTRIES = b"rocksdb.num.entries"


class SstFormatError(EpochStateError):
    """A table file this reader does not understand (or a damaged one)."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise SstFormatError("varint too long")


def _checksum(kind: int, stored: bytes, compression: int) -> int:
    if kind == _XXH3:
        return (xxhash.xxh3_64_intdigest(stored) & _LOW32) ^ ((compression * _XXH3_LAST_BYTE) & _LOW32)
    return xxhash.xxh64_intdigest(stored + bytes((compression,))) & _LOW32


def _block(data: bytes, offset: int, size: int, checksum: int) -> bytes:
    """The contents of the block at ``offset``, its checksum (of type ``checksum``) checked."""
    end = offset + size
    if offset < 0 or end + 5 > len(data):
        raise SstFormatError(f"block [{offset}, {end}) outside the file")
    stored = data[offset:end]
    kind = data[end]
    (expected,) = _U32.unpack_from(data, end + 1)
    if _checksum(checksum, stored, kind) != expected:
        raise SstFormatError(f"block at {offset}: checksum mismatch")
    if kind == _NO_COMPRESSION:
        return stored
    if kind != _LZ4:
        raise SstFormatError(f"block compression type {kind:#x}")
    expected, start = _varint(stored, 0)
    if expected > _LZ4_MAX_RATIO * (len(stored) - start) + _LZ4_MAX_RATIO:
        # More than LZ4 can expand to: a damaged size, which would only allocate.
        raise SstFormatError(f"block at {offset}: {len(stored)} LZ4 bytes cannot hold {expected}")
    try:
        out: bytes = lz4.block.decompress(stored[start:], uncompressed_size=expected)
    except lz4.block.LZ4BlockError as err:
        raise SstFormatError(f"block at {offset} does not decompress: {err}") from err
    return out


def _entries_end(block: bytes) -> tuple[int, int]:
    """(end of the entries, number of restarts) of a block."""
    if len(block) < 4:
        raise SstFormatError("block without restarts")
    (restarts,) = _U32.unpack_from(block, len(block) - 4)
    if restarts >> 31:
        raise SstFormatError("data block hash index")
    end = len(block) - 4 - 4 * restarts
    if restarts < 1 or end < 0:
        raise SstFormatError(f"{restarts} restarts in a block of {len(block)} bytes")
    return end, restarts


class _Footer(NamedTuple):
    checksum: int
    version: int
    metaindex_handle: tuple[int, int]
    index_handle: tuple[int, int]


def _footer(data: bytes) -> _Footer:
    if len(data) < _FOOTER:
        raise SstFormatError("shorter than a footer")
    footer = data[-_FOOTER:]
    (magic,) = _U64.unpack_from(footer, _FOOTER - 8)
    (version,) = _U32.unpack_from(footer, _FOOTER - 12)
    if magic != _MAGIC or not 2 <= version <= 5:
        raise SstFormatError(f"not a block-based table of format version 2 to 5 ({version})")
    checksum = footer[0]
    if checksum not in (_XXHASH64, _XXH3):
        raise SstFormatError(f"checksum type {checksum}")
    metaindex_offset, pos = _varint(footer, 1)
    metaindex_size, pos = _varint(footer, pos)
    index_offset, pos = _varint(footer, pos)
    index_size, pos = _varint(footer, pos)
    return _Footer(checksum, version, (metaindex_offset, metaindex_size), (index_offset, index_size))


def _entries(block: bytes) -> list[tuple[bytes, bytes]]:
    """The (key, value) entries of a block in the general layout (meta blocks)."""
    end, _ = _entries_end(block)
    out: list[tuple[bytes, bytes]] = []
    pos = 0
    key = b""
    while pos < end:
        shared, pos = _varint(block, pos)
        non_shared, pos = _varint(block, pos)
        value_length, pos = _varint(block, pos)
        key = key[:shared] + block[pos : pos + non_shared]
        pos += non_shared
        out.append((key, block[pos : pos + value_length]))
        pos += value_length
    if pos != end:
        raise SstFormatError("a meta block overruns its entries")
    return out


def _num_entries(data: bytes, footer: _Footer) -> int:
    """The entry count the file's properties block records (``rocksdb.num.entries``)."""
    metaindex = dict(_entries(_block(data, *footer.metaindex_handle, footer.checksum)))
    handle = metaindex.get(_PROPERTIES)
    if handle is None:
        raise SstFormatError("no properties block")
    offset, pos = _varint(handle, 0)
    size, _ = _varint(handle, pos)
    properties = dict(_entries(_block(data, offset, size, footer.checksum)))
    count = properties.get(_NUM_ENTRIES)
    if count is None:
        raise SstFormatError("no entry count among the properties")
    return _varint(count, 0)[0]


def _data_handles(data: bytes, footer: _Footer) -> list[tuple[int, int]]:
    """The data blocks' handles of a table file."""
    index = _block(data, *footer.index_handle, footer.checksum)
    end, restarts = _entries_end(index)
    handles: list[tuple[int, int]] = []
    pos = 0
    while pos < end:
        shared, pos = _varint(index, pos)
        non_shared, pos = _varint(index, pos)
        if footer.version < 4:
            _, pos = _varint(index, pos)  # value length
        pos += non_shared
        offset, pos = _varint(index, pos)
        size, pos = _varint(index, pos)
        expected = handles[-1][0] + handles[-1][1] + 5 if handles else 0
        if offset != expected or (shared and footer.version >= 4):
            raise SstFormatError(f"index entry {len(handles)} is not a full handle of the next block")
        handles.append((offset, size))
    if pos != end or len(handles) != restarts:
        raise SstFormatError("index block with delta-encoded handles")
    return handles


class SstWrites(NamedTuple):
    """Entries of a table file, in file order (a key's newer entries first), as
    parallel lists: user key, sequence number, value (``None``: a deletion)."""

    keys: list[bytes]
    sequences: list[int]
    values: list[bytes | None]


def sst_writes_after(data: bytes, smallest: bytes, largest: bytes, sequence: int) -> SstWrites:
    """The entries of a table file (its bytes) whose sequence number is greater than
    ``sequence``, in file order (a key's newer entries first).

    ``smallest`` and ``largest`` are the user keys RocksDB records for the file (in
    its MANIFEST); every entry is read and checked against them and against the
    entry count of the file's properties block.

    Raises:
        SstFormatError: a layout, compression, checksum or entry type this reader
            does not take, a damaged file, or entries that do not match the metadata.
    """
    try:
        footer = _footer(data)
        num_entries = _num_entries(data, footer)
        count, first, last, writes = _scan(data, footer, sequence)
    except (IndexError, struct.error) as err:
        raise SstFormatError(f"truncated structure: {err}") from err
    if count != num_entries or first != smallest or last != largest:
        raise SstFormatError(
            f"{count} entries from {first!r} to {last!r} read, the file records {num_entries}"
        )
    return writes


def _scan(data: bytes, footer: _Footer, sequence: int) -> tuple[int, bytes, bytes, SstWrites]:
    """(entries, first and last user key, entries written after ``sequence``).

    The entries are cut out one by one (prefix compression leaves no other way);
    everything else is done on whole lists, which costs a fraction per entry.
    """
    keys: list[bytes] = []
    values: list[bytes] = []
    add_key, add_value = keys.append, values.append
    checksum = footer.checksum
    for offset, size in _data_handles(data, footer):
        block = _block(data, offset, size, checksum)
        end, _ = _entries_end(block)
        pos = 0
        key = b""
        while pos < end:
            shared = block[pos]
            non_shared = block[pos + 1]
            value_length = block[pos + 2]
            if shared | non_shared | value_length < 0x80:
                pos += 3
            else:
                shared, pos = _varint(block, pos)
                non_shared, pos = _varint(block, pos)
                value_length, pos = _varint(block, pos)
            key = key[:shared] + block[pos : pos + non_shared]
            pos += non_shared
            add_key(key)
            add_value(block[pos : pos + value_length])
            pos += value_length
        if pos != end:
            raise SstFormatError(f"block at {offset} overruns its entries")
    if not keys:
        raise SstFormatError("no entries")
    users = [k[:-8] for k in keys]
    if sorted(users) != users:
        raise SstFormatError("keys out of order")
    # An entry's trailer is ``sequence << 8 | type``, little-endian.
    # A key shorter than its trailer leaves the joined trailers short: struct.error.
    trailers = list(struct.unpack(f"<{len(keys)}Q", b"".join([k[-8:] for k in keys])))
    kinds = set(map(_TYPE_MASK.__and__, trailers))
    if not kinds <= _POINT_TYPES:
        raise SstFormatError(f"entry types {sorted(kinds - _POINT_TYPES)}")
    floor = (sequence + 1) << 8
    if min(trailers) < floor:  # older entries too (a compaction's output): keep the newer
        newer = list(compress(range(len(keys)), map(floor.__le__, trailers)))
        users = [users[i] for i in newer]
        values = [values[i] for i in newer]
        trailers = [trailers[i] for i in newer]
    found: list[bytes | None] = list(values)
    if kinds & _DELETIONS:
        found = [None if t & _TYPE_MASK in _DELETIONS else v for t, v in zip(trailers, values, strict=True)]
    sequences = list(map(rshift, trailers, repeat(8)))
    return len(keys), keys[0][:-8], keys[-1][:-8], SstWrites(users, sequences, found)
