"""The sources layer against Spark's own state reader (``format("statestore")``)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from epochstate.core.sparktypes import (
    ArrayType,
    AtomicType,
    DecimalType,
    MapType,
    StructType,
)
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.daemon.sources.errors import MissingStateFile
from epochstate.daemon.sources.hdfs_backed.provider import HdfsStoreReader
from tests.fixtures.streams import copy_checkpoint
from tests.sources.spark_state import Entry, assert_matches_oracle, frozen, spark_state

pytestmark = pytest.mark.spark


JOIN_STORES = (
    "left-keyToNumValues",
    "left-keyWithIndexToValue",
    "right-keyToNumValues",
    "right-keyWithIndexToValue",
)
CASES = [
    ("plain", "default"),
    ("window", "default"),
    ("dedup", "default"),
    *(("join", store) for store in JOIN_STORES),
]


Oracle = dict[tuple[str, str], dict[int, set[Entry]]]


@pytest.fixture(scope="module")
def oracle(spark: Any, checkpoints: dict[str, Path]) -> Oracle:
    return {
        (name, store): spark_state(
            spark, checkpoints[name], Checkpoint(checkpoints[name]).committed_epochs(), store
        )
        for name, store in CASES
    }


@pytest.mark.parametrize(("name", "store"), CASES)
def test_full_state_and_changes_equal_spark_reader(
    name: str, store: str, checkpoints: dict[str, Path], oracle: Oracle
) -> None:
    checkpoint = Checkpoint(checkpoints[name])
    reader = HdfsStoreReader.open(checkpoint, 0, store)
    epochs = checkpoint.committed_epochs()
    assert epochs == list(range(len(epochs))) and len(epochs) >= 4
    removals = assert_matches_oracle(reader, epochs, oracle[name, store])
    assert any(oracle[name, store].values()), "the state is always empty"
    if name != "plain":
        assert removals > 0, "the watermark never removed a key"


def _wait_for_snapshots(root: Path) -> list[Path]:
    deadline = time.monotonic() + 20
    while True:
        snapshots = sorted((root / "state").glob("0/*/*.snapshot"))
        partitions = {p.parent.name for p in snapshots}
        if partitions == {"0", "1"} or time.monotonic() > deadline:
            return snapshots
        time.sleep(0.2)


@pytest.mark.parametrize("name", ["window", "dedup"])
def test_snapshots_rebuild_the_same_state(
    name: str,
    checkpoints: dict[str, Path],
    oracle: Oracle,
    tmp_path: Path,
) -> None:
    snapshots = _wait_for_snapshots(checkpoints[name])
    assert {p.parent.name for p in snapshots} == {"0", "1"}, "maintenance wrote no snapshot"
    # A copy without the deltas a snapshot covers: every version from the oldest
    # snapshot on can only be rebuilt through that snapshot.
    copy = tmp_path / "cp"
    copy_checkpoint(checkpoints[name], copy)
    oldest = {p.parent.name: int(p.stem) for p in reversed(snapshots)}
    for partition, snapshot_version in oldest.items():
        for delta in (copy / "state" / "0" / partition).glob("*.delta"):
            if int(delta.stem) <= snapshot_version:
                delta.unlink()
    reader = HdfsStoreReader.open(Checkpoint(copy), 0)
    first = max(oldest.values())
    latest = Checkpoint(copy).latest_committed()
    assert latest is not None and first <= latest + 1
    for version in range(first, latest + 2):
        assert frozen(list(reader.full_state(version))) == oracle[name, "default"][version - 1]
    with pytest.raises(MissingStateFile):
        list(reader.full_state(min(oldest.values()) - 1))
    with pytest.raises(MissingStateFile):
        list(reader.changes(min(oldest.values())))


def test_schemas_of_the_rich_aggregation(checkpoints: dict[str, Path]) -> None:
    key, value = Checkpoint(checkpoints["plain"]).store_schema(0)
    assert key.names == ("sh", "s", "dec", "b", "st", "arr")
    assert isinstance(key.fields[4].type, StructType)
    kinds = {type(f.type) for f in value.fields}
    assert {MapType, ArrayType, StructType, DecimalType, AtomicType} <= kinds
    dedup_key, dedup_value = Checkpoint(checkpoints["dedup"]).store_schema(0)
    assert len(dedup_key.fields) > 64  # a null bitset of two words
    assert [f.type for f in dedup_value.fields] == [AtomicType("null")]


def test_a_failed_attempts_snapshot_is_told_by_content_not_time(
    checkpoints: dict[str, Path], oracle: Oracle, tmp_path: Path
) -> None:
    name = "window"
    _wait_for_snapshots(checkpoints[name])
    copy = tmp_path / "cp"
    copy_checkpoint(checkpoints[name], copy)
    store_dir = copy / "state" / "0" / "0"
    latest = Checkpoint(copy).latest_committed()
    assert latest is not None
    versions = sorted(int(p.stem) for p in store_dir.glob("*.snapshot"))
    reader = HdfsStoreReader.open(Checkpoint(copy), 0)

    def disagrees(snapshot: int, version: int) -> bool:
        held = dict(reader._records(store_dir_location / f"{snapshot}.snapshot", False))
        written = dict(reader._records(store_dir_location / f"{version}.delta", True))
        return any(held.get(k) != v for k, v in written.items())

    # A version without a snapshot, given one holding other values for keys its delta
    # writes, as a failed attempt's would: an earlier version's, written at, before and
    # after the delta's second.
    store_dir_location = Checkpoint(copy).store_dir(0, 0)
    version, donor = next(
        (v, d)
        for v in range(latest + 1, 1, -1)
        if v not in versions
        for d in versions
        if d < v and disagrees(d, v)
    )
    stale = store_dir / f"{version}.snapshot"
    shutil.copy(store_dir / f"{donor}.snapshot", stale)
    delta = stale.with_suffix(".delta").stat().st_mtime_ns
    second = delta // 10**9 * 10**9
    for mtime in (delta, second, second + 10**9, second - 10**9):
        os.utime(stale, ns=(mtime, mtime))
        fresh = HdfsStoreReader.open(Checkpoint(copy), 0)
        assert frozen(list(fresh.full_state(version))) == oracle[name, "default"][version - 1]
        assert not fresh.has_full(version)
