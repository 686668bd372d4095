"""RocksDB changelogs, snapshots and rows: well-formed, damaged, missing, and Spark's own."""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

import lz4.block
import pytest
import xxhash

from epochstate.core.sparktypes import AtomicType, StructField, StructType
from epochstate.core.storage.location import open_location
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.daemon.sources.errors import (
    CorruptRow,
    CorruptStateFile,
    MissingStateFile,
    UnsupportedCheckpoint,
)
from epochstate.daemon.sources.rocksdb.changelog import LineageItem, iter_changelog
from epochstate.daemon.sources.rocksdb.provider import RocksDBStoreReader
from epochstate.daemon.sources.rocksdb.rows import StateRowDecoder
from epochstate.daemon.sources.rocksdb.snapshot import (
    SnapshotFile,
    SnapshotReader,
    parse_snapshot_metadata,
)
from epochstate.daemon.sources.rows.lz4stream import read_lz4_block_stream
from tests.fixtures.streams import copy_checkpoint

# Changelog framings.


def utf(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">H", len(data)) + data


def untyped(*pairs: tuple[bytes, bytes | None]) -> bytes:
    out = b""
    for key, value in pairs:
        out += struct.pack(">i", len(key)) + key
        out += struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value
    return out + struct.pack(">i", -1)


def typed(*records: tuple[int, bytes, bytes | None]) -> bytes:
    out = b""
    for kind, key, value in records:
        out += bytes([kind]) + struct.pack(">i", len(key)) + key
        out += struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value
    return out + b"\x00"


PAIRS: list[tuple[bytes, bytes | None]] = [(b"k1", b"v1"), (b"k2", None), (b"k1", b"")]
LINEAGE = '[{"version":2,"checkpointUniqueId":"a-b"},{"version":3,"checkpointUniqueId":"c"}]'


@pytest.mark.parametrize(
    ("content", "version", "lineage"),
    [
        (untyped(*PAIRS), 1, ()),
        (utf("v2") + typed((1, b"k1", b"v1"), (0x10, b"k2", None), (1, b"k1", b"")), 2, ()),
        (utf("v3") + utf(LINEAGE) + untyped(*PAIRS), 3, (LineageItem(2, "a-b"), LineageItem(3, "c"))),
        (
            utf("v4") + utf(LINEAGE) + typed((1, b"k1", b"v1"), (0x10, b"k2", None), (1, b"k1", b"")),
            4,
            (LineageItem(2, "a-b"), LineageItem(3, "c")),
        ),
    ],
)
def test_changelog_framings(content: bytes, version: int, lineage: tuple[LineageItem, ...]) -> None:
    header, records = iter_changelog(content, "c")
    assert (header.version, header.lineage) == (version, lineage)
    assert header.typed == (version in (2, 4))
    assert list(records) == PAIRS


def test_empty_changelogs() -> None:
    for content in (untyped(), utf("v2") + typed()):
        assert list(iter_changelog(content)[1]) == []


@pytest.mark.parametrize(
    ("content", "error", "reason"),
    [
        (utf("v2") + typed((1, b"k", b"v"))[:-1], CorruptStateFile, "without the end record"),
        (utf("v2") + typed((1, b"k", b"v")) + b"x", CorruptStateFile, "after the end record"),
        (utf("v2") + b"\x05" + typed(), CorruptStateFile, "unknown record type 0x05"),
        (utf("v2") + typed((0x10, b"k", b"v")), CorruptStateFile, "delete record with value"),
        (utf("v2") + typed((1, b"k", b"value"))[:-4], CorruptStateFile, "bad value size"),
        (utf("v2") + typed((0x11, b"k", b"v")), UnsupportedCheckpoint, "merge record"),
        (utf("v3") + utf("[{]") + untyped(), CorruptStateFile, "malformed lineage"),
        (utf("v3") + b"\x00\x09[]", CorruptStateFile, "truncated header"),
        (utf("v9") + untyped(), UnsupportedCheckpoint, "changelog version v9"),
        (untyped((b"k", b"v"))[:-2], CorruptStateFile, "c: offset"),
    ],
)
def test_malformed_changelogs(content: bytes, error: type[Exception], reason: str) -> None:
    with pytest.raises(error, match=reason):
        list(iter_changelog(content, "c")[1])


