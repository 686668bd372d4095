"""Each finding of the fuzz targets, pinned: the input (``tests/fuzz/regressions/``)
now fails with the domain error a damaged file should give, naming what is wrong.

Before the fixes these escaped as OSError, OverflowError, RecursionError or
StopIteration, which the daemon reports as an internal error (or not at all).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from epochstate.core import jsontext
from epochstate.core.checkpoint.commitlog import parse_commit_entry
from epochstate.core.checkpoint.epochlog import parse_epoch_log
from epochstate.core.storage.location import open_location
from epochstate.daemon.ingest.registry_publisher import _offsets
from epochstate.daemon.server.positions import _parse
from epochstate.daemon.sources.checkpoint.operators import parse_operator_metadata
from epochstate.daemon.sources.checkpoint.schemafile import parse_column_family_schemas, parse_schema_file
from epochstate.daemon.sources.errors import CorruptCheckpointFile, CorruptStateFile, UnsupportedCheckpoint
from epochstate.daemon.sources.rocksdb.changelog import read_header
from epochstate.daemon.sources.rocksdb.manifest import read_snapshot_manifest
from epochstate.daemon.sources.rocksdb.snapshot import SnapshotReader, read_snapshot_metadata
from epochstate.daemon.sources.rocksdb.snapshot_zip import open_snapshot_zip
from epochstate.daemon.sources.rocksdb.sst import SstFormatError, sst_writes_after
from tests.fuzz.targets import REGRESSIONS, fix_sst_checksums


def finding(name: str) -> bytes:
    return (REGRESSIONS / name).read_bytes()


def test_json_numbers_beyond_a_double_are_corrupt_files() -> None:
    entry = finding("checkpoint_log/watermark-infinity").decode()
    with pytest.raises(CorruptCheckpointFile, match="Infinity"):
        parse_commit_entry(0, entry)
    with pytest.raises(CorruptCheckpointFile, match="Infinity"):
        parse_epoch_log(0, entry)
    with pytest.raises(CorruptCheckpointFile, match="does not fit a double"):
        parse_epoch_log(0, finding("checkpoint_log/number-beyond-double").decode())
    with pytest.raises(CorruptCheckpointFile, match="Infinity"):
        parse_operator_metadata(0, finding("checkpoint_log/operator-id-infinity").decode())
    with pytest.raises(CorruptStateFile, match="malformed lineage"):
        read_header(finding("changelog/lineage-version-infinity"))


def test_json_nested_beyond_the_parser_is_a_corrupt_file() -> None:
    text = finding("checkpoint_log/nested-too-deep").decode()
    with pytest.raises(CorruptCheckpointFile, match="nested too deeply"):
        parse_epoch_log(0, text)
    with pytest.raises(CorruptStateFile, match="nested too deeply"):
        read_header(finding("changelog/lineage-nested-too-deep"))
    with pytest.raises(CorruptCheckpointFile, match="nested too deeply"):
        parse_schema_file(finding("schema_file/schema-nested-too-deep"))
    # An offset line nested that deep names no position (the server and the publisher).
    offsets = text.splitlines()[2]
    assert _parse(offsets) == {} and _offsets(offsets) == offsets
    with pytest.raises(ValueError, match="nested too deeply"):
        jsontext.loads("[" * 5000)


def test_offset_partitions_that_are_not_ascii_digits_name_no_position() -> None:
    lines = finding("checkpoint_log/offset-partition-not-ascii").decode().splitlines()
    assert [_parse(line) for line in lines[2:]] == [{}, {}]  # was ValueError from int("²")
    assert _parse('{"t": {"' + "1" * 5000 + '": 5, "3": 7}}') == {("t", 3): 7}


def test_schemas_beyond_spark_are_unsupported_not_crashes() -> None:
    with pytest.raises(UnsupportedCheckpoint, match="nested deeper than 100 levels"):
        parse_schema_file(finding("schema_codecs/array-nested-600-deep"))
    with pytest.raises(UnsupportedCheckpoint, match=r"decimal\(60,2\) is not a Spark decimal type"):
        parse_column_family_schemas(finding("schema_codecs/decimal-precision-60"))


def test_zip_entry_at_a_negative_offset_is_a_corrupt_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "1.zip"
    path.write_bytes(finding("snapshot_zip/negative-entry-offset"))
    with pytest.raises(CorruptStateFile, match="not a readable zip"):
        SnapshotReader(open_location(path))._extract(str(tmp_path / "out"))
    assert read_snapshot_metadata(open_location(path)).files  # the metadata entry itself is sound


def test_sst_block_claiming_more_than_lz4_can_hold_is_refused_before_allocating() -> None:
    table = fix_sst_checksums(finding("sst/lz4-size-beyond-int32"))
    with pytest.raises(SstFormatError, match="LZ4 bytes cannot hold"):
        sst_writes_after(table, b"", b"", 0)


@pytest.mark.parametrize(
    ("name", "method"), [("bzip2-invalid-stream", "method 12"), ("lzma-corrupt-input", "method 14")]
)
def test_zip_methods_spark_never_writes_are_refused_before_decompressing(
    tmp_path: Path, name: str, method: str
) -> None:
    path = tmp_path / "1.zip"
    path.write_bytes(finding(f"snapshot_zip/{name}"))  # were a bare OSError / LZMAError
    for read in (
        lambda: SnapshotReader(open_location(path))._extract(str(tmp_path / "out")),
        lambda: read_snapshot_metadata(open_location(path)),
        lambda: read_snapshot_manifest(open_location(path)),
    ):
        with pytest.raises(CorruptStateFile, match=f"compression {method}, which Spark never writes"):
            read()


def test_a_zip_that_would_expand_beyond_the_bound_is_refused_before_extracting(tmp_path: Path) -> None:
    path = tmp_path / "1.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("metadata", 'v1\n{"sstFiles": [], "numKeys": 0}')
        archive.writestr("MANIFEST-1", b"\0" * (1 << 20))
    opening = open_snapshot_zip(open_location(path), max_uncompressed_bytes=1 << 16)
    with pytest.raises(CorruptStateFile, match="above the 65536 a snapshot zip"), opening:
        raise AssertionError("opened")
