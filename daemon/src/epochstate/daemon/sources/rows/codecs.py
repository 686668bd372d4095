"""The streams Spark's state compression codecs write, decoded whole.

``spark.sql.streaming.stateStore.compression.codec`` names one of Spark's
``CompressionCodec`` classes, by short name or class name; each wraps the state
file in its library's stream format:

======  ===================================================================
codec   stream
======  ===================================================================
lz4     lz4-java's block stream (see :mod:`lz4stream`)
zstd    zstd-jni: standard Zstandard frames
snappy  snappy-java's stream: an 8-byte magic ``\\x82SNAPPY\\x00``, two
        big-endian int32 (version, compatible version: 1, 1), then chunks,
        each a big-endian int32 length and a raw Snappy block
lzf     compress-lzf's chunks: ``ZV``, a type byte (0 stored, 1 compressed),
        a big-endian uint16 length (and, compressed, the uint16 length it
        decompresses to), then the chunk's bytes
======  ===================================================================

zstd and Snappy are decoded by ``cramjam``; LZF, which it lacks, here.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import cramjam

from epochstate.daemon.sources.errors import CorruptStateFile, UnsupportedCheckpoint
from epochstate.daemon.sources.rows.lz4stream import read_lz4_block_stream

_PREFIX = "org.apache.spark.io."
SNAPPY_MAGIC = b"\x82SNAPPY\x00"
_SNAPPY_HEADER = struct.Struct(">8sii")
_INT = struct.Struct(">i")
_LZF_STORED = struct.Struct(">2sBH")
_LZF_COMPRESSED = struct.Struct(">2sBHH")


def _zstd(data: bytes | memoryview, source: str) -> bytes:
    if not data:
        raise CorruptStateFile(f"{source}: empty file, expected a zstd stream")
    try:
        return bytes(cramjam.zstd.decompress(bytes(data)))
    except cramjam.DecompressionError as err:
        raise CorruptStateFile(f"{source}: zstd stream does not decompress: {err}") from err


def _snappy(data: bytes | memoryview, source: str) -> bytes:
    view = memoryview(data)
    if len(view) < _SNAPPY_HEADER.size:
        raise CorruptStateFile(f"{source}: {len(view)} bytes, shorter than a Snappy stream header")
    magic, _, compatible = _SNAPPY_HEADER.unpack_from(view, 0)
    if magic != SNAPPY_MAGIC or compatible != 1:
        raise CorruptStateFile(f"{source}: not a snappy-java stream (header {bytes(view[:16]).hex()})")
    parts: list[bytes] = []
    pos = _SNAPPY_HEADER.size
    while pos < len(view):
        if len(view) - pos < _INT.size:
            raise CorruptStateFile(f"{source}: offset {pos}: truncated chunk length")
        (length,) = _INT.unpack_from(view, pos)
        start, end = pos + _INT.size, pos + _INT.size + length
        if length < 0 or end > len(view):
            raise CorruptStateFile(f"{source}: offset {pos}: chunk of {length} bytes past the end")
        try:
            parts.append(bytes(cramjam.snappy.decompress_raw(bytes(view[start:end]))))
        except cramjam.DecompressionError as err:
            raise CorruptStateFile(f"{source}: offset {pos}: chunk does not decompress: {err}") from err
        pos = end
    return b"".join(parts)


def _lzf(data: bytes | memoryview, source: str) -> bytes:
    view = memoryview(data)
    out = bytearray()
    pos = 0
    while pos < len(view):
        if len(view) - pos < _LZF_STORED.size:
            raise CorruptStateFile(f"{source}: offset {pos}: truncated LZF chunk header")
        magic, kind, length = _LZF_STORED.unpack_from(view, pos)
        if magic != b"ZV" or kind not in (0, 1):
            raise CorruptStateFile(
                f"{source}: offset {pos}: not an LZF chunk ({bytes(view[pos : pos + 3])!r})"
            )
        if kind == 0:
            start = pos + _LZF_STORED.size
            if start + length > len(view):
                raise CorruptStateFile(f"{source}: offset {pos}: truncated stored chunk")
            out += view[start : start + length]
            pos = start + length
            continue
        if len(view) - pos < _LZF_COMPRESSED.size:
            raise CorruptStateFile(f"{source}: offset {pos}: truncated LZF chunk header")
        _, _, length, expected = _LZF_COMPRESSED.unpack_from(view, pos)
        start = pos + _LZF_COMPRESSED.size
        if start + length > len(view):
            raise CorruptStateFile(f"{source}: offset {pos}: truncated compressed chunk")
        chunk = _lzf_chunk(bytes(view[start : start + length]), expected)
        if chunk is None:
            raise CorruptStateFile(f"{source}: offset {pos}: LZF chunk does not make {expected} bytes")
        out += chunk
        pos = start + length
    return bytes(out)


def _lzf_chunk(data: bytes, expected: int) -> bytearray | None:
    """One LZF block: a control byte below 32 is a literal run of ``control + 1``
    bytes; above, a back reference of ``(control >> 5) + 2`` bytes (a length field of
    7 is extended by the next byte) at distance ``((control & 31) << 8) + next + 1``.
    ``None``: the block is damaged."""
    out = bytearray()
    pos, end = 0, len(data)
    while pos < end:
        control = data[pos]
        pos += 1
        if control < 32:
            run = control + 1
            if pos + run > end:
                return None
            out += data[pos : pos + run]
            pos += run
            continue
        length = control >> 5
        if length == 7:
            if pos >= end:
                return None
            length += data[pos]
            pos += 1
        if pos >= end:
            return None
        back = ((control & 31) << 8) + data[pos] + 1
        pos += 1
        length += 2
        ref = len(out) - back
        if ref < 0:
            return None
        if back >= length:
            out += out[ref : ref + length]
        else:  # overlapping: the run repeats the last ``back`` bytes
            for i in range(length):
                out.append(out[ref + i])
    return out if len(out) == expected else None


_DECODERS: dict[str, Callable[[bytes | memoryview, str], bytes]] = {
    "lz4": read_lz4_block_stream,
    "zstd": _zstd,
    "snappy": _snappy,
    "lzf": _lzf,
}
_CLASS_NAMES = {"lz4": "LZ4", "zstd": "ZStd", "snappy": "Snappy", "lzf": "LZF"}
CODECS = frozenset({*_DECODERS, *(f"{_PREFIX}{name}CompressionCodec" for name in _CLASS_NAMES.values())})
"""Every value of the codec setting that :func:`decompress` reads."""


def decompress(codec: str, data: bytes | memoryview, source: str = "<bytes>") -> bytes:
    """The content of a state file Spark compressed with ``codec`` (a short or class
    name). ``source`` names the data in errors.

    Raises:
        UnsupportedCheckpoint: a codec not in :data:`CODECS`.
        CorruptStateFile: the data is not a whole stream of that codec.
    """
    short = codec.lower()
    for name, class_name in _CLASS_NAMES.items():
        if codec == f"{_PREFIX}{class_name}CompressionCodec":
            short = name
    decoder = _DECODERS.get(short)
    if decoder is None:
        readable = ", ".join(sorted(_DECODERS))
        raise UnsupportedCheckpoint(
            f"{source}: spark.sql.streaming.stateStore.compression.codec={codec}; readable: {readable}"
        )
    return decoder(data, source)
