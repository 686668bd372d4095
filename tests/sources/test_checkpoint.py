"""Checkpoint logs, operators and schemas, on checkpoints Spark wrote."""

from __future__ import annotations

import json
import struct
import time
import uuid
from pathlib import Path

import pytest

from epochstate.core.checkpoint.commitlog import parse_commit_entry
from epochstate.core.checkpoint.epochlog import SourceRange, parse_epoch_log
from epochstate.core.sparktypes import AtomicType
from epochstate.daemon.sources.checkpoint.checkpoint import HDFS_PROVIDER_CLASS, Checkpoint
from epochstate.daemon.sources.checkpoint.operators import OperatorInfo, StoreInfo
from epochstate.daemon.sources.checkpoint.schemafile import decode_modified_utf8, parse_schema_file
from epochstate.daemon.sources.errors import (
    CorruptCheckpointFile,
    MissingCheckpointFile,
    UnsupportedCheckpoint,
)
from epochstate.daemon.sources.hdfs_backed.provider import HdfsStoreReader
from tests.fixtures.streams import copy_checkpoint

JOIN_STORES = (
    "left-keyToNumValues",
    "left-keyWithIndexToValue",
    "right-keyToNumValues",
    "right-keyWithIndexToValue",
)


def test_query_and_epochs(checkpoints: dict[str, Path]) -> None:
    started = time.time() * 1000 - 600_000
    checkpoint = Checkpoint(checkpoints["window"])
    uuid.UUID(checkpoint.query_id())
    epochs = checkpoint.committed_epochs()
    assert epochs == list(range(len(epochs)))
    assert checkpoint.latest_committed() == epochs[-1]
    assert checkpoint.is_committed(0) and not checkpoint.is_committed(epochs[-1] + 1)
    assert checkpoint.planned_epochs() == epochs
    times = [checkpoint.commit_time_ms(e) for e in epochs]
    assert times == sorted(times) and started < times[0] <= time.time() * 1000
    with pytest.raises(MissingCheckpointFile):
        checkpoint.commit_time_ms(epochs[-1] + 1)


def test_epoch_logs_and_source_positions(checkpoints: dict[str, Path]) -> None:
    checkpoint = Checkpoint(checkpoints["window"])
    first = checkpoint.epoch_log(0)
    assert first.epoch == 0 and first.batch_watermark_ms == 0
    assert first.conf["spark.sql.shuffle.partitions"] == "2"
    assert json.loads(first.source_offsets[0] or "") == {"logOffset": 0}
    assert checkpoint.source_positions(0) == (SourceRange(None, first.source_offsets[0]),)
    latest = checkpoint.latest_committed()
    assert latest is not None
    watermarks = [checkpoint.epoch_log(e).batch_watermark_ms for e in range(latest + 1)]
    assert watermarks == sorted(watermarks) and watermarks[-1] > 0
    for epoch in range(1, latest + 1):
        (position,) = checkpoint.source_positions(epoch)
        assert position.start == checkpoint.epoch_log(epoch - 1).source_offsets[0]
        assert position.end == checkpoint.epoch_log(epoch).source_offsets[0]
    join_positions = Checkpoint(checkpoints["join"]).source_positions(1)
    assert len(join_positions) == 2 and all(p.start and p.end for p in join_positions)
    with pytest.raises(MissingCheckpointFile):
        checkpoint.epoch_log(latest + 100)


def test_provider_is_hdfs(checkpoints: dict[str, Path]) -> None:
    checkpoint = Checkpoint(checkpoints["plain"])
    assert checkpoint.provider_class() == HDFS_PROVIDER_CLASS
    assert checkpoint.provider_class(0) == HDFS_PROVIDER_CLASS
    checkpoint.ensure_hdfs_backed()


def test_rocksdb_checkpoint_is_unsupported(rocksdb_checkpoint: Path) -> None:
    checkpoint = Checkpoint(rocksdb_checkpoint)
    assert checkpoint.provider_class().endswith("RocksDBStateStoreProvider")
    reader = HdfsStoreReader.open(checkpoint, 0)  # the format is checked per version read
    with pytest.raises(UnsupportedCheckpoint, match=r"stateStore\.providerClass=.*epoch 0"):
        list(reader.changes(1))


