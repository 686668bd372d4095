"""The codec streams of :mod:`codecs`, in memory: each decodes what its format holds
and refuses damage (Spark-written files of every codec are read in
tests/e2e/test_checkpoint_life_settings.py)."""

from __future__ import annotations

import struct

import cramjam
import pytest

from epochstate.daemon.sources.errors import CorruptStateFile, UnsupportedCheckpoint
from epochstate.daemon.sources.rows.codecs import CODECS, SNAPPY_MAGIC, decompress

CONTENT = b"state file records " * 40 + bytes(range(256))


def _snappy(chunks: list[bytes]) -> bytes:
    compressed = [bytes(cramjam.snappy.compress_raw(c)) for c in chunks]
    header = SNAPPY_MAGIC + struct.pack(">ii", 1, 1)
    return header + b"".join(struct.pack(">i", len(c)) + c for c in compressed)


def _lzf_stored(data: bytes) -> bytes:
    return b"ZV\x00" + struct.pack(">H", len(data)) + data


def _lzf_compressed(block: bytes, length: int) -> bytes:
    return b"ZV\x01" + struct.pack(">HH", len(block), length) + block


# A literal run of "abc", a back reference of 9 bytes (length field 7, extended by 0) at
# distance 3, overlapping its own output, and one of 12 bytes (extended by 3) at distance 12.
LZF_BLOCK = b"\x02abc" + bytes([0xE0, 0, 2]) + bytes([0xE0, 3, 11])
LZF_CONTENT = b"abc" * 4 + b"abcabcabcabc"


def test_every_codec_decodes_its_stream() -> None:
    assert decompress("zstd", bytes(cramjam.zstd.compress(CONTENT))) == CONTENT
    assert decompress("snappy", _snappy([CONTENT[:300], CONTENT[300:]])) == CONTENT
    lzf = _lzf_stored(b"head") + _lzf_compressed(LZF_BLOCK, len(LZF_CONTENT))
    assert decompress("lzf", lzf) == b"head" + LZF_CONTENT
    assert decompress("org.apache.spark.io.ZStdCompressionCodec", bytes(cramjam.zstd.compress(b"x"))) == b"x"
    assert {"lz4", "zstd", "snappy", "lzf", "org.apache.spark.io.LZFCompressionCodec"} <= CODECS


@pytest.mark.parametrize(
    ("codec", "data"),
    [
        ("zstd", b""),
        ("zstd", bytes(cramjam.zstd.compress(CONTENT))[:-3]),
        ("snappy", b"\x82SNAPP"),
        ("snappy", _snappy([CONTENT])[:-5]),
        ("snappy", b"\x00" * 16),
        ("lzf", b"ZX\x00\x00\x01a"),
        ("lzf", _lzf_stored(b"abc")[:-1]),
        ("lzf", _lzf_compressed(LZF_BLOCK, len(LZF_CONTENT) + 1)),
        ("lzf", _lzf_compressed(b"\x00a" + bytes([0x20, 5]), 4)),  # a reference before the start
    ],
)
def test_damage_is_refused(codec: str, data: bytes) -> None:
    with pytest.raises(CorruptStateFile, match="where"):
        decompress(codec, data, "where")


def test_an_unknown_codec_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedCheckpoint, match=r"codec=com\.example\.Codec; readable: lz4, lzf"):
        decompress("com.example.Codec", b"", "where")