# Rows.


def long_row(*values: int) -> bytes:
    return bytes(8) + struct.pack(f"<{len(values)}q", *values)


LONGS = StructType(tuple(StructField(f"c{i}", AtomicType("long")) for i in range(3)))


def test_rows_with_and_without_a_prefix_key() -> None:
    assert StateRowDecoder(LONGS).decode(b"\x00" + long_row(1, 2, 3)) == (1, 2, 3)
    prefix = b"\x00" + long_row(7)
    key = struct.pack("<i", len(prefix)) + prefix + b"\x00" + long_row(8, 9)
    assert StateRowDecoder(LONGS, 1).decode(key) == (7, 8, 9)
    two = b"\x00" + long_row(7, 8)
    assert StateRowDecoder(LONGS, 2).decode(struct.pack("<i", len(two)) + two + b"\x00" + long_row(9)) == (
        7,
        8,
        9,
    )
    with pytest.raises(CorruptRow, match="not version 0"):
        StateRowDecoder(LONGS).decode(b"\x01" + long_row(1, 2, 3))
    with pytest.raises(CorruptRow, match="not version 0"):
        StateRowDecoder(LONGS).decode(b"")
    with pytest.raises(CorruptRow, match="prefix of"):
        StateRowDecoder(LONGS, 1).decode(struct.pack("<i", 99) + key[4:])
    with pytest.raises(CorruptRow):
        StateRowDecoder(LONGS).decode(b"\x00" + long_row(1, 2))
    with pytest.raises(ValueError):
        StateRowDecoder(LONGS, 4)


# Snapshot metadata.


def test_snapshot_metadata() -> None:
    text = "v1\n" + json.dumps(
        {
            "sstFiles": [{"localFileName": "000008.sst", "dfsSstFileName": "000008-u.sst", "sizeBytes": 9}],
            "logFiles": [{"localFileName": "000004.log", "dfsLogFileName": "000004-u.log", "sizeBytes": 3}],
            "numKeys": 4,
            "columnFamilyMapping": {"cf": 1},
        }
    )
    meta = parse_snapshot_metadata(text)
    assert meta.files == (
        SnapshotFile("000008.sst", "SSTs/000008-u.sst", 9),
        SnapshotFile("000004.log", "logs/000004-u.log", 3),
    )
    assert (meta.num_keys, meta.column_families) == (4, {"cf": 1})
    with pytest.raises(UnsupportedCheckpoint, match="version 'v2'"):
        parse_snapshot_metadata("v2\n{}")
    with pytest.raises(CorruptStateFile, match="bad file name"):
        parse_snapshot_metadata(text.replace("000008-u.sst", "../000008-u.sst"))
    with pytest.raises(CorruptStateFile, match="bad snapshot metadata"):
        parse_snapshot_metadata('v1\n{"sstFiles": [{}]}')


# Spark's files, damaged and missing.


@pytest.fixture
def changelog_copy(rocksdb_checkpoints: dict[str, Path], tmp_path: Path) -> Path:
    copy = tmp_path / "changelog"
    copy_checkpoint(rocksdb_checkpoints["dedup-changelog"], copy)
    return copy


@pytest.fixture
def zip_copy(rocksdb_checkpoints: dict[str, Path], tmp_path: Path) -> Path:
    copy = tmp_path / "zip"
    copy_checkpoint(rocksdb_checkpoints["window-zip"], copy)
    return copy


