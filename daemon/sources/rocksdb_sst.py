"""The user keys (and sequence numbers) of a RocksDB table file (``.sst``), read
without opening a database.

Used to learn which keys a snapshot's newest writes touched (see
:mod:`rocksdb_snapshot_diff`); values are never taken from here, only from the
database itself. So this reader only has to be right about *which keys* a file
holds, and it checks that on every file: the entry count must equal the one
RocksDB records for the file, keys must come in order, and the first and last
must be the file's smallest and largest keys. Anything it does not understand
raises :class:`SstFormatError`, and the caller compares whole snapshots instead.

Block-based table layout (facts from RocksDB's format documentation): a footer at
the end (format version >= 1: checksum type byte, the metaindex and index block
handles as varints padded to 40 bytes, uint32 format version, 8-byte magic); each
block is followed by a 5-byte trailer (compression type, checksum). A block is a
run of prefix-compressed entries (varint shared, varint non-shared, varint value
length, key delta, value), then uint32 restart offsets and their uint32 count.
LZ4 blocks (format version >= 2) start with the varint decompressed size.
Index entries (format version >= 4, restart interval 1) omit the value length
and hold a block handle (varint offset, varint size). Keys of data blocks are
internal keys: user key, then 8 bytes of ``sequence << 8 | type``.
"""

from __future__ import annotations

import struct

import lz4.block

from epochstate.daemon.errors import EpochStateError

_MAGIC = 0x88E241B785F4CFF7
_FOOTER = 53
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_NO_COMPRESSION, _LZ4 = 0x0, 0x4
# Value, deletion, single deletion: the only entry types a store without column
# families writes. A merge or range deletion is refused (the caller falls back).
_POINT_TYPES = frozenset({0x0, 0x1, 0x7})


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


def _block(data: bytes, offset: int, size: int) -> bytes:
    end = offset + size
    if offset < 0 or end + 5 > len(data):
        raise SstFormatError(f"block [{offset}, {end}) outside the file")
    kind = data[end]
    if kind == _NO_COMPRESSION:
        return data[offset:end]
    if kind != _LZ4:
        raise SstFormatError(f"block compression type {kind:#x}")
    expected, start = _varint(data, offset)
    try:
        out: bytes = lz4.block.decompress(data[start:end], uncompressed_size=expected)
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


def _data_handles(data: bytes) -> list[tuple[int, int]]:
    if len(data) < _FOOTER:
        raise SstFormatError("shorter than a footer")
    footer = data[-_FOOTER:]
    (magic,) = _U64.unpack_from(footer, _FOOTER - 8)
    (version,) = _U32.unpack_from(footer, _FOOTER - 12)
    if magic != _MAGIC or not 2 <= version <= 5:
        raise SstFormatError(f"not a block-based table of format version 2 to 5 ({version})")
    pos = 1
    _, pos = _varint(footer, pos)  # metaindex offset
    _, pos = _varint(footer, pos)  # metaindex size
    index_offset, pos = _varint(footer, pos)
    index_size, pos = _varint(footer, pos)
    index = _block(data, index_offset, index_size)
    end, restarts = _entries_end(index)
    handles: list[tuple[int, int]] = []
    pos = 0
    while pos < end:
        shared, pos = _varint(index, pos)
        non_shared, pos = _varint(index, pos)
        if version < 4:
            _, pos = _varint(index, pos)  # value length
        pos += non_shared
        offset, pos = _varint(index, pos)
        size, pos = _varint(index, pos)
        expected = handles[-1][0] + handles[-1][1] + 5 if handles else 0
        if offset != expected or (shared and version >= 4):
            raise SstFormatError(f"index entry {len(handles)} is not a full handle of the next block")
        handles.append((offset, size))
    if pos != end or len(handles) != restarts:
        raise SstFormatError("index block with delta-encoded handles")
    return handles


def sst_keys_written_after(
    data: bytes, num_entries: int, smallest: bytes, largest: bytes, sequence: int
) -> list[bytes]:
    """The user keys of the entries of a table file (its bytes) whose sequence number
    is greater than ``sequence``, in file order.

    ``num_entries``, ``smallest`` and ``largest`` are what RocksDB records for the
    file (its live file metadata); every entry is read and checked against them.

    Raises:
        SstFormatError: a layout, compression or entry type this reader does not
            take, a damaged file, or entries that do not match the metadata.
    """
    try:
        count, first, last, keys = _scan(data, sequence)
    except (IndexError, struct.error) as err:
        raise SstFormatError(f"truncated structure: {err}") from err
    if count != num_entries or first != smallest or last != largest:
        raise SstFormatError(
            f"{count} entries from {first!r} to {last!r} read, the file records {num_entries}"
        )
    return keys


def _scan(data: bytes, sequence: int) -> tuple[int, bytes, bytes, list[bytes]]:
    """(entries, first and last user key, user keys written after ``sequence``)."""
    keys: list[bytes] = []
    append_key = keys.append
    first: bytes | None = None
    previous_user = b""
    count = 0
    # An entry's trailer is ``sequence << 8 | type``, little-endian: compare as integers.
    floor = (sequence + 1) << 8
    unpack = _U64.unpack_from
    for offset, size in _data_handles(data):
        block = _block(data, offset, size)
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
            pos += non_shared + value_length
            if len(key) < 8 or key[-8] not in _POINT_TYPES:
                raise SstFormatError(f"entry type {key[-8:][:1].hex()} in block at {offset}")
            user = key[:-8]
            if user < previous_user:
                raise SstFormatError(f"keys out of order in block at {offset}")
            if first is None:
                first = user
            previous_user = user
            count += 1
            if unpack(key, len(key) - 8)[0] >= floor:
                append_key(user)
        if pos != end:
            raise SstFormatError(f"block at {offset} overruns its entries")
    if first is None:
        raise SstFormatError("no entries")
    return count, first, previous_user, keys
