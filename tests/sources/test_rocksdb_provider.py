"""The RocksDB provider's reader against Spark's own state reader, on checkpoints
written with changelog checkpointing on and off."""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from epochstate.core.storage.location import open_location
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.daemon.sources.errors import CorruptStateFile, MissingStateFile, UnsupportedCheckpoint
from epochstate.daemon.sources.hdfs_backed.provider import HdfsStoreReader
from epochstate.daemon.sources.readers import open_store_reader
from epochstate.daemon.sources.rocksdb.attempts import as_records, sequence_disagreement
from epochstate.daemon.sources.rocksdb.manifest import parse_manifest
from epochstate.daemon.sources.rocksdb.provider import RocksDBStoreReader
from epochstate.daemon.sources.rocksdb.snapshot import SnapshotReader
from tests.fixtures.streams import copy_checkpoint
from tests.sources.conftest import FORMAT_VERSION_CONF, ROCKSDB_RUNS
from tests.sources.spark_state import Entry, assert_matches_oracle, frozen, spark_state
from tests.sources.sparkvalues import freeze

pytestmark = pytest.mark.spark

ROW_CHECKSUM = "spark.sql.streaming.stateStore.rowChecksum.enabled"
ENCODING = "spark.sql.streaming.stateStore.encodingFormat"
CODEC = "spark.sql.streaming.stateStore.compression.codec"
UNKNOWN_CODEC = "com.example.StateCodec"  # Spark takes any CompressionCodec class

CASES = [
    "window-changelog",
    "window-zip",
    "dedup-changelog",
    "dedup-zip",
    "session-changelog",
    "window-format2",
    "window-format2-zip",
    "dedup-format2",
]
Oracle = dict[str, dict[int, set[Entry]]]


@pytest.fixture(scope="module")
def oracle(spark: Any, rocksdb_checkpoints: dict[str, Path]) -> Oracle:
    # Spark's reader finds format 2's files only with the format set in its session.
    format2 = spark.newSession()
    format2.conf.set(FORMAT_VERSION_CONF, "2")
    return {
        name: spark_state(
            format2 if ROCKSDB_RUNS[name][2] == 2 else spark,
            rocksdb_checkpoints[name],
            Checkpoint(rocksdb_checkpoints[name]).committed_epochs(),
        )
        for name in CASES
    }


def _store_files(root: Path, suffix: str) -> list[Path]:
    return sorted((root / "state" / "0").glob(f"*/*.{suffix}"))


@pytest.mark.parametrize("name", CASES)
def test_full_state_and_changes_equal_spark_reader(
    name: str, rocksdb_checkpoints: dict[str, Path], oracle: Oracle, tmp_path: Path
) -> None:
    root = rocksdb_checkpoints[name]
    checkpoint = Checkpoint(root)
    reader = RocksDBStoreReader.open(checkpoint, 0, scratch_dir=tmp_path)
    epochs = checkpoint.committed_epochs()
    assert epochs == list(range(len(epochs))) and len(epochs) >= 4
    if name.endswith("-zip"):
        assert not _store_files(root, "changelog")
    else:
        assert len(_store_files(root, "changelog")) == 2 * len(epochs)
    removals = assert_matches_oracle(reader, epochs, oracle[name])
    assert any(oracle[name].values()), "the state is always empty"
    assert removals > 0, "the watermark never removed a key"
    assert list(tmp_path.iterdir()) == [], "a snapshot's scratch directory was left behind"


def _wait_for_zips(root: Path) -> dict[str, int]:
    """The oldest snapshot version of each partition, once both have one."""
    deadline = time.monotonic() + 20
    while True:
        oldest = {p.parent.name: int(p.stem) for p in reversed(_store_files(root, "zip"))}
        if set(oldest) == {"0", "1"} or time.monotonic() > deadline:
            return oldest
        time.sleep(0.2)


