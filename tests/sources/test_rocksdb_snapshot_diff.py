"""Changes between consecutive RocksDB snapshots read from their newest writes,
against the difference of the two whole states, on checkpoints Spark wrote."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from epochstate.core.storage.location import open_location
from epochstate.daemon.sources.rocksdb.snapshot import SnapshotReader
from epochstate.daemon.sources.rocksdb.snapshot_diff import newest_writes_changes, read_for_diff
from epochstate.daemon.sources.rocksdb.sst import SstFormatError, sst_writes_after
from tests.fixtures.streams import copy_checkpoint

pytestmark = pytest.mark.spark


def _diff(before_zip: Path, after_zip: Path) -> list[tuple[bytes, bytes | None]] | None:
    before = read_for_diff(open_location(before_zip))
    after = open_location(after_zip)
    if before.opened is None:
        return None
    return newest_writes_changes(before.opened, after, read_for_diff(after))


def _state(zip_path: Path, scratch: Path) -> dict[bytes, bytes]:
    with SnapshotReader(open_location(zip_path), scratch) as snapshot:
        return dict(snapshot.items())


@pytest.mark.parametrize("name", ["window-zip", "dedup-zip"])
def test_newest_writes_give_exactly_the_changed_keys(
    name: str, rocksdb_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    read_from_writes = 0
    for store_dir in sorted((rocksdb_checkpoints[name] / "state" / "0").iterdir()):
        versions = sorted(int(p.stem) for p in store_dir.glob("*.zip"))
        for version in versions[1:]:
            before = _state(store_dir / f"{version - 1}.zip", tmp_path)
            after = _state(store_dir / f"{version}.zip", tmp_path)
            found = _diff(store_dir / f"{version - 1}.zip", store_dir / f"{version}.zip")
            if found is None:
                continue
            read_from_writes += 1
            keys = [k for k, _ in found]
            assert keys == sorted(set(keys))
            # Every key found carries its value at `version` (read from the table files,
            # not the database); every changed key is found.
            assert all(after.get(k) == v for k, v in found)
            changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
            assert changed <= set(keys), f"{store_dir} version {version}"
    assert read_from_writes > 0, "no version was read from its newest writes"
    assert list(tmp_path.iterdir()) == [], "a snapshot's scratch directory was left behind"


def test_a_damaged_table_file_is_refused_not_misread(
    rocksdb_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    store_dir = rocksdb_checkpoints["window-zip"] / "state" / "0" / "0"
    for zip_path in sorted(store_dir.glob("*.zip"), key=lambda p: -int(p.stem)):
        with SnapshotReader(open_location(zip_path), tmp_path) as snapshot:
            tables = snapshot.table_files()
            files = {f.local_name: store_dir / f.dfs_path for f in snapshot.metadata.files}
        if tables:
            break
    name, table = max(tables.items(), key=lambda item: item[1].num_entries)
    data = files[name].read_bytes()
    args = (table.smallest, table.largest, -1)
    entries = sst_writes_after(data, *args)
    # The count the file's properties record is the one RocksDB reports.
    assert len(entries.keys) == len(entries.sequences) == len(entries.values) == table.num_entries
    assert entries.keys[0] == table.smallest and entries.keys[-1] == table.largest
    # One bit flipped in a block's stored bytes (key, value or LZ4 framing) is caught by
    # the block's checksum, wherever it lands.
    flipped = [data[:i] + bytes([data[i] ^ 0x10]) + data[i + 1 :] for i in (7, 40, 200)]
    for damaged in (
        data[: len(data) // 2],
        data[:100] + bytes(200) + data[300:],
        data[:-1] + b"\x00",
        *flipped,
    ):
        with pytest.raises(SstFormatError):
            sst_writes_after(damaged, *args)
    with pytest.raises(SstFormatError):
        sst_writes_after(data, table.smallest + b"\x00", table.largest, -1)


def test_a_manifest_the_reader_does_not_take_falls_back_to_whole_states(
    rocksdb_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    source = rocksdb_checkpoints["window-zip"] / "state" / "0" / "0"
    store_dir = tmp_path / "store"
    copy_checkpoint(source, store_dir)
    version = max(int(p.stem) for p in store_dir.glob("*.zip"))
    before, after = store_dir / f"{version - 1}.zip", store_dir / f"{version}.zip"
    assert _diff(before, after) is not None
    # The same snapshot with one more MANIFEST record holding a field the reader does
    # not know (tag 8): the diff declines rather than guessing.
    with zipfile.ZipFile(after) as archive:
        entries = {info.filename: archive.read(info) for info in archive.infolist()}
    current = entries["CURRENT"].decode().strip()
    payload = b"\x08\x01"
    record = b"\x00\x00\x00\x00" + len(payload).to_bytes(2, "little") + b"\x01" + payload
    entries[current] += record
    with zipfile.ZipFile(after, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    assert _diff(before, after) is None
