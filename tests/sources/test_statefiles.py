"""LZ4 block streams and state file records: well-formed, damaged, and Spark's own."""

from __future__ import annotations

import struct
from pathlib import Path

import lz4.block
import pytest
import xxhash

from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.daemon.sources.errors import CorruptStateFile
from epochstate.daemon.sources.hdfs_backed.provider import HdfsStoreReader
from epochstate.daemon.sources.rows.lz4stream import read_lz4_block_stream
from epochstate.daemon.sources.rows.statefile import iter_records
from tests.fixtures.streams import copy_checkpoint

END = b"LZ4Block" + bytes([0x15]) + bytes(12)


def block(data: bytes, compressed: bool = True, level: int = 5) -> bytes:
    payload = lz4.block.compress(data, store_size=False) if compressed else data
    token = (0x20 if compressed else 0x10) | level
    checksum = xxhash.xxh32_intdigest(data, seed=0x9747B28C) & 0x0FFFFFFF
    return b"LZ4Block" + struct.pack("<Biii", token, len(payload), len(data), checksum) + payload


def records(*pairs: tuple[bytes, bytes | None]) -> bytes:
    out = b""
    for key, value in pairs:
        out += struct.pack(">i", len(key)) + key
        out += struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value
    return out + struct.pack(">i", -1)


# LZ4 block streams.


def test_blocks_raw_compressed_and_concatenated_streams() -> None:
    parts = [b"a" * 1000, bytes(range(256)) * 4, b"xyz"]
    stream = block(parts[0]) + block(parts[1], compressed=False) + END + block(parts[2]) + END
    assert read_lz4_block_stream(stream) == b"".join(parts)
    assert read_lz4_block_stream(END) == b""


@pytest.mark.parametrize(
    ("stream", "reason"),
    [
        (b"", "empty"),
        (block(b"abc"), "end marker"),
        (block(b"abc") + END[:-1], "truncated block header"),
        (block(b"abc" * 100)[:-1] + END, "f.delta: offset 0: "),
        (block(b"abc" * 100)[:30], "truncated block"),
        (b"LZ4Blocc" + END[8:], "bad block magic"),
        (END[:8] + b"\x35" + END[9:], "unknown block token"),
        (block(bytes(2000), level=0) + END, "impossible lengths"),
        (block(b"abc", compressed=False)[:9] + struct.pack("<i", 2) + block(b"abc")[13:], "raw"),
        (END[:-1] + b"\x01", "malformed end marker"),
        (END + b"garbage", "truncated block header"),
    ],
)
def test_malformed_streams_are_corrupt(stream: bytes, reason: str) -> None:
    with pytest.raises(CorruptStateFile, match=reason):
        read_lz4_block_stream(stream, "f.delta")


def test_checksum_mismatch_names_file_and_offset() -> None:
    good = block(b"hello" * 50)
    bad = good[:17] + bytes([good[17] ^ 1]) + good[18:]
    first = block(b"first")
    with pytest.raises(CorruptStateFile, match=rf"f\.delta: offset {len(first)}: checksum mismatch"):
        read_lz4_block_stream(first + bad + END, "f.delta")


# State file records.


def test_records_in_order_with_removals() -> None:
    pairs: list[tuple[bytes, bytes | None]] = [
        (b"k1", b"v1"),
        (b"k2", None),
        (b"", b""),
        (b"k1", b"2"),
    ]
    assert list(iter_records(records(*pairs))) == pairs
    assert list(iter_records(records())) == []


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "end marker"),
        (records((b"k", b"v"))[:-4], "end marker"),
        (records((b"key", b"value"))[:9], "truncated record"),
        (records((b"key", b"value"))[:14], "truncated record"),
        (struct.pack(">i", -2), "negative key size"),
        (struct.pack(">i", 1) + b"k" + struct.pack(">i", -7), "negative value size"),
        (records((b"k", b"v")) + b"\0", "after the end marker"),
    ],
)
def test_malformed_records_are_corrupt(content: bytes, reason: str) -> None:
    with pytest.raises(CorruptStateFile, match=reason):
        list(iter_records(content, "x.delta"))