@pytest.mark.parametrize("name", ["window-changelog", "dedup-changelog"])
def test_snapshots_and_changelogs_each_rebuild_the_same_state(
    name: str, rocksdb_checkpoints: dict[str, Path], oracle: Oracle, tmp_path: Path
) -> None:
    oldest = _wait_for_zips(rocksdb_checkpoints[name])
    assert set(oldest) == {"0", "1"}, "maintenance wrote no snapshot"
    for snapshot in _store_files(rocksdb_checkpoints[name], "zip"):
        # Uploaded after their version committed, so the readers use them.
        assert snapshot.stat().st_mtime_ns >= snapshot.with_suffix(".changelog").stat().st_mtime_ns
    latest = Checkpoint(rocksdb_checkpoints[name]).latest_committed()
    assert latest is not None
    # Without the changelogs a snapshot covers, versions from the snapshot on can
    # only be rebuilt through it.
    through_zips = tmp_path / "zips"
    copy_checkpoint(rocksdb_checkpoints[name], through_zips)
    for partition, snapshot_version in oldest.items():
        for changelog in (through_zips / "state" / "0" / partition).glob("*.changelog"):
            if int(changelog.stem) <= snapshot_version:
                changelog.unlink()
    reader = RocksDBStoreReader.open(Checkpoint(through_zips), 0)
    for version in range(max(oldest.values()), latest + 2):
        assert frozen(reader.full_state(version)) == oracle[name][version - 1]
    with pytest.raises(MissingStateFile):
        list(reader.full_state(min(oldest.values()) - 1))
    # Without any snapshot, every version replays the changelogs from version 1.
    through_changelogs = tmp_path / "changelogs"
    copy_checkpoint(rocksdb_checkpoints[name], through_changelogs)
    for snapshot in _store_files(through_changelogs, "zip"):
        snapshot.unlink()
    reader = RocksDBStoreReader.open(Checkpoint(through_changelogs), 0)
    for version in range(1, latest + 2):
        assert frozen(reader.full_state(version)) == oracle[name][version - 1]


