"""Telling a failed attempt's snapshot from the committed one by content: values
against the changelog's last writes, and the snapshot's newest sequence numbers
against the changelog's records, on databases RocksDB itself wrote."""

from __future__ import annotations

from pathlib import Path

import rocksdict

from epochstate.daemon.sources.rocksdb.attempts import (
    as_records,
    sequence_disagreement,
    value_disagreement,
)
from epochstate.daemon.sources.rocksdb.changelog import DELETE, MERGE, PUT, ChangelogRecord
from epochstate.daemon.sources.rocksdb.manifest import Manifest, parse_manifest

Rows = list[tuple[bytes, bytes | None]]


def _snapshot(directory: Path, writes: Rows) -> tuple[Manifest, dict[str, Path], dict[bytes, bytes]]:
    """A database holding ``writes`` (value None: a delete) in order, flushed as a
    snapshot's is: its MANIFEST, table files and state."""
    table = rocksdict.BlockBasedOptions()
    table.set_checksum_type(rocksdict.ChecksumType.xxh3())
    table.set_format_version(5)
    options = rocksdict.Options(raw_mode=True)
    options.set_block_based_table_factory(table)
    options.set_compression_type(rocksdict.DBCompressionType.none())
    db = rocksdict.Rdict(str(directory), options)
    for key, value in writes:
        if value is None:
            del db[key]
        else:
            db[key] = value
    db.flush()
    state: dict[bytes, bytes] = {k: v for k, v in db.items() if isinstance(k, bytes) and isinstance(v, bytes)}
    db.close()
    manifest = parse_manifest((directory / (directory / "CURRENT").read_text().strip()).read_bytes())
    tables = {f.local_name: directory / f.local_name for f in manifest.files.values()}
    return manifest, tables, state


def test_the_committed_attempts_snapshot_agrees(tmp_path: Path) -> None:
    earlier: Rows = [(b"k1", b"old"), (b"k2", b"old")]  # versions before, in the same database
    version: Rows = [(b"x", b"0"), (b"a", b"1"), (b"k1", b"new"), (b"x", None)]
    manifest, tables, state = _snapshot(tmp_path, earlier + version)
    records = as_records(version)
    assert value_disagreement(state, records, b",") is None
    assert sequence_disagreement(manifest, tables, records) is None


def test_another_attempts_snapshot_disagrees(tmp_path: Path) -> None:
    earlier: Rows = [(b"k1", b"old"), (b"k2", b"old")]
    failed: Rows = [(b"a", b"1"), (b"k1", b"other"), (b"z", b"5")]
    manifest, tables, state = _snapshot(tmp_path, earlier + failed)
    # Another value: both checks see it.
    other_value = as_records([(b"a", b"1"), (b"k1", b"new"), (b"z", b"5")])
    assert value_disagreement(state, other_value, b",") is not None
    assert sequence_disagreement(manifest, tables, other_value) is not None
    # The committed attempt did not write z: every key it wrote agrees, but z sits at
    # the sequence number of its last record.
    fewer_keys = as_records([(b"a", b"1"), (b"k1", b"other")])
    assert value_disagreement(state, fewer_keys, b",") is None
    assert sequence_disagreement(manifest, tables, fewer_keys) is not None
    # The same keys in another order.
    other_order = as_records([(b"k1", b"other"), (b"a", b"1"), (b"z", b"5")])
    assert sequence_disagreement(manifest, tables, other_order) is not None
    # More writes than the snapshot holds at all.
    assert sequence_disagreement(manifest, tables, as_records([(b"a", b"1")] * 9)) is not None


def test_a_delete_and_list_merges_are_checked_by_what_they_leave(tmp_path: Path) -> None:
    state = {b"kept": b"1", b"list": b"a,b,c", b"fresh": b"x"}
    records = [
        ChangelogRecord(DELETE, b"gone", None),
        ChangelogRecord(MERGE, b"list", b"c"),  # onto a value the changelog does not show
        ChangelogRecord(PUT, b"fresh", b"w"),
        ChangelogRecord(MERGE, b"fresh", b"x"),
    ]
    assert value_disagreement(state, records[:2], b",") is None
    assert value_disagreement({**state, b"fresh": b"w,x"}, records, b",") is None
    assert value_disagreement(state, records, b",") is not None  # fresh should be "w,x"
    assert value_disagreement({**state, b"gone": b"1"}, records, b",") is not None
    assert value_disagreement({**state, b"list": b"a,b"}, records, b",") is not None
    assert value_disagreement({**state, b"fresh": b"wx"}, records, b"") is None  # merge operator v2
