"""A snapshot's MANIFEST read without RocksDB, against RocksDB opening the same
snapshot, on checkpoints Spark wrote."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import pytest

from epochstate.core.storage.location import open_location
from epochstate.daemon.sources.errors import CorruptStateFile
from epochstate.daemon.sources.rocksdb.manifest import (
    ManifestFormatError,
    parse_manifest,
    read_snapshot_manifest,
)
from epochstate.daemon.sources.rocksdb.snapshot import SnapshotReader

pytestmark = pytest.mark.spark


def _snapshots(checkpoint: Path) -> list[Path]:
    return sorted(checkpoint.glob("state/*/*/*.zip"))


@pytest.mark.parametrize("name", ["window-zip", "dedup-zip", "window-changelog"])
def test_manifest_says_what_rocksdb_says(
    name: str, rocksdb_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    snapshots = _snapshots(rocksdb_checkpoints[name])
    assert snapshots, f"{name}: no snapshot"
    compacted = 0
    for zip_path in snapshots:
        metadata, manifest = read_snapshot_manifest(open_location(zip_path))
        with SnapshotReader(open_location(zip_path), tmp_path) as snapshot:
            assert manifest.last_sequence == snapshot.latest_sequence(), zip_path
            tables = snapshot.table_files()
        live = {f.local_name: (f.level, f.smallest, f.largest) for f in manifest.files.values()}
        assert live == {k: (t.level, t.smallest, t.largest) for k, t in tables.items()}, zip_path
        assert set(live) == {f.local_name for f in metadata.files}
        compacted += any(f.level > 0 for f in manifest.files.values())
    if name == "window-zip":
        assert compacted, "no snapshot with a compacted file: file deletions went untested"


def test_damaged_or_foreign_manifests_are_refused(
    rocksdb_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    zip_path = _snapshots(rocksdb_checkpoints["window-zip"])[-1]
    with zipfile.ZipFile(zip_path) as archive:
        current = archive.read("CURRENT").decode().strip()
        data = archive.read(current)
    assert parse_manifest(data).files
    for damaged in (
        data[: len(data) // 2],  # a record cut short
        data[:7],  # a header without its payload
        data[:4] + b"\xff\xff" + data[6:],  # a length past the block
        data[:6] + b"\x09" + data[7:],  # an unknown record type
    ):
        with pytest.raises(ManifestFormatError):
            parse_manifest(damaged)
    # A field this reader does not know (tag 8, once large value refs) as a record.
    payload = b"\x08\x01"
    foreign = b"\x00\x00\x00\x00" + len(payload).to_bytes(2, "little") + b"\x01" + payload
    with pytest.raises(ManifestFormatError, match="field 8"):
        parse_manifest(data + foreign)
    # A flipped byte in the MANIFEST's stored bytes is caught by the zip entry's CRC-32.
    with zipfile.ZipFile(zip_path) as archive:
        info = archive.getinfo(current)
    raw = bytearray(zip_path.read_bytes())
    name_length, extra_length = struct.unpack_from("<HH", raw, info.header_offset + 26)
    raw[info.header_offset + 30 + name_length + extra_length + info.compress_size // 2] ^= 0x01
    broken = tmp_path / zip_path.name
    broken.write_bytes(bytes(raw))
    with pytest.raises(CorruptStateFile):
        read_snapshot_manifest(open_location(broken))