def test_snapshot_may_not_remove() -> None:
    with pytest.raises(CorruptStateFile, match="removal in a snapshot"):
        list(iter_records(records((b"k", None)), "1.snapshot", allow_removals=False))


# Spark's own files.


def _largest_delta(root: Path) -> Path:
    return max((root / "state").glob("0/*/*.delta"), key=lambda p: p.stat().st_size)


def test_spark_files_decompress_and_parse(checkpoints: dict[str, Path]) -> None:
    for root in checkpoints.values():
        for path in (root / "state").rglob("*.*"):
            if path.suffix in (".delta", ".snapshot") and not path.name.startswith("."):
                content = read_lz4_block_stream(path.read_bytes(), str(path))
                list(iter_records(content, str(path), path.suffix == ".delta"))
    # The bulk first batch spans several 32 KiB blocks.
    assert _largest_delta(checkpoints["dedup"]).read_bytes().count(b"LZ4Block") >= 3


def _assert_detected_or_harmless(damaged: bytes, original: bytes) -> None:
    """A damaged file either fails, or decompresses to exactly the original content
    (a flipped LZ4 match offset can point at identical bytes)."""
    try:
        content = read_lz4_block_stream(damaged, "x.delta")
    except CorruptStateFile:
        return
    assert content == original


def test_every_flipped_byte_of_a_spark_file_is_detected(checkpoints: dict[str, Path]) -> None:
    data = (checkpoints["plain"] / "state" / "0" / "0" / "2.delta").read_bytes()
    original = read_lz4_block_stream(data)
    for pos in range(len(data)):
        damaged = data[:pos] + bytes([data[pos] ^ 0xFF]) + data[pos + 1 :]
        _assert_detected_or_harmless(damaged, original)
    # Headers are checked exactly: any change to a header byte other than the level
    # nibble of the token (the block size class) fails.
    for pos in [*range(8), *range(9, 21)]:
        with pytest.raises(CorruptStateFile):
            read_lz4_block_stream(data[:pos] + bytes([data[pos] ^ 0x40]) + data[pos + 1 :])
    big = _largest_delta(checkpoints["dedup"]).read_bytes()
    original = read_lz4_block_stream(big)
    for pos in range(0, len(big), 331):
        _assert_detected_or_harmless(big[:pos] + bytes([big[pos] ^ 0x10]) + big[pos + 1 :], original)


def test_every_truncation_of_a_spark_file_is_detected(checkpoints: dict[str, Path]) -> None:
    data = (checkpoints["plain"] / "state" / "0" / "1" / "1.delta").read_bytes()
    for size in range(len(data)):
        with pytest.raises(CorruptStateFile):
            read_lz4_block_stream(data[:size], "1.delta")


def test_reader_reports_the_damaged_file(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "cp"
    copy_checkpoint(checkpoints["dedup"], copy)
    for snapshot in (copy / "state").glob("0/*/*.snapshot"):
        snapshot.unlink()
    reader = HdfsStoreReader.open(Checkpoint(copy), 0)
    flipped = copy / "state" / "0" / "1" / "2.delta"
    data = bytearray(flipped.read_bytes())
    data[17] ^= 0x01  # a checksum byte
    flipped.write_bytes(bytes(data))
    with pytest.raises(CorruptStateFile, match=r"1/2\.delta: offset 0: checksum mismatch"):
        list(reader.full_state(3))
    with pytest.raises(CorruptStateFile, match="checksum mismatch"):
        list(reader.changes(2))
    truncated = copy / "state" / "0" / "0" / "1.delta"
    truncated.write_bytes(truncated.read_bytes()[:-30])
    with pytest.raises(CorruptStateFile, match=r"0/1\.delta"):
        list(reader.partition_state(0, 1))