def partition_dir(root: Path, partition: int = 0) -> Path:
    return root / "state" / "0" / str(partition)


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_spark_changelogs_are_v1_framed_lz4_with_versioned_rows(rocksdb_checkpoints: dict[str, Path]) -> None:
    path = partition_dir(rocksdb_checkpoints["dedup-changelog"]) / "1.changelog"
    header, records = iter_changelog(read_lz4_block_stream(path.read_bytes()))
    assert (header.version, header.lineage) == (1, ())
    rows = list(records)
    assert rows and all(k[:1] == b"\x00" and v is not None and v[:1] == b"\x00" for k, v in rows)


def test_damaged_changelog_is_corrupt(changelog_copy: Path) -> None:
    path = partition_dir(changelog_copy) / "3.changelog"
    flip(path, len(path.read_bytes()) // 2)
    reader = RocksDBStoreReader.open(Checkpoint(changelog_copy), 0)
    with pytest.raises(CorruptStateFile, match=r"3\.changelog"):
        list(reader.changes(3))
    with pytest.raises(CorruptStateFile, match=r"3\.changelog"):
        list(reader.partition_state(0, 3))


def test_truncated_changelog_is_corrupt(changelog_copy: Path) -> None:
    path = partition_dir(changelog_copy, 1) / "2.changelog"
    path.write_bytes(path.read_bytes()[:-25])
    reader = RocksDBStoreReader.open(Checkpoint(changelog_copy), 0)
    with pytest.raises(CorruptStateFile, match=r"2\.changelog"):
        list(reader.changes(2))


def test_changelog_with_a_bad_row_version_is_corrupt(changelog_copy: Path) -> None:
    path = partition_dir(changelog_copy) / "1.changelog"
    _, records = iter_changelog(read_lz4_block_stream(path.read_bytes()))
    rows = list(records)
    key, value = rows[0]
    content = untyped((b"\x07" + key[1:], value), *rows[1:])
    checksum = xxhash.xxh32_intdigest(content, seed=0x9747B28C) & 0x0FFFFFFF
    payload = lz4.block.compress(content, store_size=False)
    stream = b"LZ4Block" + struct.pack("<Biii", 0x2F, len(payload), len(content), checksum) + payload
    path.write_bytes(stream + b"LZ4Block" + bytes([0x1F]) + bytes(12))
    reader = RocksDBStoreReader.open(Checkpoint(changelog_copy), 0)
    with pytest.raises(CorruptStateFile, match=r"1\.changelog: state row starts with 07"):
        list(reader.changes(1))


def test_missing_changelog(changelog_copy: Path) -> None:
    (partition_dir(changelog_copy, 1) / "1.changelog").unlink()
    reader = RocksDBStoreReader.open(Checkpoint(changelog_copy), 0)
    assert not reader.has_delta(1) and reader.has_delta(2)
    with pytest.raises(MissingStateFile, match=r"1/1\.changelog"):
        list(reader.changes(1))
    with pytest.raises(MissingStateFile, match=r"1/1\.changelog"):
        list(reader.partition_state(1, 1))
    assert list(reader.partition_state(0, 1))


def _snapshots_with_tables(root: Path) -> list[tuple[int, int, Path]]:
    """``(partition, version, table file)`` of every snapshot naming a table file,
    each table file once."""
    found: dict[Path, tuple[int, int, Path]] = {}
    for archive in sorted((root / "state" / "0").glob("*/*.zip")):
        with zipfile.ZipFile(archive) as opened:
            meta = parse_snapshot_metadata(opened.read("metadata").decode())
        for f in meta.files:
            table = archive.parent / f.dfs_path
            found.setdefault(table, (int(archive.parent.name), int(archive.stem), table))
    return list(found.values())


def _middle_of_largest_entry(archive: Path) -> int:
    """The offset of a byte in the stored data of the archive's largest entry (the
    entry's CRC-32 covers it, unlike header fields such as the modification time)."""
    with zipfile.ZipFile(archive) as opened:
        info = max(opened.infolist(), key=lambda i: i.compress_size)
    header = archive.read_bytes()[info.header_offset : info.header_offset + 30]
    name_size, extra_size = struct.unpack("<HH", header[26:30])
    start: int = info.header_offset + 30 + name_size + extra_size
    return start + info.compress_size // 2


def test_damaged_snapshots_are_corrupt(zip_copy: Path) -> None:
    reader = RocksDBStoreReader.open(Checkpoint(zip_copy), 0)
    archive = partition_dir(zip_copy) / "2.zip"
    flip(archive, _middle_of_largest_entry(archive))
    with pytest.raises(CorruptStateFile, match=r"0/2\.zip"):
        list(reader.partition_state(0, 2))
    (p1, v1, flipped), (p2, v2, truncated), *_ = [t for t in _snapshots_with_tables(zip_copy) if t[1] != 2]
    # A flipped byte inside a table file's first data block fails its checksum.
    flip(flipped, 10)
    with pytest.raises(CorruptStateFile, match=rf"{p1}/{v1}\.zip: RocksDB"):
        list(reader.partition_state(p1, v1))
    truncated.write_bytes(truncated.read_bytes()[:-1])
    with pytest.raises(CorruptStateFile, match=f"bytes, {v2}.zip says"):
        list(reader.partition_state(p2, v2))


def test_missing_snapshot_files(zip_copy: Path, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    reader = RocksDBStoreReader.open(Checkpoint(zip_copy), 0, scratch_dir=scratch)
    (partition_dir(zip_copy) / "5.zip").unlink()
    assert not reader.has_delta(5)
    with pytest.raises(MissingStateFile, match=r"5\.changelog"):
        list(reader.changes(5))
    with pytest.raises(
        MissingStateFile, match=r"5\.changelog: does not exist; rebuilding version 5 from 4\.zip"
    ):
        list(reader.partition_state(0, 5))
    partition, version, table = _snapshots_with_tables(zip_copy)[0]
    assert list(reader.partition_state(partition, version))
    table.unlink()
    with pytest.raises(MissingStateFile, match=f"named by {version}.zip"):
        list(reader.partition_state(partition, version))
    assert list(scratch.iterdir()) == []


def test_snapshot_with_column_families_is_refused(zip_copy: Path) -> None:
    archive = partition_dir(zip_copy) / "1.zip"
    with zipfile.ZipFile(archive) as original:
        entries = {name: original.read(name) for name in original.namelist()}
    version, body = entries["metadata"].decode().split("\n", 1)
    meta = json.loads(body)
    meta["columnFamilyMapping"] = {"countState": 1}
    entries["metadata"] = f"{version}\n{json.dumps(meta)}".encode()
    with zipfile.ZipFile(archive, "w") as rewritten:
        for name, data in entries.items():
            rewritten.writestr(name, data)
    reader = RocksDBStoreReader.open(Checkpoint(zip_copy), 0)
    with pytest.raises(UnsupportedCheckpoint, match="column families"):
        list(reader.partition_state(0, 1))


def test_snapshot_reader_reads_spark_zip_and_cleans_up(zip_copy: Path, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    partition, version, _ = _snapshots_with_tables(zip_copy)[0]
    zip_path = open_location(partition_dir(zip_copy, partition) / f"{version}.zip")
    with SnapshotReader(zip_path, scratch) as snapshot:
        rows = list(snapshot.items())
        assert len(list(scratch.iterdir())) == 1
    assert rows and rows == sorted(rows) and len(rows) == snapshot.metadata.num_keys
    assert all(k[:1] == b"\x00" and v[:1] == b"\x00" for k, v in rows)
    assert list(scratch.iterdir()) == []
    missing = open_location(partition_dir(zip_copy) / "9.zip")
    with pytest.raises(MissingStateFile), SnapshotReader(missing, scratch):
        pass
    assert list(scratch.iterdir()) == []