def test_without_changelogs_changes_are_the_snapshot_difference(
    rocksdb_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    copy = tmp_path / "cp"
    copy_checkpoint(rocksdb_checkpoints["window-zip"], copy)
    reader = RocksDBStoreReader.open(Checkpoint(copy), 0)
    assert list(reader.full_state(0)) == []
    before = frozen(reader.full_state(2))
    after = frozen(reader.full_state(3))
    changes = list(reader.changes(3))
    removed = {(c.partition, freeze(c.key)) for c in changes if c.value is None}
    put = {(c.partition, freeze(c.key), freeze(c.value)) for c in changes if c.value is not None}
    assert removed == {(p, k) for p, k, _ in before} - {(p, k) for p, k, _ in after}
    assert put == after - before
    for partition in ("0", "1"):
        (copy / "state" / "0" / partition / "2.zip").unlink()
    assert not reader.has_delta(3) and not reader.has_delta(2)
    with pytest.raises(
        MissingStateFile, match=r"2\.changelog: does not exist; rebuilding version 2 from 1\.zip"
    ):
        list(reader.changes(3))
    with pytest.raises(MissingStateFile, match=r"2\.changelog: does not exist$"):
        list(reader.changes(2))
    with pytest.raises(
        MissingStateFile, match=r"2\.changelog: does not exist; rebuilding version 2 from 1\.zip"
    ):
        list(reader.full_state(2))
    assert frozen(reader.full_state(3)) == after


def _committed_ids(root: Path, epoch: int) -> list[str]:
    """The unique ids ``commits/<epoch>`` records for operator 0's store, per partition."""
    text = (root / "commits" / str(epoch)).read_text(encoding="utf-8")
    assert text.startswith("v2\n")
    return [ids for (ids,) in json.loads(text.split("\n", 1)[1])["stateUniqueIds"]["0"]]


def _version(state_file: Path) -> int:
    return int(state_file.name.split("_")[0].split(".")[0])


@pytest.mark.parametrize("name", ["window-format2", "window-format2-zip"])
def test_format_2_reads_the_committed_attempt_only(
    name: str, rocksdb_checkpoints: dict[str, Path], oracle: Oracle, tmp_path: Path
) -> None:
    copy = tmp_path / "cp"
    copy_checkpoint(rocksdb_checkpoints[name], copy)
    epochs = Checkpoint(copy).committed_epochs()
    for epoch in epochs:
        ids = _committed_ids(copy, epoch)
        for partition, unique_id in enumerate(ids):
            directory = copy / "state" / "0" / str(partition)
            committed = sorted(directory.glob(f"{epoch + 1}_{unique_id}.*"))
            assert committed and all(p.suffix in (".changelog", ".zip", ".crc") for p in committed)
    # As if an attempt at each version had failed after writing files of its own:
    # valid files of another version, under another unique id.
    for epoch in epochs:
        other = epochs[-1] if epoch != epochs[-1] else epochs[0]
        for partition, unique_id in enumerate(_committed_ids(copy, other)):
            directory = copy / "state" / "0" / str(partition)
            failed = uuid.uuid4()
            for source in directory.glob(f"{other + 1}_{unique_id}.*"):
                if source.suffix in (".changelog", ".zip"):
                    shutil.copy(source, directory / f"{epoch + 1}_{failed}{source.suffix}")
    reader = RocksDBStoreReader.open(Checkpoint(copy), 0)
    assert_matches_oracle(reader, epochs, oracle[name])
    if name.endswith("-zip"):
        assert all(reader.has_full(epoch + 1) for epoch in epochs)


def test_format_2_rebuilds_a_version_along_its_changelogs_lineage(
    rocksdb_checkpoints: dict[str, Path], oracle: Oracle, tmp_path: Path
) -> None:
    name = "window-format2"
    root = rocksdb_checkpoints[name]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and {p.parent.name for p in _store_files(root, "zip")} != {"0", "1"}:
        time.sleep(0.2)
    zips = _store_files(root, "zip")
    assert {p.parent.name for p in zips} == {"0", "1"}, "maintenance wrote no snapshot"
    latest = Checkpoint(root).latest_committed()
    assert latest is not None
    # Without any snapshot: each version replays the changelogs its lineage names,
    # following the lineage of the oldest one named when it ends at a snapshot.
    no_zips = tmp_path / "no_zips"
    copy_checkpoint(root, no_zips)
    for snapshot in _store_files(no_zips, "zip"):
        snapshot.unlink()
    reader = RocksDBStoreReader.open(Checkpoint(no_zips), 0)
    for version in range(1, latest + 2):
        assert frozen(reader.full_state(version)) == oracle[name][version - 1], f"version {version}"
    # Without the changelogs up to each partition's oldest snapshot: versions from the
    # snapshot on are rebuilt through it.
    through_zips = tmp_path / "through_zips"
    copy_checkpoint(root, through_zips)
    oldest = {p.parent.name: _version(p) for p in reversed(_store_files(through_zips, "zip"))}
    for partition, snapshot_version in oldest.items():
        for changelog in (through_zips / "state" / "0" / partition).glob("*.changelog"):
            if _version(changelog) <= snapshot_version:
                changelog.unlink()
    reader = RocksDBStoreReader.open(Checkpoint(through_zips), 0)
    for version in range(max(oldest.values()), latest + 2):
        assert frozen(reader.full_state(version)) == oracle[name][version - 1], f"version {version}"
    with pytest.raises(MissingStateFile, match=r"\.changelog: does not exist"):
        list(reader.full_state(min(oldest.values()) - 1))


def test_format_2_needs_the_commit_logs_ids(
    rocksdb_checkpoints: dict[str, Path], oracle: Oracle, tmp_path: Path
) -> None:
    name = "window-format2"
    # A purged commit entry: the version it committed cannot be found, later
    # versions still can (through their changelogs' lineage).
    purged = tmp_path / "purged"
    copy_checkpoint(rocksdb_checkpoints[name], purged)
    (purged / "commits" / "1").unlink()
    reader = RocksDBStoreReader.open(Checkpoint(purged), 0)
    with pytest.raises(
        MissingStateFile, match=r"commits/1: does not exist; the unique id of store version 2"
    ):
        list(reader.full_state(2))
    assert not reader.has_delta(2) and not reader.has_full(2)
    assert frozen(reader.full_state(4)) == oracle[name][3]
    # Commit entries without the ids, beside files with ids: refused, not guessed.
    stripped = tmp_path / "stripped"
    copy_checkpoint(rocksdb_checkpoints[name], stripped)
    for commit in (stripped / "commits").iterdir():
        if not commit.name.startswith("."):
            commit.write_text('v1\n{"nextBatchWatermarkMs":0}', encoding="utf-8")
    reader = RocksDBStoreReader.open(Checkpoint(stripped), 0)
    for read in (reader.changes, reader.full_state):
        with pytest.raises(UnsupportedCheckpoint, match=r"checkpointFormatVersion=2"):
            list(read(3))


def _with_conf(root: Path, copy: Path, **conf: str) -> Checkpoint:
    """A copy of the checkpoint whose offset log entries carry other conf values."""
    return _with_conf_from(root, copy, 0, conf)


def _with_conf_from(root: Path, copy: Path, from_epoch: int, conf: dict[str, str]) -> Checkpoint:
    """A copy of the checkpoint whose offset log entries of ``from_epoch`` on carry
    other conf values."""
    copy_checkpoint(root, copy)
    for entry in (copy / "offsets").iterdir():
        if entry.name.isdigit() and int(entry.name) >= from_epoch:
            version, meta, *rest = entry.read_text(encoding="utf-8").split("\n")
            obj = json.loads(meta)
            obj["conf"].update(conf)
            entry.write_text("\n".join([version, json.dumps(obj), *rest]), encoding="utf-8")
    return Checkpoint(copy)


def test_factory_picks_the_reader_of_the_provider(
    rocksdb_checkpoints: dict[str, Path], checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    rocks = Checkpoint(rocksdb_checkpoints["dedup-changelog"])
    hdfs = Checkpoint(checkpoints["dedup"])
    assert rocks.provider_kind() == "rocksdb" and rocks.provider_kind(0) == "rocksdb"
    assert hdfs.provider_kind() == "hdfs"
    for checkpoint, kind in ((rocks, RocksDBStoreReader), (hdfs, HdfsStoreReader)):
        key, value = checkpoint.store_schema(0)
        reader = open_store_reader(checkpoint, 0, "default", 2, key, value, 1)
        assert isinstance(reader, kind)
        assert reader.has_delta(2)
        assert {c.partition for c in reader.full_state(2)} == {0, 1}
    with pytest.raises(UnsupportedCheckpoint, match=r"stateStore\.providerClass"):
        list(RocksDBStoreReader.open(hdfs, 0).changes(1))
    other = _with_conf(
        rocksdb_checkpoints["dedup-changelog"],
        tmp_path / "other",
        **{"spark.sql.streaming.stateStore.providerClass": "com.example.Provider"},
    )
    with pytest.raises(UnsupportedCheckpoint, match=r"com\.example\.Provider"):
        other.provider_kind()
    avro = _with_conf(
        rocksdb_checkpoints["dedup-changelog"],
        tmp_path / "avro",
        **{"spark.sql.streaming.stateStore.encodingFormat": "avro"},
    )
    with pytest.raises(UnsupportedCheckpoint, match=r"encodingFormat=avro"):
        list(RocksDBStoreReader.open(avro, 0).full_state(1))
    unknown_codec = _with_conf(
        rocksdb_checkpoints["dedup-changelog"],
        tmp_path / "codec",
        **{"spark.sql.streaming.stateStore.compression.codec": UNKNOWN_CODEC},
    )
    reader = RocksDBStoreReader.open(unknown_codec, 0)
    with pytest.raises(UnsupportedCheckpoint, match=rf"codec={UNKNOWN_CODEC}; readable: lz4, lzf, snappy"):
        list(reader.changes(1))
    checksums = {"spark.sql.streaming.stateStore.rowChecksum.enabled": "true"}
    for root, kind in (
        (rocksdb_checkpoints["dedup-changelog"], RocksDBStoreReader),
        (checkpoints["dedup"], HdfsStoreReader),
    ):
        with_checksums = _with_conf(root, tmp_path / f"checksums-{kind.__name__}", **checksums)
        reader = kind.open(with_checksums, 0)
        for read in (reader.changes, reader.full_state):
            with pytest.raises(UnsupportedCheckpoint, match=r"rowChecksum\.enabled=true"):
                list(read(1))


# The HDFS-backed provider has one row encoding (avro is for transformWithState).
PER_EPOCH_CASES = [
    *((name, conf) for name in ("dedup-changelog", "dedup-zip") for conf in (ROW_CHECKSUM, ENCODING, CODEC)),
    ("hdfs", ROW_CHECKSUM),
    ("hdfs", CODEC),
]


@pytest.mark.parametrize(("name", "conf"), PER_EPOCH_CASES, ids=lambda v: v.rsplit(".", 1)[-1])
def test_settings_are_judged_per_epoch(
    rocksdb_checkpoints: dict[str, Path], checkpoints: dict[str, Path], tmp_path: Path, name: str, conf: str
) -> None:
    """A setting that differs from some epoch on refuses exactly the versions those
    epochs wrote, naming the epoch or file; the earlier versions read as before."""
    root = checkpoints["dedup"] if name == "hdfs" else rocksdb_checkpoints[name]
    epochs = Checkpoint(root).committed_epochs()
    changed = epochs[len(epochs) // 2]
    value = {ROW_CHECKSUM: "true", ENCODING: "avro", CODEC: UNKNOWN_CODEC}[conf]
    kind = HdfsStoreReader if name == "hdfs" else RocksDBStoreReader
    original = kind.open(Checkpoint(root), 0)
    reader = kind.open(_with_conf_from(root, tmp_path / "changed", changed, {conf: value}), 0)
    before = epochs[: epochs.index(changed)]
    assert before
    for epoch in before:
        assert frozen(reader.full_state(epoch + 1)) == frozen(original.full_state(epoch + 1)), epoch
        assert frozen(reader.changes(epoch + 1)) == frozen(original.changes(epoch + 1)), epoch
    for epoch in epochs[epochs.index(changed) :]:
        if name == "dedup-zip" and conf == CODEC:
            # Snapshots only: the codec compresses changelogs, and there are none.
            assert frozen(reader.changes(epoch + 1)) == frozen(original.changes(epoch + 1))
            continue
        # A changelog names itself: the state rebuilt at a version may stop at an
        # earlier changelog written since the change.
        by_file = conf == CODEC and name != "hdfs"
        for read, where in (
            (reader.changes, f"/{epoch + 1}.changelog:" if by_file else f"epoch {epoch}"),
            (reader.full_state, ".changelog:" if by_file else f"epoch {epoch}"),
        ):
            with pytest.raises(UnsupportedCheckpoint) as refused:
                list(read(epoch + 1))
            assert where in str(refused.value) and f"{conf}={value}" in str(refused.value)


def test_session_window_keys_have_a_prefix(rocksdb_checkpoints: dict[str, Path]) -> None:
    checkpoint = Checkpoint(rocksdb_checkpoints["session-changelog"])
    ((store,),) = (op.stores for op in checkpoint.operators())
    assert store.num_cols_prefix_key == 1
    key, value = checkpoint.store_schema(0)
    assert key.names[0] == "sh"
    expected = frozen(RocksDBStoreReader.open(checkpoint, 0).full_state(3))
    looked_up = RocksDBStoreReader(checkpoint, 0, "default", 2, key, value)
    assert expected and frozen(looked_up.full_state(3)) == expected
    wrong = RocksDBStoreReader(checkpoint, 0, "default", 2, key, value, num_cols_prefix_key=0)
    with pytest.raises(CorruptStateFile, match="not version 0"):
        list(wrong.full_state(3))


def test_every_snapshot_spark_took_agrees_with_its_changelog(rocksdb_checkpoints: dict[str, Path]) -> None:
    # The content check must never turn down the committed attempt's own snapshot: on
    # every zip Spark's maintenance wrote beside a changelog, both its values and its
    # sequence numbers agree with the changelog.
    checked = sequenced = 0
    for name in ("window-changelog", "dedup-changelog", "session-changelog"):
        _wait_for_zips(rocksdb_checkpoints[name])
        files = RocksDBStoreReader.open(Checkpoint(rocksdb_checkpoints[name]), 0)._files
        for snapshot in _store_files(rocksdb_checkpoints[name], "zip"):
            partition, version = int(snapshot.parent.name), int(snapshot.stem)
            if not snapshot.with_suffix(".changelog").is_file():
                continue
            assert files.committed_snapshot(partition, version, True) is not None, snapshot
            records = as_records(files.changelogs.changelog_rows(partition, version))
            with SnapshotReader(open_location(snapshot)) as opened:
                current = opened.extracted("CURRENT").read_text().strip()
                manifest = parse_manifest(opened.extracted(current).read_bytes())
                tables = {f.local_name: opened.extracted(f.local_name) for f in opened.metadata.files}
                assert sequence_disagreement(manifest, tables, records) is None, snapshot
                floor = manifest.last_sequence - len(records)
                sequenced += any(f.largest_sequence > floor for f in manifest.files.values())
            checked += 1
    assert checked >= 4 and sequenced >= 1, (checked, sequenced)


def test_a_failed_attempts_snapshot_is_told_by_content_not_time(
    rocksdb_checkpoints: dict[str, Path], oracle: Oracle, tmp_path: Path
) -> None:
    name = "window-changelog"
    _wait_for_zips(rocksdb_checkpoints[name])
    copy = tmp_path / "cp"
    copy_checkpoint(rocksdb_checkpoints[name], copy)
    store_dir = copy / "state" / "0" / "0"
    oldest = min(int(p.stem) for p in store_dir.glob("*.zip"))
    latest = Checkpoint(copy).latest_committed()
    assert latest is not None
    # A snapshot holding another state than the changelog of its version leads to, as
    # a failed attempt's would: the oldest zip again (its table files are there) under
    # the name of a later version, taken at, before and after the changelog's second.
    version = next(v for v in range(oldest + 1, latest + 2) if not (store_dir / f"{v}.zip").exists())
    stale = store_dir / f"{version}.zip"
    shutil.copy(store_dir / f"{oldest}.zip", stale)
    changelog = stale.with_suffix(".changelog").stat().st_mtime_ns
    second = changelog // 10**9 * 10**9
    for mtime in (changelog, second, second + 10**9, second - 10**9):
        os.utime(stale, ns=(mtime, mtime))
        reader = RocksDBStoreReader.open(Checkpoint(copy), 0)
        assert reader._files.committed_snapshot(0, version, True) is None
        assert frozen(reader.full_state(version)) == oracle[name][version - 1]
        assert not reader.has_full(version)
    # A snapshot that is not a zip at all is damage, not a failed attempt.
    stale.write_bytes(b"not a zip")
    with pytest.raises(CorruptStateFile, match=rf"{version}\.zip"):
        list(RocksDBStoreReader.open(Checkpoint(copy), 0).full_state(version))