def test_operators_from_metadata(checkpoints: dict[str, Path]) -> None:
    assert Checkpoint(checkpoints["plain"]).operators() == [
        OperatorInfo(0, "stateStoreSave", (StoreInfo("default", 2, 0),))
    ]
    assert Checkpoint(checkpoints["dedup"]).operators()[0].name == "dedupe"
    (join,) = Checkpoint(checkpoints["join"]).operators()
    assert join.name == "symmetricHashJoin"
    assert tuple(s.name for s in join.stores) == JOIN_STORES


def test_operators_from_layout_without_metadata(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    for name in ("plain", "join"):
        copy = tmp_path / name
        copy_checkpoint(checkpoints[name], copy)
        (copy / "state" / "0" / "_metadata" / "metadata").unlink()
        (derived,) = Checkpoint(copy).operators()
        (recorded,) = Checkpoint(checkpoints[name]).operators()
        assert derived == OperatorInfo(0, None, recorded.stores)


def test_operators_from_layout_of_the_rocksdb_provider(
    rocksdb_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    """Spark 3.5 writes no operator metadata; a RocksDB partition folder holds the
    default store's files beside the provider's ``SSTs/``, which is no store. (The
    layout cannot tell a prefix key, as of session windows: names and partitions only.)"""
    for name, original in rocksdb_checkpoints.items():
        copy = tmp_path / name
        copy_checkpoint(original, copy)
        (copy / "state" / "0" / "_metadata" / "metadata").unlink()
        assert (copy / "state" / "0" / "0" / "SSTs").is_dir()
        (derived,) = Checkpoint(copy).operators()
        (recorded,) = Checkpoint(original).operators()
        assert derived.name is None
        assert [(s.name, s.num_partitions) for s in derived.stores] == [
            (s.name, s.num_partitions) for s in recorded.stores
        ], name


def test_store_schemas(checkpoints: dict[str, Path]) -> None:
    checkpoint = Checkpoint(checkpoints["join"])
    key, value = checkpoint.store_schema(0, "left-keyToNumValues")
    assert [(f.name, f.type) for f in key.fields] == [("field0", AtomicType("long"))]
    assert [(f.name, f.type) for f in value.fields] == [("value", AtomicType("long"))]
    key, value = checkpoint.store_schema(0, "right-keyWithIndexToValue")
    assert key.names == ("field0", "index")
    assert value.names == ("l", "d", "ts", "matched")
    with pytest.raises(MissingCheckpointFile):
        checkpoint.store_schema(0, "default")
    with pytest.raises(MissingCheckpointFile):
        checkpoint.store_schema(7)


def test_file_uris(checkpoints: dict[str, Path]) -> None:
    root = checkpoints["plain"]
    expected = Checkpoint(root).query_id()
    assert Checkpoint(f"file://{root}").query_id() == expected
    assert Checkpoint(f"file:{root}").query_id() == expected
    assert Checkpoint(str(root)).query_id() == expected
    with pytest.raises(UnsupportedCheckpoint):
        Checkpoint("ftp://namenode/checkpoints/x")
    with pytest.raises(UnsupportedCheckpoint):
        Checkpoint("file://otherhost/x")


def test_empty_directory(tmp_path: Path) -> None:
    checkpoint = Checkpoint(tmp_path)
    assert checkpoint.committed_epochs() == [] and checkpoint.latest_committed() is None
    assert checkpoint.operators() == []
    with pytest.raises(MissingCheckpointFile):
        checkpoint.query_id()
    with pytest.raises(MissingCheckpointFile):
        checkpoint.provider_class()
    (tmp_path / "metadata").write_text("{not json")
    with pytest.raises(CorruptCheckpointFile):
        checkpoint.query_id()


def test_log_listing_ignores_checksums_and_temporary_files(tmp_path: Path) -> None:
    commits = tmp_path / "commits"
    commits.mkdir()
    for name in ("0", "1", ".1.crc", ".2.tmp", "2.tmp", "10", "x"):
        (commits / name).write_text("v1\n{}")
    assert Checkpoint(tmp_path).committed_epochs() == [0, 1, 10]


# Parsers, on exact bytes.


def test_epoch_log_parsing() -> None:
    text = 'v1\n{"batchWatermarkMs":5,"batchTimestampMs":7,"conf":{"a":"b"}}\n{"x":1}\n-'
    log = parse_epoch_log(3, text)
    assert (log.epoch, log.batch_watermark_ms, log.batch_timestamp_ms) == (3, 5, 7)
    assert log.conf == {"a": "b"} and log.source_offsets == ('{"x":1}', None)
    with pytest.raises(UnsupportedCheckpoint):
        parse_epoch_log(0, "v2\n{}\n-")
    for bad in ("", "v1", "v1\n[1]", "v1\nnot json", 'v1\n{"conf": 3}'):
        with pytest.raises(CorruptCheckpointFile):
            parse_epoch_log(0, bad)


def test_commit_log_parsing() -> None:
    entry = parse_commit_entry(4, 'v1\n{"nextBatchWatermarkMs":9}')
    assert (entry.epoch, entry.next_batch_watermark_ms, entry.state_unique_ids) == (4, 9, None)
    ids = '{"0":[["a"],["b"]],"1":[["c","d"],["e","f"]]}'
    entry = parse_commit_entry(1, 'v2\n{"nextBatchWatermarkMs":0,"stateUniqueIds":' + ids + "}")
    assert entry.state_unique_ids == {0: (("a",), ("b",)), 1: (("c", "d"), ("e", "f"))}
    v3 = 'v3\n{"nextBatchWatermarkMs":0,"stateUniqueIds":{"0":[["a"]]},"sinkMetadataMap":{}}'
    assert parse_commit_entry(1, v3).state_unique_ids == {0: (("a",),)}
    with pytest.raises(UnsupportedCheckpoint, match="v4"):
        parse_commit_entry(0, "v4\n{}")
    for bad in ("", "{}", "v1\n[]", 'v2\n{"stateUniqueIds":{"0":["a"]}}', 'v2\n{"stateUniqueIds":{"x":[]}}'):
        with pytest.raises(CorruptCheckpointFile):
            parse_commit_entry(0, bad)


def _utf(text: bytes) -> bytes:
    return struct.pack(">H", len(text)) + text


def _modified_utf8(text: str) -> bytes:
    """Java's writeUTF encoding: NUL as C0 80, non-BMP characters as two surrogates."""
    out = b""
    for ch in text:
        if ch == "\0":
            out += b"\xc0\x80"
        elif ord(ch) > 0xFFFF:
            pair = ch.encode("utf-16-be")
            for i in (0, 2):
                out += chr(int.from_bytes(pair[i : i + 2], "big")).encode("utf-8", "surrogatepass")
        else:
            out += ch.encode()
    return out


def test_modified_utf8() -> None:
    text = "a\0ü€\U0001f600"
    assert decode_modified_utf8(_modified_utf8(text)) == text
    with pytest.raises(CorruptCheckpointFile):
        decode_modified_utf8(b"\xff")


def test_schema_file_versions() -> None:
    key_json = '{"type":"struct","fields":[{"name":"k\U0001f600","type":"long"}]}'
    key = _modified_utf8(key_json)
    value = b'{"type":"struct","fields":[{"name":"v","type":"void"}]}'
    v1 = _utf(b"v1") + _utf(key) + _utf(value)
    # Spark chunks by UTF-16 units: split between the halves of the emoji's pair.
    split = len(_modified_utf8(key_json[: key_json.index("\U0001f600")])) + 3
    v2 = _utf(b"v2") + struct.pack(">i", 2) + _utf(key[:split]) + _utf(key[split:])
    v2 += struct.pack(">i", 1) + _utf(value)
    for data in (v1, v2):
        key_schema, value_schema = parse_schema_file(data)
        assert key_schema.names == ("k\U0001f600",)
        assert value_schema.fields[0].type == AtomicType("null")
    with pytest.raises(UnsupportedCheckpoint):
        parse_schema_file(_utf(b"v3"))
    with pytest.raises(CorruptCheckpointFile):
        parse_schema_file(v1[:-1])
    with pytest.raises(CorruptCheckpointFile):
        parse_schema_file(v1 + b"\0")
    with pytest.raises(CorruptCheckpointFile):
        parse_schema_file(_utf(b"v1") + _utf(b"{") + _utf(value))
    interval = b'{"type":"struct","fields":[{"name":"i","type":"interval"}]}'
    with pytest.raises(UnsupportedCheckpoint):
        parse_schema_file(_utf(b"v1") + _utf(interval) + _utf(value))
