"""Decoding of the LZ4 block stream Spark writes state files with.

Spark's ``lz4`` codec (the default of ``spark.sql.streaming.stateStore.compression.codec``)
writes lz4-java's block stream: a sequence of blocks, each a 21-byte header

=========  =====  ==========================================================
offset     size   field
=========  =====  ==========================================================
0          8      magic ``LZ4Block``
8          1      token: high nibble method (0x10 raw, 0x20 LZ4), low nibble
                  level; a block holds at most ``1 << (10 + level)`` bytes
9          4      compressed length, little-endian int32
13         4      decompressed length, little-endian int32
17         4      XXH32 (seed ``0x9747B28C``) of the decompressed bytes,
                  masked with ``0x0FFFFFFF``, little-endian
=========  =====  ==========================================================

followed by the block's data (raw, or in the LZ4 *block* format). A block with
both lengths zero ends a stream; another stream may follow it.
"""

from __future__ import annotations

import struct

import lz4.block
import xxhash

from epochstate.daemon.sources.errors import CorruptStateFile

MAGIC = b"LZ4Block"
HEADER = struct.Struct("<8sBiii")
CHECKSUM_SEED = 0x9747B28C
CHECKSUM_MASK = 0x0FFFFFFF
METHOD_RAW = 0x10
METHOD_LZ4 = 0x20
_MAX_LEVEL = 15


def read_lz4_block_stream(data: bytes | memoryview, source: str = "<bytes>") -> bytes:
    """Return the decompressed content of one or more concatenated LZ4 block streams.

    Every block's checksum is verified. ``source`` names the data in errors.

    Raises:
        CorruptStateFile: bad magic, unknown method, impossible lengths, a block that
            does not decompress or fails its checksum, or data that ends before a
            stream's end marker (also an empty input). The message gives ``source``,
            the byte offset of the failing block and the reason.
    """
    view = memoryview(data)
    total = len(view)
    if total == 0:
        raise CorruptStateFile(f"{source}: empty file, expected an LZ4 block stream")
    parts: list[bytes] = []
    pos = 0
    ended = False
    while pos < total:
        if total - pos < HEADER.size:
            raise CorruptStateFile(
                f"{source}: offset {pos}: truncated block header ({total - pos} of {HEADER.size} bytes)"
            )
        magic, token, clen, dlen, checksum = HEADER.unpack_from(view, pos)
        if magic != MAGIC:
            raise CorruptStateFile(f"{source}: offset {pos}: bad block magic {bytes(magic)!r}")
        method, level = token & 0xF0, token & 0x0F
        if method not in (METHOD_RAW, METHOD_LZ4) or level > _MAX_LEVEL:
            raise CorruptStateFile(f"{source}: offset {pos}: unknown block token {token:#04x}")
        block_max = 1 << (10 + level)
        if clen < 0 or dlen < 0 or dlen > block_max:
            raise CorruptStateFile(
                f"{source}: offset {pos}: impossible lengths {clen}/{dlen} (block max {block_max})"
            )
        if method == METHOD_RAW and clen != dlen:
            raise CorruptStateFile(f"{source}: offset {pos}: raw block with lengths {clen} != {dlen}")
        start = pos + HEADER.size
        if dlen == 0:
            # The end marker of a stream; it must carry no data.
            if clen != 0 or checksum != 0:
                raise CorruptStateFile(f"{source}: offset {pos}: malformed end marker")
            ended = True
            pos = start
            continue
        ended = False
        if clen == 0:
            raise CorruptStateFile(f"{source}: offset {pos}: empty block of {dlen} bytes")
        end = start + clen
        if end > total:
            raise CorruptStateFile(
                f"{source}: offset {pos}: truncated block ({total - start} of {clen} bytes)"
            )
        if method == METHOD_RAW:
            block = bytes(view[start:end])
        else:
            try:
                block = lz4.block.decompress(view[start:end], uncompressed_size=dlen)
            except lz4.block.LZ4BlockError as err:
                raise CorruptStateFile(f"{source}: offset {pos}: block does not decompress: {err}") from err
            if len(block) != dlen:
                raise CorruptStateFile(
                    f"{source}: offset {pos}: block decompressed to {len(block)} bytes, header says {dlen}"
                )
        actual = xxhash.xxh32_intdigest(block, seed=CHECKSUM_SEED) & CHECKSUM_MASK
        if actual != checksum:
            raise CorruptStateFile(
                f"{source}: offset {pos}: checksum mismatch "
                f"(stored {checksum:#010x}, computed {actual:#010x})"
            )
        parts.append(block)
        pos = end
    if not ended:
        raise CorruptStateFile(f"{source}: offset {pos}: stream ends without its end marker")
    return b"".join(parts)
